"""Phases of the tests' own, that witness when they run, under which replica and fence.

The daemon loads them by import path (``tests.support.phases:first``) in process tests; each writes
one JSON line when it enters and one when it leaves to ``$PLAYGUARD_TEST_WITNESS_DIR/<pid>.jsonl``,
with ``time.monotonic()`` stamps (one clock for every process on the machine), and takes
``$PLAYGUARD_TEST_PHASE_SECONDS`` seconds.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from playguard_async.phase import PhaseContext, PhaseReport


class WitnessPhase:
    def __init__(self, name: str) -> None:
        self.name = name

    def _write(self, ctx: PhaseContext, event: str, **extra: Any) -> None:
        witness_dir = Path(os.environ["PLAYGUARD_TEST_WITNESS_DIR"])
        line = {
            "event": event,
            "phase": self.name,
            "marquee": ctx.marquee.name,
            "fence": ctx.lease.fence,
            "replica": ctx.lease.lock.replica,
            "pid": os.getpid(),
            "t": time.monotonic(),
            **extra,
        }
        with (witness_dir / f"{os.getpid()}.jsonl").open("a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")

    async def __call__(self, ctx: PhaseContext) -> PhaseReport:
        self._write(ctx, "enter")
        status = "cancelled"
        try:
            await asyncio.sleep(float(os.environ.get("PLAYGUARD_TEST_PHASE_SECONDS", "0.2")))
            status = "ok"
        finally:
            self._write(ctx, "exit", status=status)
        return PhaseReport(actions=[f"witnessed {ctx.marquee.name}"])


first = WitnessPhase("first")
second = WitnessPhase("second")


def read_witness(witness_dir: Path) -> list[dict[str, Any]]:
    """Every line every process wrote, in time order."""
    lines = [
        json.loads(line)
        for path in witness_dir.glob("*.jsonl")
        for line in path.read_text(encoding="utf-8").splitlines()
        if line
    ]
    return sorted(lines, key=lambda line: line["t"])
