"""Server CPU of the web view's fleet page for a large fleet: each query a browser may send,
answered by the real handler from a picture set in memory (no Redis: the page never reads it).

    .venv/bin/python bench/web_view.py [--marquees 10000] [--rounds 5]

Prints, per query, the median and worst CPU time of one answer (rows built, counted, filtered,
sorted, one page of 200 rendered) and the page's size. Never part of the tests: the target
(under 1 s of CPU at 10,000 Marquees) is read here, not asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from aiohttp.test_utils import make_mocked_request

from playguard_async.coordination.lock import Holder, LockState
from playguard_async.coordination.marquee_reads import LastCycle, MarqueeStatus, MarqueeStory
from playguard_async.engine.results import Outcome
from playguard_async.service.fleet_picture import FleetPicture, Listed
from playguard_async.service.web_view import WebView

QUERIES = (
    "/",
    "/?sort=age&order=desc",
    "/?outcome=phase_failed&sort=duration",
    "/?name=m0999",
    "/?sort=findings&order=desc&page=50",
)


def fleet(count: int, now: float) -> list[MarqueeStatus]:
    outcomes = ("ok", "ok", "ok", "phase_failed", "unreachable", "locked")
    statuses = []
    for index in range(count):
        holder = Holder("t", f"replica-{index % 3}", "host", 1000 + index, "now")
        last = LastCycle(
            cycle=f"c{index}", outcome=outcomes[index % len(outcomes)], phase=None,
            reason=None if index % 6 < 3 else f"ssh to m{index}: connection refused",
            fence=index, host_fence=index, finished_at=now - index % 600,
            duration=0.1 + index % 50 / 10, actions=index % 4,
            drift={f"pg-{index}": ["image changed"]} if index % 10 == 0 else {},
            branch_gone={}, failed=[],
        )  # fmt: skip
        lock = LockState("lock", holder, index, 30.0, b"{}") if index % 20 == 0 else None
        statuses.append(MarqueeStatus(f"m{index:05d}", True, lock, last))
    return statuses


class NoRecords:
    """The bench never reads Redis: the picture is set by hand."""


async def measure(count: int, rounds: int) -> None:
    statuses = fleet(count, time.time())
    names = [Listed(status.name, status.launchable, status.mode) for status in statuses]

    async def no_story(name: str) -> MarqueeStory:
        raise AssertionError("the fleet page reads no story")

    picture = FleetPicture(NoRecords(), lambda: names, interval=60.0, tell_story=no_story)  # type: ignore[arg-type]
    picture.statuses = {status.name: status for status in statuses}
    view = WebView(
        picture,
        replica="bench",
        outcomes=[outcome.value for outcome in Outcome],
        stop=asyncio.Event(),
    )
    print(f"{count} Marquees, {rounds} rounds, CPU per answer")
    print(f"{'query':40} {'median ms':>10} {'worst ms':>10} {'KiB':>6}")
    for query in QUERIES:
        spent: list[float] = []
        size = 0
        for _ in range(rounds):
            request: Any = make_mocked_request("GET", query)
            started = time.process_time()
            response: Any = await view.fleet(request)
            spent.append(time.process_time() - started)
            size = len(response.body)
        median, worst = statistics.median(spent) * 1000, max(spent) * 1000
        print(f"{query:40} {median:10.1f} {worst:10.1f} {size / 1024:6.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--marquees", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(measure(args.marquees, args.rounds))


if __name__ == "__main__":
    main()
