"""Whether the tick loop still turns: the one test behind /healthz and systemd's watchdog."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

LIVE_TICK_INTERVALS = 2.0
"""A tick loop is alive while its last tick is at most this many tick intervals old: one interval
is the normal gap, the second absorbs a slow tick and skipped grid points."""


def loop_alive(now: float, last_tick: float, interval: float) -> bool:
    """Whether a tick loop that last ticked at ``last_tick`` still turns at ``now``."""
    return now - last_tick <= LIVE_TICK_INTERVALS * interval


@dataclass(frozen=True)
class Pulse:
    """One reading of the tick loop's liveness."""

    alive: bool
    age: float
    limit: float
    draining: bool

    def describe(self) -> str:
        if self.draining:
            return f"draining, last tick {self.age:.1f} s ago"
        state = "ticking" if self.alive else "tick loop stalled"
        return f"{state}, last tick {self.age:.1f} s ago (limit {self.limit:g} s)"


@dataclass
class Liveness:
    """Whether the tick loop still turns: the one test behind /healthz and systemd's watchdog.

    Before the first tick, age counts from ``since`` (the start). A draining engine has stopped
    ticking on purpose and counts as alive: its drain is bounded by ``shutdown_grace``, and the
    service manager's stop timeout bounds the rest.
    """

    interval: float
    last_tick: Callable[[], float | None]
    draining: Callable[[], bool]
    since: float = field(default_factory=time.monotonic)

    def check(self, now: float | None = None) -> Pulse:
        now = time.monotonic() if now is None else now
        last = self.last_tick()
        reference = self.since if last is None else last
        draining = self.draining()
        return Pulse(
            alive=draining or loop_alive(now, reference, self.interval),
            age=now - reference,
            limit=LIVE_TICK_INTERVALS * self.interval,
            draining=draining,
        )
