"""Bytes and server time of a Marquee page with its "What runs where" section, served by the real
aiohttp application from a story in memory: none kept (never seen), a typical Marquee
(``--playgrounds`` Playgrounds of ``--services`` services each, one of them drifted), and the
bound (``CONTAINERS_MAX`` containers whose every field is ``TEXT_MAX`` characters long). The time
is a request's through the test client (templates compiled, the page rendered anew each time).

    .venv/bin/python bench/runs_where_page.py [--playgrounds 5] [--services 3] [--renders 20]

Figures in bench/README.md, "Containers seen".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's code and the tests' support code

from playguard_async.coordination.containers_seen import (  # noqa: E402
    CONTAINERS_MAX,
    TEXT_MAX,
    SeenRead,
    parse_seen,
)
from playguard_async.coordination.marquee_reads import (  # noqa: E402
    LastCycle,
    MarqueeStatus,
    MarqueeStory,
    WantedPlayground,
)
from tests.support.web_view import picture_of, serving, view_of  # noqa: E402


def typical(playgrounds: int, services: int) -> tuple[SeenRead, tuple[WantedPlayground, ...]]:
    image_id = "sha256:" + "a" * 64
    containers = [
        {
            "playground": f"web-{p}",
            "service": f"svc-{s}",
            "name": f"pg-web-{p}-svc-{s}-1",
            "state": "running",
            "health": "healthy",
            "restarts": 0,
            "image": f"app-{s}:main",
            "image_id": image_id,
            "digest": f"registry:5000/app-{s}@sha256:" + "b" * 64,
            "started_at": "2026-12-07T17:00:00.123456789Z",
        }
        for p in range(playgrounds)
        for s in range(services - (1 if p == 0 else 0))  # web-0 misses a service
    ]
    desired = {
        f"web-{p}": {
            "services": [f"svc-{s}" for s in range(services)],
            "images": {f"app-{s}:main": image_id for s in range(services)},
            "env": "e" * 64,
        }
        for p in range(playgrounds)
    }
    seen = json.dumps({"seen_at": time.time(), "cycle": "c" * 26, "containers": containers,
                       "desired": desired})  # fmt: skip
    wanted = tuple(
        WantedPlayground(
            f"web-{p}",
            "spec",
            "repo",
            "main",
            "running",
            images=tuple(f"app-{s}:main" for s in range(services)),
        )
        for p in range(playgrounds)
    )
    return parse_seen(seen), wanted


def bound() -> tuple[SeenRead, tuple[WantedPlayground, ...]]:
    long = "x" * TEXT_MAX
    containers: list[dict[str, Any]] = [
        {
            "playground": long,
            "service": long,
            "name": long,
            "state": long,
            "health": long,
            "restarts": 10**9,
            "image": long,
            "image_id": long,
            "digest": long,
            "started_at": long,
        }
    ] * CONTAINERS_MAX
    seen = json.dumps({"seen_at": time.time(), "cycle": long, "containers": containers})
    return parse_seen(seen), ()


async def page(seen: SeenRead, wanted: tuple[WantedPlayground, ...], renders: int) -> str:
    last = LastCycle(
        cycle="c", outcome="ok", phase=None, reason=None, fence=1, host_fence=None,
        finished_at=time.time(), duration=1.0, actions=0,
        drift={"web-0": ["svc-2: missing"]}, branch_gone={}, failed=[], dry_run=True,
    )  # fmt: skip
    story = MarqueeStory("m-0", None, 1, last, [], [last], wanted=wanted, seen=seen)
    statuses = [MarqueeStatus("m-0", True, None, last)]
    picture = picture_of(statuses, story)
    times, size = [], 0
    async with serving(view_of(picture)) as client:
        await client.get("/marquee/m-0")  # the templates compiled
        for _ in range(renders):
            picture.version += 1  # a new version: the page rendered again, not served as kept
            started = time.perf_counter()
            response = await client.get("/marquee/m-0")
            body = await response.read()
            times.append(time.perf_counter() - started)
            size = len(body)
    return f"{size / 1024:7.1f} KiB, {statistics.median(times) * 1000:6.1f} ms a render (median)"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--playgrounds", type=int, default=5)
    parser.add_argument("--services", type=int, default=3)
    parser.add_argument("--renders", type=int, default=20)
    args = parser.parse_args()
    seen, wanted = typical(args.playgrounds, args.services)
    cases = [
        ("never seen", SeenRead(None), wanted),
        (f"{args.playgrounds} x {args.services}, one drifted", seen, wanted),
        (f"the bound: {CONTAINERS_MAX} containers of {TEXT_MAX}-character fields", *bound()),
    ]
    for label, read, want in cases:
        print(f"{label:<55}{await page(read, want, args.renders)}")


if __name__ == "__main__":
    asyncio.run(main())
