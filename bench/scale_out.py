"""Scale-out, side by side in one run: 1, 2 and 4 replica processes on one Redis, one fleet.

Each replica is a process of its own running the daemon's engine (``wiring.build_engine``) with
no-op phases (``dispatch.py``'s) over one generated inventory. All of them announce themselves,
wait for a common start, announce again (so each sees the others), run one tick to its last cycle
and report. Two ways side by side for each replica count:

- ``shared``: as the daemon runs, each replica attempts the Marquees its rendezvous hash wins;
- ``racing``: without announcements, as before scale-out, every replica attempts every lock.

Prints per replica count: attempts per replica (locks tried) as a share of the fleet, ``locked``
outcomes (attempts wasted on a lock another replica held), the CPU seconds of the busiest replica,
and the fleet's convergence time: from the common start until every Marquee has finished one
``ok`` cycle. The machine has two cores: past two replicas, time stops falling while attempts per
replica keep halving.

    .venv/bin/python bench/scale_out.py [--fleet 2000] [--replicas 1,2,4]

Starts its own redis-server from the lab on an ephemeral loopback port. Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import uvloop
from dispatch import NoOpPhase, noop_settings
from inventory_load import write_inventory
from redis import Redis

from playguard_async.phases.protocol import BUILTIN_PHASES
from playguard_async.service.logs import configure_logging
from playguard_async.service.wiring import build_engine
from playguard_lab import RedisServer

GO_KEY = "bench:scale_out:go"
READY_KEY = "bench:scale_out:ready"


async def replica(name: str, inventory: Path, redis_url: str, shared: bool) -> dict[str, Any]:
    settings = noop_settings(inventory, redis_url, replica_id=name, max_concurrent_cycles=64)
    engine = build_engine(settings, phases=[NoOpPhase(phase) for phase in BUILTIN_PHASES])
    redis = engine.redis
    try:
        await engine.load_inventory()
        if shared:
            await engine.roster.announce()
        await redis.incr(READY_KEY)
        while (go := await redis.get(GO_KEY)) is None:  # noqa: ASYNC110 - set by another process
            await asyncio.sleep(0.005)
        if shared:
            await engine.roster.announce()
        cpu = time.process_time()
        results = await asyncio.gather(*await engine.tick())
        cpu = time.process_time() - cpu
        if shared:
            await engine.roster.leave()
    finally:
        await redis.aclose()
    return {
        "replica": name,
        "attempts": len(results),
        "outcomes": Counter(result.outcome.value for result in results),
        "cpu": cpu,
        "ok_at": {
            result.marquee: result.finished_at - float(go)
            for result in results
            if result.outcome.value == "ok"
        },
    }


def run_fleet(replicas: int, shared: bool, inventory: Path, redis_url: str) -> list[dict[str, Any]]:
    redis = Redis.from_url(redis_url)
    redis.flushall()
    mode = "shared" if shared else "racing"
    children = [
        subprocess.Popen(
            [sys.executable, __file__, "--child", f"r{n}", str(inventory), redis_url, mode],
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(1, replicas + 1)
    ]
    deadline = time.monotonic() + 120
    # every child has read its inventory (and, shared, announced itself) before the start
    while int(redis.get(READY_KEY) or 0) < replicas:
        assert time.monotonic() < deadline, "replicas never all got ready"
        time.sleep(0.01)
    redis.set(GO_KEY, repr(time.time()))
    redis.close()
    reports = []
    for child in children:
        out, _ = child.communicate(timeout=600)
        assert child.returncode == 0, f"replica exited {child.returncode}"
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


def summarize(fleet: int, replicas: int, mode: str, reports: list[dict[str, Any]]) -> str:
    attempts = [report["attempts"] for report in reports]
    locked = sum(report["outcomes"].get("locked", 0) for report in reports)
    first_ok: dict[str, float] = {}
    for report in reports:
        for marquee, at in report["ok_at"].items():
            first_ok[marquee] = min(at, first_ok.get(marquee, at))
    converged = max(first_ok.values()) if len(first_ok) == fleet else float("nan")
    share = sum(attempts) / len(attempts) / fleet
    return (
        f"{replicas:>8} {mode:>7} {share:>17.2f} {max(attempts):>12} {locked:>7} "
        f"{max(report['cpu'] for report in reports):>13.2f} {converged:>12.2f} "
        f"{len(first_ok):>9}/{fleet}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleet", type=int, default=2000)
    parser.add_argument("--replicas", default="1,2,4")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        name, inventory, redis_url, mode = args.child
        configure_logging("json", "warning")
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            report = runner.run(replica(name, Path(inventory), redis_url, mode == "shared"))
        print(json.dumps(report))
        return
    with tempfile.TemporaryDirectory() as workdir, RedisServer(Path(workdir) / "redis") as server:
        inventory = write_inventory(Path(workdir), args.fleet)
        print(
            f"{'replicas':>8} {'mode':>7} {'attempts/replica':>17} {'max attempts':>12} "
            f"{'locked':>7} {'max cpu (s)':>13} {'converged s':>12} {'ok':>9}"
        )
        for replicas in (int(count) for count in args.replicas.split(",")):
            for shared in (True, False):
                reports = run_fleet(replicas, shared, inventory, server.url)
                mode = "shared" if shared else "racing"
                print(summarize(args.fleet, replicas, mode, reports), flush=True)


if __name__ == "__main__":
    main()
