"""Whether a bad or big inventory written under a running engine holds up its ticks or its loop.

For each input below, a fresh process builds the daemon's engine (``wiring.build_engine``, the
built-in phases replaced by no-op ones, as ``dispatch.py`` does) on a good inventory of 3
Marquees, ticks twice, then has the input written over the inventory and ticks on a grid of
``--tick`` seconds for ``--seconds``, as ``Engine.run`` does, while a 1 ms ticker watches the loop:

- ``longest tick``: the longest ``await engine.tick()`` (the cycles it starts run on, unawaited);
- ``loop stall``: the longest gap the 1 ms ticker saw: how long the loop was held at once;
- ``ticks``: ticks made in ``--seconds`` (``--seconds / --tick`` when none is late);
- ``invalid``: ``inventory.invalid`` lines logged.

Inputs: a valid fleet of 10,000 Marquees with 5 Playgrounds each, all but 3 not launchable
(4.7 MiB: the parse and validation, then the switch to the new state, without 10,000 cycles); one
with 10,000 errors; 200,000 empty entries (1 MB: a million errors that reach no validator of
ours); 10 MB; a "billion laughs"; nesting 100,000 deep; a FIFO. With ``--before REF`` the code of
git ref ``REF`` is measured in turns with this checkout.

    .venv/bin/python bench/desired_state_stall.py [--before REF] [--rounds 1] [--seconds 3]

Starts its own redis-server from the lab on an ephemeral loopback port. Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from code_versions import run_with, versions
from dispatch import NoOpPhase, noop_settings
from loop_stall import LoopStall
from redis import Redis
from structlog.testing import capture_logs

from playguard_async.engine.scheduler import Engine
from playguard_async.phases.protocol import BUILTIN_PHASES
from playguard_async.service.wiring import build_engine
from playguard_lab import RedisServer


def marquee(index: int, *, launchable: bool = True) -> dict[str, Any]:
    return {
        "name": f"edge-{index}",
        "host": f"10.{index // 65536}.{index // 256 % 256}.{index % 256}",
        "user": "playguard",
        "identity_file": "id",
        "known_hosts": "known_hosts",
        "launchable": launchable,
    }


def fleet(marquees: int) -> bytes:
    document = {
        "marquees": [marquee(index, launchable=index < 3) for index in range(marquees)],
        "playspecs": [
            {"name": "shop", "repo": "https://git.example.com/shop.git", "images": ["shop:1"]}
        ],
        "playgrounds": [
            {"name": f"shop-{i}-{n}", "playspec": "shop", "marquee": f"edge-{i}", "branch": "b"}
            for i in range(marquees)
            for n in range(5)
        ],
    }
    return json.dumps(document, indent=1).encode()


def errors(count: int) -> bytes:
    return json.dumps({"marquees": [marquee(i) | {"name": f"E{i}"} for i in range(count)]}).encode()


def laughs(levels: int = 9, width: int = 9) -> bytes:
    lines = ['a0: &a0 ["lol"]']
    for level in range(1, levels + 1):
        lines.append(f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * width)}]")
    return ("\n".join(lines) + f"\nmarquees: *a{levels}\n").encode()


INPUTS: dict[str, Callable[[], bytes]] = {
    "valid 10,000 x 5": lambda: fleet(10_000),
    "10,000 errors": lambda: errors(10_000),
    "200,000 '- {}'": lambda: b"marquees:\n" + b"- {}\n" * 200_000,
    "10 MB": lambda: b"# " + b"x" * (10 << 20) + b"\n",
    "billion laughs": laughs,
    "nesting 100,000": lambda: b"marquees: " + b"[" * 100_000 + b"]" * 100_000 + b"\n",
    "fifo": lambda: b"",
}


async def measure(
    inventory: Path, name: str, redis_url: str, seconds: float, tick: float
) -> dict[str, float]:
    engine = build_engine(
        noop_settings(inventory, redis_url), phases=[NoOpPhase(phase) for phase in BUILTIN_PHASES]
    )
    for _ in range(2):
        await asyncio.gather(*await engine.tick())
    async with LoopStall() as stall:
        await asyncio.sleep(0.1)
        replace(inventory, name)
        longest, ticks, invalid = await tick_on(engine, seconds, tick)
    engine.stopping.set()
    await engine.redis.aclose()
    return {"tick_ms": longest * 1000, "stall_ms": stall.ms, "ticks": ticks, "invalid": invalid}


async def tick_on(engine: Engine, seconds: float, tick: float) -> tuple[float, int, int]:
    """Ticks on a grid of ``tick`` for ``seconds``, as ``Engine.run`` does: the longest tick,
    how many, and how many ``inventory.invalid`` lines."""
    longest, ticks, started, cycles = 0.0, 0, time.monotonic(), []
    with capture_logs() as logs:
        next_tick = started
        while next_tick < started + seconds:
            began = time.perf_counter()
            cycles += await engine.tick()
            longest = max(longest, time.perf_counter() - began)
            ticks += 1
            next_tick += tick
            while next_tick < time.monotonic():
                next_tick += tick
            await asyncio.sleep(max(0.0, next_tick - time.monotonic()))
        await asyncio.gather(*cycles)
    return longest, ticks, sum(line["event"] == "inventory.invalid" for line in logs)


def replace(inventory: Path, name: str) -> None:
    """The input in place of the inventory, as an editor's save makes it (a new inode)."""
    inventory.unlink()
    if name == "fifo":
        os.mkfifo(inventory)
    else:
        inventory.with_name(name).rename(inventory)


def child(workdir: Path, name: str, redis_url: str, seconds: float, tick: float) -> None:
    inventory = workdir / "inventory.yaml"
    inventory.write_bytes(json.dumps({"marquees": [marquee(i) for i in range(3)]}).encode())
    print(json.dumps(asyncio.run(measure(inventory, name, redis_url, seconds, tick))))


def run_child(code: Path, workdir: Path, name: str, redis_url: str, args: Any) -> dict[str, Any]:
    # On an empty Redis: the last child's ticks announced it for a tick, and this one would share
    # the Marquees with it.
    Redis.from_url(redis_url).flushall()
    argv = [__file__, "--child", str(workdir), name, redis_url]
    return run_with(code, *argv, "--seconds", str(args.seconds), "--tick", str(args.tick))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="git ref of code to measure beside this checkout")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--tick", type=float, default=0.25)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(Path(args.child[0]), args.child[1], args.child[2], args.seconds, args.tick)
        return
    with tempfile.TemporaryDirectory() as scratch, RedisServer(Path(scratch) / "redis") as server:
        workdir = Path(scratch)
        codes = versions(args.before, workdir)
        print(f"tick {args.tick:g} s, {args.seconds:g} s after the write: "
              f"{round(args.seconds / args.tick)} ticks when none is late")  # fmt: skip
        print(f"{'input':>20} {'code':>8} {'longest tick ms':>15} {'loop stall ms':>13} "
              f"{'ticks':>5} {'invalid':>7}")  # fmt: skip
        for name, make in INPUTS.items():
            for _ in range(args.rounds):
                for label, code in codes.items():
                    run = workdir / label
                    run.mkdir(exist_ok=True)
                    (run / "id").write_text("key\n")
                    (run / "known_hosts").write_text("host\n")
                    (run / name).write_bytes(make())
                    row = run_child(code, run, name, server.url, args)
                    print(
                        f"{name:>20} {label:>8} {row['tick_ms']:>15.1f} "
                        f"{row['stall_ms']:>13.1f} {row['ticks']:>5} {row['invalid']:>7}"
                    )
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
