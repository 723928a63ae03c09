"""A running ``playguard run`` keeps its cadence whatever is written to its inventory.

One daemon (3 Marquees, a 0.3 s tick, witness phases) is given one bad inventory after another
from the table below; for each, the cycles each Marquee ran in the window after the write are
counted against those in an equal window before it. A read that held up the tick or the loop
(a huge file parsed, a FIFO opened, ``/dev/zero`` read) would show as missing cycles, where a
test of survival alone would pass.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.daemon import Daemon, DaemonRunner, wait_for
from tests.support.hostile import HOSTILE

pytestmark = pytest.mark.integration

MARQUEES = ("m1", "m2", "m3")
TICK = 0.3
WINDOW = 1.5
"""Seconds counted before and after each write: five ticks."""
LIMIT = 8 << 20
"""The daemon's ``inventory_max_bytes`` (the default, named here for the 10 MB case)."""


def write_bytes(document: bytes) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        path.unlink()
        path.write_bytes(document)

    return write


def fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def dev_zero(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


def growing(path: Path) -> None:
    """The good inventory, growing by a comment of 256 KiB every 10 ms past the limit while the
    daemon reads it (good while under the limit, refused past it)."""
    chunk = b"# " + b"x" * (256 << 10) + b"\n"

    def grow() -> None:
        with path.open("ab") as out:
            while out.tell() < LIMIT + (4 << 20):
                out.write(chunk)
                out.flush()
                time.sleep(0.01)

    threading.Thread(target=grow, daemon=True).start()


WRITES: dict[str, Callable[[Path], None]] = {
    "nesting-100k": write_bytes(HOSTILE["flow-nesting-100k"]),
    "billion-laughs": write_bytes(HOSTILE["billion-laughs"]),
    "not-utf8": write_bytes(HOSTILE["not-utf8-start"]),
    "python-tag": write_bytes(HOSTILE["python-tag"]),
    "fifo": fifo,
    "10-mb": write_bytes(b"# " + b"x" * (10 << 20) + b"\n"),
    "dev-zero-symlink": dev_zero,  # after another refusal: its reason is the FIFO's
    "good-then-growing": growing,
}
"""Each write replaces the file (a new inode, as an editor's save), except the growing one,
which appends to the good inventory written just before it."""


def cycles_in(daemon: Daemon, runner: DaemonRunner, start: float, end: float) -> dict[str, int]:
    entered = [
        line
        for line in daemon.witness(runner.witness_dir)
        if line["event"] == "enter" and line["phase"] == "first" and start <= line["t"] < end
    ]
    return {name: sum(line["marquee"] == name for line in entered) for name in MARQUEES}


def test_every_bad_inventory_is_refused_once_and_the_cycles_keep_their_cadence(
    daemons: DaemonRunner,
) -> None:
    inventory = daemons.write_inventory(MARQUEES)
    daemon = daemons.start(
        phase_seconds=0.02, tick_interval=TICK, tick_jitter=0.0, inventory_max_bytes=LIMIT
    )
    wait_for(
        lambda: len(daemon.witness(daemons.witness_dir)) >= 2 * len(MARQUEES),
        timeout=15,
        what="first cycles",
    )
    time.sleep(WINDOW)  # the first window before
    failures = []
    for name, write in WRITES.items():
        logged = len(daemon.events("inventory.invalid"))
        if name == "good-then-growing":
            inventory.unlink()
            daemons.write_inventory(MARQUEES)
        write(inventory)
        written = time.monotonic()
        time.sleep(WINDOW)
        counts = (
            cycles_in(daemon, daemons, written - WINDOW, written),
            cycles_in(daemon, daemons, written, written + WINDOW),
        )
        if any(abs(counts[0][m] - counts[1][m]) > 1 for m in MARQUEES) or not counts[1]["m1"]:
            failures.append(f"{name}: cycles before, after: {counts}")
        invalid = daemon.events("inventory.invalid")[logged:]
        if not invalid or (name != "good-then-growing" and len(invalid) != 1):
            failures.append(f"{name}: inventory.invalid {len(invalid)} times")
        if name == "10-mb" and f"{(10 << 20) + 3} bytes, more than the limit of {LIMIT}" not in (
            invalid[0]["error"] if invalid else ""
        ):
            failures.append(f"{name}: {invalid}")
    assert daemon.process.poll() is None, daemon.stderr_tail()
    assert not failures, "\n".join(failures)
