"""Redis memory per Marquee taken by cycle records, measured with MEMORY USAGE on a real server.

Writes ``--cycles`` records for each of ``--marquees`` Marquees through ``CycleRecords`` with the
default settings, for three kinds of cycle: an in-sync one (7 phases, nothing done), a busy one (20
Playgrounds' actions and findings) and one whose phases left big notices (host output an operator
should read). Prints per kind the size of one record as the engine builds it and as it is stored
(``record_max_bytes``), how many records a Marquee keeps (``history_length``,
``history_max_bytes``),
and the Redis bytes per Marquee (``last`` + ``history`` keys, MEMORY USAGE with every element
sampled), and what that makes for 10,000 Marquees.

    .venv/bin/python bench/redis_records.py [--marquees 20] [--cycles 60]

Starts its own redis-server from the lab on an ephemeral loopback port. Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from playguard_async.coordination.client import connect_redis
from playguard_async.coordination.keys import cycle_history_key, last_cycle_key
from playguard_async.coordination.records import CycleRecords, encode_record
from playguard_async.engine.results import CycleResult, Outcome
from playguard_async.phases.protocol import BUILTIN_PHASES as PHASES
from playguard_async.settings import load_settings
from playguard_lab import RedisServer


def in_sync(marquee: str, number: int) -> CycleResult:
    result = CycleResult(marquee=marquee, cycle_id=f"{number:012x}", fence=number)
    result.durations = {phase: 0.0123 for phase in PHASES}
    result.actions = {phase: [] for phase in PHASES}
    result.findings = {"reconcile_playgrounds": {"in_sync": 20, "changed": 0}}
    result.finished_at, result.duration = 1_796_000_000.0 + number, 0.4321
    return result


def busy(marquee: str, number: int) -> CycleResult:
    result = in_sync(marquee, number)
    result.actions["reconcile_playgrounds"] = [
        f"compose up -d playground-{i} (config hash changed)" for i in range(20)
    ]
    result.actions["pull_images"] = [f"pull registry.local/app-{i}:v{number}" for i in range(5)]
    result.findings["reconcile_playgrounds"] = {
        f"playground-{i}": {"state": "recreated", "hash": "0" * 64} for i in range(20)
    }
    return result


def noisy(marquee: str, number: int) -> CycleResult:
    result = busy(marquee, number)
    result.outcome, result.phase = Outcome.PHASE_FAILED, "reconcile_playgrounds"
    result.reason = "RemoteCommandFailed: docker-compose up exited 1"
    output = "ERROR: for playground-3  Cannot start service web: driver failed\n" * 300
    result.notices = {
        "reconcile_playgrounds": [
            {"kind": "compose_failed", "subject": f"playground-{i}", "detail": output}
            for i in range(3)
        ]
    }
    return result


KINDS: dict[str, Callable[[str, int], CycleResult]] = {
    "in_sync": in_sync,
    "busy": busy,
    "big_notices": noisy,
}


async def measure(url: str, marquees: int, cycles: int) -> list[dict[str, Any]]:
    settings = load_settings(None)
    redis = connect_redis(url)
    rows = []
    try:
        for kind, make in KINDS.items():
            await redis.flushall()
            records = CycleRecords(
                redis,
                history_length=settings.history_length,
                history_max_bytes=settings.history_max_bytes,
                record_max_bytes=settings.record_max_bytes,
                timeout=5.0,
            )
            names = [f"{kind}-{i}" for i in range(marquees)]
            for number in range(cycles):
                await asyncio.gather(
                    *(records.record(name, make(name, number).to_record()) for name in names)
                )
            used = 0
            kept = 0
            for name in names:
                for key in (last_cycle_key(name), cycle_history_key(name)):
                    used += int(await redis.memory_usage(key, samples=0) or 0)
                kept += int(await redis.llen(cycle_history_key(name)))
            built = make("m", 1).to_record()
            rows.append(
                {
                    "kind": kind,
                    "record": len(json.dumps(built, separators=(",", ":"))),
                    "stored": len(encode_record(built, settings.record_max_bytes)),
                    "kept": kept / marquees,
                    "per": used / marquees,
                }
            )
    finally:
        await redis.flushall()
        await redis.aclose()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--marquees", type=int, default=20)
    parser.add_argument("--cycles", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir, RedisServer(Path(workdir)) as server:
        rows = asyncio.run(measure(server.url, args.marquees, args.cycles))
    for row in rows:
        print(
            f"{row['kind']:12} record as built {row['record']:6d} B, stored {row['stored']:5d} B  "
            f"kept {row['kept']:4.0f}  "
            f"Redis {row['per'] / 1024:8.1f} KiB per Marquee  "
            f"{row['per'] * 10_000 / 2**30:6.2f} GiB per 10,000 Marquees"
        )


if __name__ == "__main__":
    main()
