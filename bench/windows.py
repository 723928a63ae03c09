"""What a cycle's maintenance-window question costs, the code of a git ref against this checkout.

A cycle asks whether its Marquee's windows allow changes now and, when they do not, when they
next will (for its ``cycle.outside_windows`` line): ``allows`` then ``next_opening``, as
``engine/cycle.py`` did before the windows' answers were kept. For each window set this script
asks that question along a simulated clock, as the cycles of one replica would (``--cycles`` a
tick of ``--tick`` seconds, so the clock moves ``tick / cycles`` between two questions), from
2026-12-05 12:00 UTC, in a child process per code version (``--before REF``, as other scripts),
taking turns ``--rounds`` times, and prints:

- ``first ms``: the first question, the window set new to the process (nothing kept yet);
- ``us/cycle``: the mean of the next ``--cycles`` questions, the per-cycle cost;
- ``opens``: the next opening it gave (``none``: none found), so a wrong answer shows.

bench/README.md ("Maintenance windows") has the figures.

    .venv/bin/python bench/windows.py --before REF [--cycles 200] [--tick 60] [--rounds 2]

Nothing but Python is started. Never part of the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from code_versions import run_with, versions

from playguard_async.desired_state.windows import Window, allows, next_opening

START = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)

SETS: dict[str, list[dict[str, Any]]] = {
    # The issue's: one fleet-default window, closed at noon (02:00-03:00 Berlin).
    "closed daily": [{"kind": "allow", "cron": "0 2 * * *", "duration": 3600,
                      "timezone": "Europe/Berlin"}],
    "open": [{"kind": "allow", "cron": "0 8 * * *", "duration": 8 * 3600}],
    "deny only, open": [{"kind": "deny", "cron": "0 2 * * *", "duration": 3600}],
    # The issue's: opens at 02:04 Berlin tomorrow (01:04 UTC), found by neither half of the
    # old search's 200 starts.
    "allow + deny */5": [
        {"kind": "allow", "cron": "0 2 * * *", "duration": 3600, "timezone": "Europe/Berlin"},
        {"kind": "deny", "cron": "*/5 * * * *", "duration": 240},
    ],
    "weekend + 2 deny": [
        {"kind": "allow", "cron": "0 22 * * 5", "duration": 2 * 86400},
        {"kind": "deny", "cron": "0 2 * * *", "duration": 3600},
        {"kind": "deny", "cron": "*/15 * * * *", "duration": 300},
    ],
    # A deny window that covers the allow window always: the worst first answer.
    "always denied": [
        {"kind": "allow", "cron": "0 2 * * *", "duration": 3600},
        {"kind": "deny", "cron": "* * * * *", "duration": 60},
    ],
}  # fmt: skip


def ask(windows: list[Window], now: datetime) -> datetime | None:
    """The cycle's question: ``now`` when allowed, else the next opening (None: none found)."""
    if allows(windows, now):
        return now
    return next_opening(windows, now)


def one_set(name: str, cycles: int, tick: float) -> dict[str, Any]:
    """The child: one window set asked along the clock with the package on ``PYTHONPATH``."""
    windows = [Window.model_validate(window) for window in SETS[name]]
    step = timedelta(seconds=tick / cycles)
    started = time.process_time()
    opens = ask(windows, START)
    first = time.process_time() - started
    now = START
    started = time.process_time()
    for _ in range(cycles):
        now += step
        ask(windows, now)
    per_cycle = (time.process_time() - started) / cycles
    return {
        "set": name,
        "first_ms": 1000 * first,
        "us_cycle": 1e6 * per_cycle,
        "opens": "none" if opens is None else f"{opens:%m-%d %H:%M}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="git ref of code to measure beside this checkout")
    parser.add_argument("--cycles", type=int, default=200, help="questions a tick")
    parser.add_argument("--tick", type=float, default=60.0, help="seconds a tick")
    parser.add_argument("--rounds", type=int, default=2, help="turns of each code per set")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_set(args.child, args.cycles, args.tick)))
        return
    with tempfile.TemporaryDirectory() as scratch:
        codes = versions(args.before, Path(scratch))
        rows: dict[str, list[dict[str, Any]]] = {label: [] for label in codes}
        for name in SETS:
            for _ in range(args.rounds):
                for label, code in codes.items():
                    rows[label].append(
                        run_with(code, __file__, "--child", name, "--cycles", str(args.cycles),
                                 "--tick", str(args.tick))
                    )  # fmt: skip
    print(
        f"{args.cycles} cycles a {args.tick:g} s tick from {START:%Y-%m-%d %H:%M} UTC; "
        f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores"
    )
    print(f"{'set':>18} {'code':>8} {'first ms':>9} {'us/cycle':>10} {'opens':>12}")
    for name in SETS:
        for label, measured in rows.items():
            for row in measured:
                if row["set"] == name:
                    print(
                        f"{name:>18} {label:>8} {row['first_ms']:>9.2f} "
                        f"{row['us_cycle']:>10.1f} {row['opens']:>12}"
                    )
    if args.before:
        before = next(iter(codes))
        for name in SETS:
            old, new = (
                statistics.median(r["us_cycle"] for r in rows[label] if r["set"] == name)
                for label in (before, "now")
            )
            print(f"{name}: us/cycle {before} {old:,.1f} -> now {new:.1f} ({old / new:,.0f}x)")


if __name__ == "__main__":
    main()
