"""A sliding-window rate limit per key (a user, a client address), bounded in memory.

Each key keeps the times of its last ``limit`` admitted events; one more within ``window`` seconds
is refused with how long to wait. At most ``keys`` keys are kept: past that the least recently
seen is forgotten, so a flood of distinct keys (addresses, made-up user names) costs bounded
memory, and a forgotten key starts afresh (a limit, not a ban list).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable


class RateLimit:
    def __init__(
        self,
        limit: int,
        window: float,
        *,
        keys: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.window = window
        self.keys = keys
        self.clock = clock
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()

    def retry_after(self, key: str) -> int | None:
        """None when one more event of ``key`` would be admitted now, else the whole seconds to
        wait before one would be (``Retry-After``). Counts nothing (``note`` does)."""
        times = self._times(key)
        if len(times) < self.limit:
            return None
        return max(1, math.ceil(times[0] + self.window - self.clock()))

    def note(self, key: str) -> None:
        """Count one event of ``key`` now."""
        self._times(key).append(self.clock())

    def refund(self, key: str) -> None:
        """Take back the latest event counted of ``key`` (one that turned out not to count)."""
        times = self._seen.get(key)
        if times:
            times.pop()

    def take(self, key: str) -> int | None:
        """``retry_after``, and when admitted the event counted."""
        wait = self.retry_after(key)
        if wait is None:
            self.note(key)
        return wait

    def _times(self, key: str) -> deque[float]:
        """``key``'s times within the window, it made the most recently seen key."""
        now = self.clock()
        times = self._seen.pop(key, None)
        if times is None:
            times = deque(maxlen=self.limit)
        while times and times[0] <= now - self.window:
            times.popleft()
        self._seen[key] = times
        if len(self._seen) > self.keys:
            self._seen.popitem(last=False)
        return times
