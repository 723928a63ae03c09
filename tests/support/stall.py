"""A tick that hangs for as long as a test says, inside a real daemon process.

Nothing a tick awaits can hang any more by design: the desired-state read runs in the background
once a state is in force, and every Redis call is bounded in time. What the liveness check and
the systemd watchdog stand guard against is a defect: an await that lost its bound. So a test
that needs a stalled tick loop stalls the tick itself. The daemon imports this module as its
phase (``tests.support.stall:phase``), which wraps ``Engine.tick`` to wait while the file
``$PLAYGUARD_TEST_STALL_FLAG`` exists; the event loop, the HTTP server and the heartbeat run on
meanwhile, as they would around such a defect.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from playguard_async.engine.results import CycleResult
from playguard_async.engine.scheduler import Engine
from tests.support.phases import first

_tick = Engine.tick


async def _stalling_tick(self: Engine) -> list[asyncio.Task[CycleResult]]:
    flag = Path(os.environ["PLAYGUARD_TEST_STALL_FLAG"])
    while flag.exists():  # noqa: ASYNC110 - another process removes it: no event to wait on
        await asyncio.sleep(0.02)
    return await _tick(self)


Engine.tick = _stalling_tick  # type: ignore[method-assign]
phase = first
