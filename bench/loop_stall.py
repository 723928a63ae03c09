"""The longest time the event loop was held at once, as a benchmark sees it from the loop."""

from __future__ import annotations

import asyncio
import time
from types import TracebackType


class LoopStall:
    """``async with LoopStall() as stall:``: a 1 ms ticker runs on the loop for the block, and
    ``stall.ms`` is the longest gap it saw between two ticks (work moved off the loop, to a
    thread, must keep it near 1 ms)."""

    def __init__(self) -> None:
        self.ms = 0.0
        self._done = asyncio.Event()
        self._ticking: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LoopStall:
        self._ticking = asyncio.create_task(self._tick())
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._done.set()
        if self._ticking is not None:
            await self._ticking

    async def _tick(self) -> None:
        last = time.perf_counter()
        while not self._done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            self.ms, last = max(self.ms, (now - last) * 1000), now
