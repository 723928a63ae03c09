"""What one replica's tick costs as the fleet grows: in-sync Marquees, no-op phases, real Redis.

For each fleet size (a generated inventory, 5 Playgrounds per Marquee, as ``inventory_load.py``
writes it) a fresh process builds the daemon's engine (``wiring.build_engine``: the lock, the
cycle records, the resume bookkeeping) with the seven built-in phases replaced by seven no-op ones,
runs one tick to warm up (scripts loaded, inventory read), then measures the next one, awaited to
its last cycle:

- ``cpu/tick`` and ``cpu/cycle``: this process's CPU (user + system) for the whole tick;
- ``gc``: seconds spent in garbage collections during that tick, and how many were full ones;
- ``rss``: resident memory after it (VmRSS), and the peak;
- ``redis cmds/cycle`` and ``redis cpu/cycle``: from ``INFO`` before and after, Redis's own side;
- ``not ok``: cycles of that tick not ``ok`` (with ``--windows`` only: otherwise none may be).

A flat ``cpu/cycle`` from 100 to 10,000 Marquees means no per-cycle work grows with the fleet.
With ``--windows closed`` the fleet's default maintenance windows are one allow window, daily for
an hour in Europe/Berlin, twelve hours from now: every cycle runs outside it (as ``detect``),
asking when it next opens.
With ``--before REF`` each fleet is also measured with the code of git ref ``REF``, the two taking
turns ``--rounds`` times, and the ratio of their median ``cpu/cycle`` is printed: on a machine
whose load swings between runs, only figures from the same minutes compare.
With ``--tracing`` this checkout is also measured (labelled ``traced``, in the same turns) with
``otlp_endpoint`` set to an OTLP/HTTP receiver the parent serves on loopback (it answers every
export with 200): the measured tick then lasts until its spans are exported, so the export
thread's CPU is counted; the warm-up tick's spans are exported before it starts.

    .venv/bin/python bench/dispatch.py [--fleets 100,1000,10000] [--before REF [--rounds 3]]
        [--windows none|closed] [--tracing]

Starts its own redis-server from the lab on an ephemeral loopback port. Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import inspect
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import uvloop
from code_versions import run_with, versions
from inventory_load import write_inventory
from redis import Redis

from playguard_async.coordination.client import RedisClient
from playguard_async.engine.scheduler import Engine
from playguard_async.phases.protocol import BUILTIN_PHASES, PhaseContext, PhaseReport
from playguard_async.service.logs import configure_logging
from playguard_async.service.wiring import build_engine, close_engine
from playguard_async.settings import Settings
from playguard_lab import RedisServer


class NoOpPhase:
    """A phase that finds nothing to do, so a cycle costs only what the engine adds."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def __call__(self, ctx: PhaseContext[Any]) -> PhaseReport:
        return PhaseReport()


def noop_settings(inventory: Path, redis_url: str, **overrides: Any) -> Settings:
    return Settings(
        inventory=inventory,
        redis_url=redis_url,
        tick_jitter=0.0,
        log_level="warning",
        **overrides,
    )


async def redis_counters(redis: RedisClient) -> tuple[int, float]:
    stats = await redis.info("stats")
    cpu = await redis.info("cpu")
    return int(stats["total_commands_processed"]), cpu["used_cpu_user"] + cpu["used_cpu_sys"]


def rss_mib(field: str = "VmRSS") -> float:
    """This process's resident memory now (``VmRSS``) or at its highest (``VmHWM``), in MiB.
    Not ``ru_maxrss``: Linux carries it over ``exec`` from the parent that forked the child."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def exported(engine: Engine) -> None:
    """Wait until every span the engine's tracer holds has gone to the receiver."""
    # Here, not at the top: the code measured beside this checkout (--before) may predate it.
    from playguard_async.service.wiring import engine_tracer  # noqa: PLC0415

    tracer = engine_tracer(engine)
    assert tracer is not None
    assert await asyncio.to_thread(tracer.export.force_flush), "the receiver took no spans"


async def measure(settings: Settings, *, traced: bool) -> dict[str, float]:
    engine = build_engine(settings, phases=[NoOpPhase(name) for name in BUILTIN_PHASES])
    gc_seconds = [0.0]
    full_collections = [0]
    started_at = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started_at[0] = time.perf_counter()
        else:
            gc_seconds[0] += time.perf_counter() - started_at[0]
            full_collections[0] += info["generation"] == 2

    try:
        await asyncio.gather(*await engine.tick())
        if traced:
            await exported(engine)
        commands, redis_cpu = await redis_counters(engine.redis)
        gc.callbacks.append(on_gc)
        cpu = time.process_time()
        wall = time.perf_counter()
        cycles = await asyncio.gather(*await engine.tick())
        if traced:
            await exported(engine)
        wall = time.perf_counter() - wall
        cpu = time.process_time() - cpu
        gc.callbacks.remove(on_gc)
        commands_after, redis_cpu_after = await redis_counters(engine.redis)
    finally:
        await close_engine(engine)
    outcomes = {result.outcome.value for result in cycles}
    # A cycle outside its windows still ends ok; one that does not (a loop held so long that a
    # Redis answer outlasts its timeout) is counted, and only then, for the windows' sake.
    assert outcomes == {"ok"} or settings.windows, outcomes
    count = len(cycles)
    return {
        "marquees": count,
        "not_ok": sum(result.outcome.value != "ok" for result in cycles),
        "cpu_tick": cpu,
        "cpu_cycle_ms": 1000 * cpu / count,
        "wall_tick": wall,
        "gc_seconds": gc_seconds[0],
        "gc_full": full_collections[0],
        "rss_mib": rss_mib(),
        "peak_rss_mib": rss_mib("VmHWM"),
        # the two INFO calls of the first reading are counted in the second
        "redis_cmds_cycle": (commands_after - commands - 2) / count,
        "redis_cpu_cycle_ms": 1000 * (redis_cpu_after - redis_cpu) / count,
    }


def closed_windows() -> list[dict[str, Any]]:
    """An allow window that opens twelve hours from now, Berlin time, for an hour."""
    hour = (datetime.now(ZoneInfo("Europe/Berlin")).hour + 12) % 24
    return [{"kind": "allow", "cron": f"0 {hour} * * *", "duration": 3600,
             "timezone": "Europe/Berlin"}]  # fmt: skip


def one_fleet(
    inventory: Path, redis_url: str, windows: list[dict[str, Any]], otlp_endpoint: str
) -> None:
    """The child: one fleet in a process of its own, so memory figures are its alone (the
    inventory is written by the parent: dumping 10,000 Marquees peaked at 252 MiB by itself)."""
    # As `playguard run` sets it up; code from before ``final`` had no such option.
    final = {"final": True} if "final" in inspect.signature(configure_logging).parameters else {}
    configure_logging("json", "warning", **final)
    overrides: dict[str, Any] = {"windows": windows} if windows else {}
    if otlp_endpoint:
        overrides["otlp_endpoint"] = otlp_endpoint
    settings = noop_settings(inventory, redis_url, **overrides)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        print(json.dumps(runner.run(measure(settings, traced=bool(otlp_endpoint)))))


def run_child(
    code: Path, inventory: Path, redis_url: str, windows: list[dict[str, Any]], otlp_endpoint: str
) -> dict[str, Any]:
    # On an empty Redis: a tick announces its replica for a tick, so the last child would still
    # be live and share the fleet with this one (it measured 522 of 1,000 Marquees).
    Redis.from_url(redis_url).flushall()
    return run_with(
        code, __file__, "--child", str(inventory), redis_url, json.dumps(windows), otlp_endpoint
    )


class _TakesExports(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver that reads each export and answers 200 (an empty response)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def otlp_receiver(wanted: bool) -> Iterator[str]:
    """The URL of a receiver served from a thread while the block runs; "" when not ``wanted``."""
    if not wanted:
        yield ""
        return
    server = ThreadingHTTPServer(("127.0.0.1", 0), _TakesExports)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    finally:
        server.shutdown()
        server.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleets", default="100,1000,10000")
    parser.add_argument("--before", help="git ref of code to measure beside this checkout")
    parser.add_argument("--rounds", type=int, default=1, help="turns of each code per fleet")
    parser.add_argument(
        "--windows", choices=("none", "closed"), default="none", help="the fleet's default"
    )
    parser.add_argument(
        "--tracing", action="store_true", help="also this checkout with traces sent (traced)"
    )
    parser.add_argument(
        "--child", nargs=4, metavar=("INVENTORY", "REDIS_URL", "WINDOWS", "OTLP"),
        help=argparse.SUPPRESS,
    )  # fmt: skip
    args = parser.parse_args()
    if args.child:
        one_fleet(Path(args.child[0]), args.child[1], json.loads(args.child[2]), args.child[3])
        return
    windows = closed_windows() if args.windows == "closed" else []
    fleets = [int(size) for size in args.fleets.split(",")]
    with (
        tempfile.TemporaryDirectory() as scratch,
        RedisServer(Path(scratch) / "redis") as server,
        otlp_receiver(args.tracing) as receiver,
    ):
        workdir = Path(scratch)
        codes = versions(args.before, workdir)
        runs = [(label, code, "") for label, code in codes.items()]
        if args.tracing:
            runs.append(("traced", codes["now"], receiver))
        rows: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in runs}
        for fleet in fleets:
            inventory = write_inventory(workdir, fleet)
            for _ in range(args.rounds):
                for label, code, endpoint in runs:
                    rows[label].append(run_child(code, inventory, server.url, windows, endpoint))
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores; windows {windows}")
    print(
        f"{'code':>8} {'marquees':>8} {'cpu/tick s':>10} {'cpu/cycle ms':>12} {'wall/tick s':>11} "
        f"{'gc s':>6} {'gc full':>7} {'rss MiB':>8} {'peak MiB':>8} "
        f"{'redis cmds/cycle':>16} {'redis cpu/cycle ms':>18} {'not ok':>6}"
    )
    for label, measured in rows.items():
        for row in measured:
            print(
                f"{label:>8} {row['marquees']:>8} {row['cpu_tick']:>10.2f} "
                f"{row['cpu_cycle_ms']:>12.3f} {row['wall_tick']:>11.2f} {row['gc_seconds']:>6.2f} "
                f"{row['gc_full']:>7} {row['rss_mib']:>8.0f} {row['peak_rss_mib']:>8.0f} "
                f"{row['redis_cmds_cycle']:>16.3f} {row['redis_cpu_cycle_ms']:>18.3f} "
                f"{row['not_ok']:>6}"
            )
    for label, measured in rows.items():
        first, last = _median_cycle(measured, fleets[0]), _median_cycle(measured, fleets[-1])
        print(
            f"{label}: cpu/cycle at {fleets[-1]} / at {fleets[0]}: "
            f"{last / first:.2f}x (1.00x: flat)"
        )
    if args.before:
        before = next(iter(codes))
        old, new = rows[before], rows["now"]
        for fleet in fleets:
            ratio = _median_cycle(new, fleet) / _median_cycle(old, fleet)
            print(f"{fleet} Marquees: cpu/cycle now / {before}: {ratio:.2f}x")
    if args.tracing:
        for fleet in fleets:
            ratio = _median_cycle(rows["traced"], fleet) / _median_cycle(rows["now"], fleet)
            print(f"{fleet} Marquees: cpu/cycle traced / now: {ratio:.2f}x")


def _median_cycle(rows: list[dict[str, Any]], fleet: int) -> float:
    return statistics.median(float(row["cpu_cycle_ms"]) for row in rows if row["marquees"] == fleet)


if __name__ == "__main__":
    main()
