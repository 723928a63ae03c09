"""Instructions per in-sync cycle, counted by callgrind: a figure the machine's noise leaves alone.

CPU time on this machine swings 20-30 % from one minute to the next, so a change worth 2-5 % of a
cycle cannot be seen in ``dispatch.py``'s seconds. Callgrind counts the instructions the process
executes, the same from run to run within a fraction of a percent (hash seed fixed). The engine
is ``dispatch.py``'s (the daemon's wiring, seven no-op phases, a real redis-server from the lab);
after two warm-up ticks the counters are dumped, ``--ticks`` ticks run, and they are dumped
again: the second part, divided by the cycles, is printed. The count misses what caches and
memory cost (a task per cycle was 4 % of the instructions and 6-10 % of the time), so the
seconds of ``dispatch.py`` stay the figure that targets are judged by.

    .venv/bin/python bench/instructions.py [--fleet 500] [--ticks 2]

Needs valgrind (Debian's ``valgrind``); a run takes about a minute. Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import uvloop
from dispatch import NoOpPhase, noop_settings
from inventory_load import write_inventory

from playguard_async.phases.protocol import BUILTIN_PHASES
from playguard_async.service.logs import configure_logging
from playguard_async.service.wiring import build_engine
from playguard_lab import RedisServer


async def ticks(inventory: Path, redis_url: str, count: int) -> None:
    engine = build_engine(
        noop_settings(inventory, redis_url), phases=[NoOpPhase(name) for name in BUILTIN_PHASES]
    )
    for _ in range(2):  # scripts loaded, inventory read, the collector settled
        await asyncio.gather(*await engine.tick())
    dump_counters()
    for _ in range(count):
        await asyncio.gather(*await engine.tick())
    dump_counters()
    await engine.redis.aclose()


def dump_counters() -> None:
    """Ask callgrind to write what it counted so far and start again from zero. The request is
    read at callgrind's next poll, so the process idles a moment (idling costs no instructions)."""
    subprocess.run(["callgrind_control", "-d", str(os.getpid())], capture_output=True, check=True)
    time.sleep(1.0)


def counted(out: Path, part: int) -> int:
    [dumped] = out.parent.glob(f"{out.name}.*.{part}")
    for line in dumped.read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"{dumped}: no summary line")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleet", type=int, default=500)
    parser.add_argument("--ticks", type=int, default=2)
    parser.add_argument(
        "--child", nargs=2, metavar=("INVENTORY", "REDIS_URL"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        configure_logging("json", "warning", final=True)
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(ticks(Path(args.child[0]), args.child[1], args.ticks))
        return
    with tempfile.TemporaryDirectory() as scratch, RedisServer(Path(scratch) / "redis") as server:
        inventory = write_inventory(Path(scratch), args.fleet)
        out = Path(scratch) / "callgrind"
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        command = [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}.%p",
            sys.executable, __file__, "--fleet", str(args.fleet), "--ticks", str(args.ticks),
            "--child", str(inventory), server.url,
        ]  # fmt: skip
        subprocess.run(command, env=env, capture_output=True, check=True, timeout=1800)
        cycles = args.fleet * args.ticks
        per_cycle = counted(out, 2) / cycles
        print(f"{args.fleet} Marquees, {args.ticks} ticks: {per_cycle:,.0f} instructions per cycle")


if __name__ == "__main__":
    main()
