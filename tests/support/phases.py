"""Phases of the tests' own, that witness when they run, under which replica and fence.

The daemon loads them by import path (``tests.support.phases:first``) in process tests; each writes
one JSON line when it enters and one when it leaves to ``$PLAYGUARD_TEST_WITNESS_DIR/<pid>.jsonl``,
with ``time.monotonic()`` stamps (one clock for every process on the machine), and takes
``phase_seconds()``. ``fenced_write`` also writes to its (real, lab) Marquee.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import time
from pathlib import Path
from typing import Any

from playguard_async.coordination.fence import FenceRefused
from playguard_async.phases.protocol import PhaseContext, PhaseReport
from playguard_async.remote.ssh import RemoteSession

_phases_begun = itertools.count()


def phase_seconds() -> float:
    """How long a witnessing phase takes: ``$PLAYGUARD_TEST_FIRST_PHASE_SECONDS``, when set, for
    the first phase this process begins, ``$PLAYGUARD_TEST_PHASE_SECONDS`` for every other. A
    test that needs one long phase to land a signal in waits that long once, not every cycle."""
    first = os.environ.get("PLAYGUARD_TEST_FIRST_PHASE_SECONDS")
    if first is not None and next(_phases_begun) == 0:
        return float(first)
    return float(os.environ.get("PLAYGUARD_TEST_PHASE_SECONDS", "0.2"))


class Witness:
    """What every witnessing phase writes, and where."""

    def __init__(self, name: str) -> None:
        self.name = name

    def _write(self, ctx: PhaseContext[Any], event: str, **extra: Any) -> None:
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


class WitnessPhase(Witness):
    async def __call__(self, ctx: PhaseContext) -> PhaseReport:
        self._write(ctx, "enter")
        status = "cancelled"
        try:
            await asyncio.sleep(phase_seconds())
            status = "ok"
        finally:
            self._write(ctx, "exit", status=status)
        return PhaseReport(actions=[f"witnessed {ctx.marquee.name}"])


class FencedWriteWitness(Witness):
    """Takes its time, then writes to the host through the fenced funnel: a line "<fence> <pid>"
    appended to ``$PLAYGUARD_TEST_HOST_RECORD_DIR/<marquee>``, on the lab host.

    The wait and the write run shielded from the phase's cancellation, as a write already on
    its way would be: a replica frozen in the wait (SIGSTOP past its ttl) sends its write once it
    wakes, whatever its engine decided meanwhile, so only the host can refuse it. Each write's
    fate is witnessed as a ``write`` line (``accepted`` or ``refused`` with the host's fence).
    """

    script = 'echo "$2 $3" >> "$1"'
    """The write on the host: $1 the record file, $2 the fence, $3 our pid, $4 a window file."""

    def window_dir(self) -> Path:
        return Path(os.environ.get("PLAYGUARD_TEST_HOST_WINDOW_DIR", "/nonexistent"))

    async def __call__(self, ctx: PhaseContext[RemoteSession]) -> PhaseReport:
        self._write(ctx, "enter")
        status = "cancelled"
        late = asyncio.ensure_future(self._wait_then_write(ctx))
        try:
            await asyncio.shield(late)
            status = "ok"
        except asyncio.CancelledError:
            # Let the write already under way reach the host and be witnessed, then go.
            await asyncio.wait([late], timeout=10)
            raise
        finally:
            self._write(ctx, "exit", status=status)
        return PhaseReport()

    async def _wait_then_write(self, ctx: PhaseContext[RemoteSession]) -> None:
        await asyncio.sleep(phase_seconds())
        session = await ctx.remote()
        record = Path(os.environ["PLAYGUARD_TEST_HOST_RECORD_DIR"]) / ctx.marquee.name
        # $PLAYGUARD_TEST_WRITE_SECONDS: the write takes that long on the host, under the guard's
        # lock, so that a test can cut the link while it runs there.
        pause = os.environ.get("PLAYGUARD_TEST_WRITE_SECONDS", "")
        script = f"sleep {float(pause)}; {self.script}" if pause else self.script
        argv = ["sh", "-c", script, "sh", str(record), str(ctx.lease.fence),
                str(os.getpid()), str(self.window_dir() / ctx.marquee.name)]  # fmt: skip
        try:
            await session.change("witness write", argv)
        except FenceRefused as refused:
            self._write(ctx, "write", outcome="refused", host_fence=refused.host_fence)
            raise
        self._write(ctx, "write", outcome="accepted")


class WindowedWriteWitness(FencedWriteWitness):
    """``FencedWriteWitness`` whose write also spans a window on the host: one line
    "<fence> <pid> <start> <end>" (wall clock, nanoseconds) per write in
    ``$PLAYGUARD_TEST_HOST_WINDOW_DIR/<marquee>``, 50 ms apart. Two writes whose windows
    overlapped leave lines that are out of order or torn, which ``write_windows`` reports."""

    script = (
        'printf "%s %s %s " "$2" "$3" "$(date +%s%N)" >> "$4"; sleep 0.05; '
        'echo "$2 $3" >> "$1"; date +%s%N >> "$4"'
    )


class RemoteProbe(Witness):
    """Opens the cycle's session and runs one read on the Marquee: ``false`` on a Marquee whose
    name starts with ``failing`` (the phase fails), ``true`` on any other."""

    async def __call__(self, ctx: PhaseContext[RemoteSession]) -> PhaseReport:
        session = await ctx.remote()
        await session.run(["false" if ctx.marquee.name.startswith("failing") else "true"])
        return PhaseReport()


first = WitnessPhase("first")
second = WitnessPhase("second")
fenced_write = FencedWriteWitness("write")
windowed_write = WindowedWriteWitness("write")
remote_probe = RemoteProbe("probe")


def read_witness(witness_dir: Path) -> list[dict[str, Any]]:
    """Every line every process wrote, in time order."""
    lines = [
        json.loads(line)
        for path in witness_dir.glob("*.jsonl")
        for line in path.read_text(encoding="utf-8").splitlines()
        if line
    ]
    return sorted(lines, key=lambda line: line["t"])
