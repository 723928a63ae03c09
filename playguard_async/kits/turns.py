"""Turns of a long-lived reader's loop that always give the event loop back, and the back-off of
one that has to start again.

A reader that loops on a connection ("wait up to a second for a message, then look again") trusts
the client library to wait. When the connection is broken in a way the library takes for "no
message yet", every turn returns at once, no turn ever suspends, and the loop holds the event
loop for good: nothing else runs, not the cycles, not the HTTP endpoints (redis-py 8.1's
``PubSub.get_message`` after the kernel ended a black-holed connection with ETIMEDOUT; issue 48,
bench/README.md "Readers that cannot spin"). ``Turns`` makes that impossible whatever the
library does, and turns it into an error the reader already handles: start again.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable


class ReaderStalled(Exception):
    """A reader's turns came back empty without waiting, ``stall_after`` times in a row: its
    connection is broken in a way its library does not report. Start again on a new one."""


class Turns:
    """Paces the turns of one reader's loop over one connection.

    A turn is *empty* when it delivered nothing and came back sooner than ``least`` seconds after
    it began (a reader that asks to wait a second and is answered "nothing" at once). An empty turn
    waits out the rest of ``least``, so a broken reader turns at most once per ``least`` and
    never holds the loop; ``stall_after`` empty turns in a row raise ``ReaderStalled``. Every turn,
    empty or not, gives the loop back at least once, so a flood of messages already buffered (which
    a client library reads without suspending) cannot hold it either. One ``Turns`` per connection:
    a fresh connection starts with a clean count.
    """

    def __init__(
        self,
        *,
        least: float,
        stall_after: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if least <= 0 or stall_after < 1:
            raise ValueError(f"least must be > 0 and stall_after >= 1: {least!r}, {stall_after!r}")
        self.least = least
        self.stall_after = stall_after
        self._clock = clock
        self._began = clock()
        self.empty_in_a_row = 0

    def begin(self) -> None:
        """Mark the start of a turn."""
        self._began = self._clock()

    async def end(self, *, delivered: bool) -> None:
        """End the turn begun last: give the loop back, and pace or refuse an empty one."""
        short = self.least - (self._clock() - self._began)
        if delivered or short <= 0:
            self.empty_in_a_row = 0
            await asyncio.sleep(0)
            return
        self.empty_in_a_row += 1
        if self.empty_in_a_row >= self.stall_after:
            raise ReaderStalled(
                f"{self.empty_in_a_row} turns in a row came back empty within {self.least:g} s"
            )
        await asyncio.sleep(short)


_DOUBLINGS = 64
"""Doublings counted at most: past ``cap`` long before, and ``2**n`` stays a float."""


class Backoff:
    """How long a reader waits before it starts again: ``first`` seconds, doubled after each
    attempt that failed, at most ``cap``, each wait drawn from its upper half (jitter, so the
    replicas of a fleet that lost Redis together do not come back in step). ``reset`` once a
    start held: the next failure waits ``first`` again."""

    def __init__(
        self, *, first: float, cap: float, draw: Callable[[float, float], float] = random.uniform
    ) -> None:
        if not 0 < first <= cap:
            raise ValueError(f"need 0 < first <= cap: {first!r}, {cap!r}")
        self.first = first
        self.cap = cap
        self._draw = draw
        self.failures = 0

    def next_wait(self) -> float:
        """The wait before the next attempt; counts a failure."""
        ceiling = min(self.cap, self.first * 2 ** min(self.failures, _DOUBLINGS))
        self.failures += 1
        return self._draw(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.failures = 0
