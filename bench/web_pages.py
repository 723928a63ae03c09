"""Bytes and server time of the web view's pages, the fleet page as a viewer and as an operator
see it (each row with its strip of 50 cycles) and a Marquee's page (its 50 cycles, four
Playgrounds), served by the real aiohttp application from a picture in memory; this checkout
and, with ``--before REF``, the code at REF, side by side in one run.

    .venv/bin/python bench/web_pages.py [--marquees 1000] [--run 1] [--rounds 5] [--before REF]

Each row's history changes outcome every ``--run`` cycles (1: every cycle, the heaviest strip).
A page's time is the median over ``--rounds`` answers, each at a new version of the picture (so
rendered, not served from what an earlier answer kept), in CPU time of the one process that
serves and asks (request sent to last byte read, on loopback): what else runs on the machine
moves it far less than wall time. The viewer asks first at each version, so the viewer's fleet
page carries the build of the fleet's rows, which the operator's then shares.

Figures in bench/README.md, "Web view pages".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from code_versions import ROOT, run_with, versions  # bench/ is on sys.path

USERS = {"vera": ("viewer", "a viewer's pass phrase"), "otto": ("operator", "an operator's phrase")}
PLAYGROUNDS = 4
"""Playgrounds on the measured Marquee's page."""


async def measure(count: int, run: int, rounds: int) -> dict[str, float]:
    """Each page's bytes and median milliseconds at ``count`` Marquees (the fleet's first
    page)."""
    sys.path.append(str(ROOT))  # the tests' support code: the same for both versions
    from playguard_async.coordination.marquee_reads import (  # noqa: PLC0415
        LastCycle,
        MarqueeStatus,
        MarqueeStory,
        WantedPlayground,
    )
    from tests.support.web_users import auth_of, basic  # noqa: PLC0415
    from tests.support.web_view import picture_of, serving, view_of  # noqa: PLC0415

    class Desk:
        async def act(self, action: str, form: object, user: str) -> list[str]:
            raise AssertionError("the bench acts on nothing")

    now = time.time()
    outcomes = ("ok", "ok", "phase_failed", "unreachable")

    def cycle(name: str, index: int, outcome: str, at: float) -> LastCycle:
        return LastCycle(cycle=f"{name}-{index}", outcome=outcome, phase=None, reason=None,
                         fence=index, host_fence=index, finished_at=at, duration=1.0,
                         actions=1, drift={}, branch_gone={}, failed=[])  # fmt: skip

    statuses, histories = [], {}
    for index in range(count):
        last = cycle(f"m{index:05d}", 0, outcomes[index % 4], now - index)
        statuses.append(MarqueeStatus(f"m{index:05d}", True, None, last))
        histories[statuses[-1].name] = [
            {"cycle": f"c{index}-{cycle}", "outcome": outcomes[(index + cycle // run) % 4],
             "finished_at": now - cycle * 60, "duration": 1.0, "actions": {}, "dry_run": False}
            for cycle in range(50)
        ]  # fmt: skip
    history = [cycle("m00000", n, outcomes[(n // run) % 4], now - n * 60) for n in range(50)]
    wanted = tuple(
        WantedPlayground(f"web-{n}", "web", "https://git.example/web.git", "main", "running")
        for n in range(PLAYGROUNDS)
    )
    story = MarqueeStory("m00000", None, 50, history[0], [], history, wanted=wanted)
    pages = {"fleet": "/", "marquee": "/marquee/m00000"}
    times: dict[str, list[float]] = {}
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        auth = auth_of(Path(folder) / "users", USERS)
        picture = picture_of(statuses, story, histories=histories)
        async with serving(view_of(picture, auth=auth, desk=Desk())) as client:
            for _ in range(rounds):
                picture.version += 1
                for name, (role, password) in USERS.items():
                    for page, path in pages.items():
                        if page == "marquee" and role == "viewer":
                            continue
                        started = time.process_time()
                        answer = await client.get(
                            path, headers={"Authorization": basic(name, password)}
                        )
                        body = await answer.read()
                        elapsed = (time.process_time() - started) * 1000
                        assert answer.status == 200, (path, answer.status)
                        times.setdefault(f"{page} {role} CPU ms", []).append(elapsed)
                        figures[f"{page} {role} bytes"] = len(body)
    figures.update({key: round(statistics.median(values), 1) for key, values in times.items()})
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--marquees", type=int, default=1000)
    parser.add_argument("--run", type=int, default=1, help="cycles of one outcome in a row")
    parser.add_argument("--rounds", type=int, default=5, help="answers per page, each rendered")
    parser.add_argument("--before", help="a git ref to measure beside this checkout")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        figures = measure(options.marquees, max(1, options.run), max(1, options.rounds))
        print(json.dumps(asyncio.run(figures)))
        return
    with tempfile.TemporaryDirectory() as workdir:
        for label, code in versions(options.before, Path(workdir)).items():
            row = run_with(code, __file__, "--child", "--marquees", str(options.marquees),
                           "--run", str(options.run), "--rounds", str(options.rounds))  # fmt: skip
            print(f"{label:>8} {options.marquees} Marquees, runs of {options.run}: " + ", ".join(
                f"{key} {value:,}" for key, value in row.items()
            ))  # fmt: skip


if __name__ == "__main__":
    main()
