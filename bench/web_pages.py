"""Bytes of the web view's fleet page as a viewer and as an operator see it, with each row's
strip of 50 cycles, served by the real aiohttp application from a picture in memory; this
checkout and, with ``--before REF``, the code at REF, side by side in one run.

    .venv/bin/python bench/web_pages.py [--marquees 1000] [--run 1] [--before REF]

Each row's history changes outcome every ``--run`` cycles (1: every cycle, the heaviest strip).

Figures in bench/README.md, "Web view pages".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from code_versions import ROOT, run_with, versions  # bench/ is on sys.path

USERS = {"vera": ("viewer", "a viewer's pass phrase"), "otto": ("operator", "an operator's phrase")}


async def measure(count: int, run: int) -> dict[str, int]:
    """The fleet page's bytes and rows for each role, at ``count`` Marquees (the first page)."""
    sys.path.append(str(ROOT))  # the tests' support code: the same for both versions
    from playguard_async.coordination.marquee_reads import LastCycle, MarqueeStatus  # noqa: PLC0415
    from tests.support.web_users import auth_of, basic  # noqa: PLC0415
    from tests.support.web_view import picture_of, serving, view_of  # noqa: PLC0415

    class Desk:
        async def act(self, action: str, form: object, user: str) -> list[str]:
            raise AssertionError("the bench acts on nothing")

    now = time.time()
    outcomes = ("ok", "ok", "phase_failed", "unreachable")
    statuses, histories = [], {}
    for index in range(count):
        last = LastCycle(cycle=f"c{index}", outcome=outcomes[index % 4], phase=None, reason=None,
                         fence=index, host_fence=index, finished_at=now - index, duration=1.0,
                         actions=1, drift={}, branch_gone={}, failed=[])  # fmt: skip
        statuses.append(MarqueeStatus(f"m{index:05d}", True, None, last))
        histories[statuses[-1].name] = [
            {"cycle": f"c{index}-{cycle}", "outcome": outcomes[(index + cycle // run) % 4],
             "finished_at": now - cycle * 60, "duration": 1.0, "actions": {}, "dry_run": False}
            for cycle in range(50)
        ]  # fmt: skip
    figures: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as folder:
        auth = auth_of(Path(folder) / "users", USERS)
        async with serving(view_of(picture_of(statuses, histories=histories), auth=auth,
                                   desk=Desk())) as client:  # fmt: skip
            for name in USERS:
                answer = await client.get(
                    "/", headers={"Authorization": basic(name, USERS[name][1])}
                )
                page = await answer.text()
                figures[f"{USERS[name][0]} bytes"] = len(page.encode())
                figures["rows"] = page.count("<tr data-marquee")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--marquees", type=int, default=1000)
    parser.add_argument("--run", type=int, default=1, help="cycles of one outcome in a row")
    parser.add_argument("--before", help="a git ref to measure beside this checkout")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        print(json.dumps(asyncio.run(measure(options.marquees, max(1, options.run)))))
        return
    with tempfile.TemporaryDirectory() as workdir:
        for label, code in versions(options.before, Path(workdir)).items():
            row = run_with(code, __file__, "--child", "--marquees", str(options.marquees),
                           "--run", str(options.run))  # fmt: skip
            print(f"{label:>8} {options.marquees} Marquees, runs of {options.run}: " + ", ".join(
                f"{key} {value:,}" for key, value in row.items()
            ))  # fmt: skip


if __name__ == "__main__":
    main()
