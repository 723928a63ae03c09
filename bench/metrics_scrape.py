"""What one Prometheus scrape of /metrics costs the daemon, by fleet size, before and after.

Each fleet size is measured in child processes, the code of git ref ``--before`` (extracted with
``code_versions``) and this checkout taking turns: the child builds ``Metrics`` as the daemon
does, feeds it one finished cycle of each of ``--fleets`` Marquees, all ``ok`` (seven no-op
phases each, as ``dispatch.py``'s engine runs; with ``--failing N`` the first N failed), serves
it with the daemon's own handler on loopback and waits. The parent GETs /metrics ``--scrapes``
times as Prometheus does (``Accept-Encoding: gzip``, the text format) and reads the child's CPU
around each GET from outside (the sum of its threads' ``/proc/PID/task/*/schedstat``,
nanoseconds). Printed: CPU per scrape (first and median), the text's own rendering in the child
(``generate_latest``, mean of ``EXPOSITIONS``), bytes on the wire and uncompressed, series, and
now/before as ratios.

    .venv/bin/python bench/metrics_scrape.py [--fleets 1000,10000] [--scrapes 5] [--failing 0]
        [--before REF]

Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import inspect
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from code_versions import ROOT, extract, git_output

PHASES = (
    "sync_git",
    "fetch_branches",
    "pull_images",
    "reconcile_playgrounds",
    "refresh_credentials",
    "process_agent_chats",
    "sweep_orphans",
)
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
EXPOSITIONS = 50
"""Times the child renders its registry in process, to show the text's own cost without the
HTTP server's or this machine's noise around one scrape."""


# ---- the child: a fleet's metrics, served --------------------------------------------------


async def child(fleet: int, failing: int) -> None:
    from aiohttp import web  # noqa: PLC0415 - after PYTHONPATH chose the code

    from playguard_async.engine.results import Outcome  # noqa: PLC0415
    from playguard_async.service.metrics import Metrics  # noqa: PLC0415

    # The code after issue 39 caps the Marquees shown, and is told each Marquee's mode and
    # whether it rolled back.
    after = "marquees_shown" in inspect.signature(Metrics).parameters
    shown = {"marquees_shown": 100} if after else {}
    metrics = Metrics(outcomes=[outcome.value for outcome in Outcome], lock_ttl=300.0, **shown)
    extra: dict[str, Any] = {"mode": "apply", "rolled_back": False} if after else {}
    durations = dict.fromkeys(PHASES, 0.001)
    now = time.time()
    for number in range(fleet):
        outcome, health = ("phase_failed", "failing") if number < failing else ("ok", "ok")
        metrics.cycle_finished(outcome, durations)
        metrics.marquee_finished(f"marquee-{number:05d}", outcome, health, now, **extra)
    from prometheus_client import generate_latest  # noqa: PLC0415

    generate_latest(metrics.registry)
    started = time.process_time()
    for _ in range(EXPOSITIONS):
        generate_latest(metrics.registry)
    print((time.process_time() - started) / EXPOSITIONS * 1000, flush=True)
    app = web.Application()
    app.router.add_get("/metrics", metrics.handler())
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    print(port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until closed
    await runner.cleanup()


# ---- the parent: scrapes from outside --------------------------------------------------------


def cpu_ns(pid: int) -> int:
    """CPU of every thread of ``pid`` so far, in nanoseconds (the scheduler's own account)."""
    return sum(
        int(stat.read_text().split()[0]) for stat in Path(f"/proc/{pid}/task").glob("*/schedstat")
    )


def measure(code: Path, fleet: int, failing: int, scrapes: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(code)}
    argv = [sys.executable, __file__, "--child", str(fleet), "--failing", str(failing)]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                          env=env) as served:  # fmt: skip
        assert served.stdout is not None
        assert served.stdin is not None
        exposition_ms = float(served.stdout.readline())
        port = int(served.stdout.readline())
        url = f"http://127.0.0.1:{port}/metrics"
        cpus, wire, body = [], 0, b""
        for _ in range(scrapes):
            time.sleep(0.2)  # the child idle: its CPU is the scrape's alone
            request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
            before = cpu_ns(served.pid)
            with _OPENER.open(request, timeout=60) as response:
                raw = response.read()
                zipped = response.headers.get("Content-Encoding") == "gzip"
            time.sleep(0.05)  # the child's last bookkeeping after the answer
            cpus.append((cpu_ns(served.pid) - before) / 1e6)
            wire, body = len(raw), gzip.decompress(raw) if zipped else raw
        served.stdin.close()
    text = body.decode()
    series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    return {
        "exposition_ms": exposition_ms,
        "first_ms": cpus[0],
        "median_ms": statistics.median(cpus),
        "wire_kb": wire / 1000,
        "text_kb": len(body) / 1000,
        "series": series,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleets", default="1000,10000")
    parser.add_argument("--scrapes", type=int, default=5)
    parser.add_argument(
        "--failing", type=int, default=0, help="Marquees whose last cycle failed (the first N)"
    )
    parser.add_argument(
        "--before", help="git ref of the 'before' code (default: where this branch left main)"
    )
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        asyncio.run(child(args.child, args.failing))
        return
    fleets = [int(fleet) for fleet in args.fleets.split(",")]
    with tempfile.TemporaryDirectory(prefix="pg-bench-", dir="/tmp") as scratch:
        commit = git_output(
            "rev-parse", "--short", args.before or git_output("merge-base", "HEAD", "main")
        )
        codes = {commit: extract(commit, Path(scratch) / "before"), "now": ROOT}
        rows = {(label, fleet): measure(code, fleet, args.failing, args.scrapes)
                for fleet in fleets for label, code in codes.items()}  # fmt: skip
    print(f"before = {commit}, {args.scrapes} scrapes each, {args.failing} Marquees failing, "
          f"load {os.getloadavg()[0]:.1f}")  # fmt: skip
    header = f"{'code':>8}{'marquees':>10}{'cpu first ms':>14}{'cpu median ms':>15}"
    print(header + f"{'render ms':>11}{'wire KB':>10}{'text KB':>10}{'series':>8}")
    for (label, fleet), row in rows.items():
        print(f"{label:>8}{fleet:>10}{row['first_ms']:>14.1f}{row['median_ms']:>15.1f}"
              f"{row['exposition_ms']:>11.2f}"
              f"{row['wire_kb']:>10.1f}{row['text_kb']:>10.1f}{row['series']:>8}")  # fmt: skip
    for fleet in fleets:
        old, new = rows[(commit, fleet)], rows[("now", fleet)]
        print(f"{fleet} Marquees, now/before: cpu median {_ratio(new, old, 'median_ms')}, "
              f"text {_ratio(new, old, 'text_kb')}, "
              f"series {_ratio(new, old, 'series')}")  # fmt: skip
    if len(fleets) > 1:
        small, large = rows[("now", fleets[0])], rows[("now", fleets[-1])]
        print(f"now: {fleets[-1]} / {fleets[0]} Marquees: cpu median "
              f"{_ratio(large, small, 'median_ms')}, "
              f"render {_ratio(large, small, 'exposition_ms')}, "
              f"text {_ratio(large, small, 'text_kb')}")  # fmt: skip


def _ratio(new: dict[str, Any], old: dict[str, Any], figure: str) -> str:
    return f"{new[figure] / old[figure]:.2f}x" if old[figure] else "-"


if __name__ == "__main__":
    main()
