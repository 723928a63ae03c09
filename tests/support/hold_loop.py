"""A phase that holds the event loop, inside a real daemon process: the defect the loop's watch
(``service.loop_health``) stands guard against.

The daemon imports it as its phase (``tests.support.hold_loop:phase``); every run blocks the loop
for ``$PLAYGUARD_TEST_HOLD_SECONDS`` seconds with a call that never yields, as a reader that never
waits or a CPU-bound call would, while the watchdog's thread runs on.
"""

from __future__ import annotations

import os
import time

from playguard_async.phases.protocol import PhaseContext, PhaseReport


class HoldingPhase:
    name = "hold"

    async def __call__(self, ctx: PhaseContext) -> PhaseReport:
        time.sleep(float(os.environ["PLAYGUARD_TEST_HOLD_SECONDS"]))  # noqa: ASYNC251 - the defect
        return PhaseReport(actions=[])


phase = HoldingPhase()
