"""How many idle connections one replica holds, and whether its cycles and /healthz survive them:
a real ``playguard run`` started under a low open-files limit (``prlimit``), 4 lab Marquees run
by the tests' witness phases (which open a file at each phase's start and end), and a flood of
connections that never finish their request head (``tests.support.flood``) from several loopback
addresses; the code of git ref ``--before`` and this checkout in turn.

    .venv/bin/python bench/http_flood.py [--before REF] [--nofile 300] [--connections 600]
        [--sources 4] [--seconds 20]

Prints per version: the most connections open at once as the flood saw them (accepted by the
kernel, maybe refused since), the most the server held (``playguard_http_connections``, not in
the code before), connections the server closed, cycles ok and not ok during the
flood, /healthz answered 200 of asked, ``Too many open files`` lines. Starts its own
redis-server; sends nothing beyond 127.0.0.0/8.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from code_versions import ROOT, versions

sys.path.insert(0, str(ROOT))  # the test support: the lab's daemons, phases, the flood

from playguard_lab import RedisServer
from tests.support.daemon import REPO_ROOT, DaemonRunner
from tests.support.flood import Flood
from tests.support.probes import http_get, scrape, start_serving

NOW_SETTINGS = {"http_header_timeout": 2.0, "http_connections_per_client": 16}
"""This checkout's settings of the flood's concern (the code before has none of them)."""


def outcomes(daemon_events: list[dict[str, object]]) -> tuple[int, int]:
    finished = [line for line in daemon_events if line.get("event") == "cycle.finished"]
    ok = sum(line.get("outcome") == "ok" for line in finished)
    return ok, len(finished) - ok


async def flood_one(
    code: Path, label: str, args: argparse.Namespace, workdir: Path, redis_url: str
) -> dict[str, object]:
    runner = DaemonRunner(workdir / label, redis_url)
    runner.write_inventory([f"m-{number}" for number in range(4)])
    settings = NOW_SETTINGS if label == "now" else {}
    try:
        daemon, base = start_serving(
            runner,
            "r1",
            wrapper=["prlimit", f"--nofile={args.nofile}:{args.nofile}", "--"],
            env={"PYTHONPATH": f"{code}{os.pathsep}{REPO_ROOT}"},
            phase_seconds=0.05,
            tick_interval=1.0,
            ssh_pool_size=16,
            redis_max_connections=8,
            **settings,
        )
        await asyncio.sleep(3)  # a few cycles before the flood
        ok_before, failed_before = outcomes(daemon.events())
        sources = [f"127.0.3.{number}" for number in range(1, args.sources + 1)]
        answered = asked = held = 0
        port = int(base.rpartition(":")[2])
        per_source = args.connections // args.sources
        async with Flood(port=port, sources=sources, per_source=per_source) as flood:
            deadline = time.monotonic() + args.seconds
            while time.monotonic() < deadline:
                asked += 1
                try:
                    status, _ = await asyncio.to_thread(http_get, f"{base}/healthz", timeout=2)
                    answered += status == 200
                    if label == "now":
                        scraped = await asyncio.to_thread(scrape, f"{base}/metrics")
                        held = max(held, int(scraped.value("playguard_http_connections")))
                except OSError:
                    pass
                await asyncio.sleep(0.5)
        ok_after, failed_after = outcomes(daemon.events())
        return {
            "version": label,
            "most_open": flood.most_open,
            "server_held": held if label == "now" else "n/a",
            "closed_by_server": flood.closed_by_server,
            "cycles_ok": ok_after - ok_before,
            "cycles_not_ok": failed_after - failed_before,
            "healthz": f"{answered}/{asked}",
            "emfile_lines": daemon.stderr().count("Too many open files"),
        }
    finally:
        runner.kill_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before")
    parser.add_argument("--nofile", type=int, default=300)
    parser.add_argument("--connections", type=int, default=600)
    parser.add_argument("--sources", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as temporary,
        RedisServer(Path(temporary) / "redis") as redis,
    ):
        workdir = Path(temporary)
        for label, code in versions(args.before, workdir).items():
            row = asyncio.run(flood_one(code, label, args, workdir, redis.url))
            print("  ".join(f"{key}={value}" for key, value in row.items()), flush=True)


if __name__ == "__main__":
    main()
