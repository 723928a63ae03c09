"""A desired-state read that hangs for as long as a test says, inside a real daemon process.

The inventory reader itself can no longer hang (it refuses FIFOs and bounds every read in time),
so a test that needs a stalled tick loop stalls it where a slow source would: in the source's
``load()``. The daemon imports this module as its phase (``tests.support.stall:phase``), which
wraps ``YamlInventorySource.load`` to wait while the file ``$PLAYGUARD_TEST_STALL_FLAG`` exists;
the event loop, the HTTP server and the heartbeat run on meanwhile, as with a hung mount.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from playguard_async.desired_state.inventory import Inventory, YamlInventorySource
from tests.support.phases import first

_read = YamlInventorySource.load


async def _stalling_load(self: YamlInventorySource) -> Inventory:
    flag = Path(os.environ["PLAYGUARD_TEST_STALL_FLAG"])
    while flag.exists():  # noqa: ASYNC110 - another process removes it: no event to wait on
        await asyncio.sleep(0.02)
    return await _read(self)


YamlInventorySource.load = _stalling_load  # type: ignore[method-assign]
phase = first
