"""Whether Redis answers, as the engine's calls find it, told in the log once per change of state.

While Redis is away every cycle of every Marquee fails to take its lock and to write its record,
tick after tick; a line for each would bury the one fact an operator needs. ``RedisOutage`` turns
the calls' successes and failures into three events: ``redis.down`` when the first call fails,
``redis.still_down`` at most every ``remind_every`` seconds while none succeeds, and
``redis.back`` with how long it was away when one succeeds again. The per-call lines are kept
at debug level meanwhile (``down`` tells the engine which ones).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

log = structlog.get_logger("playguard.redis")


class RedisOutage:
    """What the engine knows of Redis from its own calls; one instance per engine (replica)."""

    def __init__(
        self,
        address: str,
        *,
        remind_every: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.address = address
        self.remind_every = remind_every
        self._clock = clock
        self._since: float | None = None
        self._reminded = 0.0
        self._failures = 0

    @property
    def down(self) -> bool:
        """Whether the last call found Redis away."""
        return self._since is not None

    def failed(self, error: str) -> None:
        """A call failed (``error`` in words): the first one since Redis last answered logs
        ``redis.down``; later ones a ``redis.still_down`` every ``remind_every`` seconds."""
        now = self._clock()
        self._failures += 1
        if self._since is None:
            self._since = self._reminded = now
            log.error("redis.down", redis=self.address, error=error)
        elif now - self._reminded >= self.remind_every:
            self._reminded = now
            log.error(
                "redis.still_down", redis=self.address, error=error,
                down_for=round(now - self._since, 1), failed_calls=self._failures,
            )  # fmt: skip

    def answered(self) -> None:
        """A call succeeded: after an outage, ``redis.back`` says how long it lasted."""
        if self._since is None:
            return
        log.warning(
            "redis.back", redis=self.address, down_for=round(self._clock() - self._since, 1),
            failed_calls=self._failures,
        )  # fmt: skip
        self._since, self._failures = None, 0
