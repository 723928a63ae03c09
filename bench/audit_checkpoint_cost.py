"""What the change log's signed checkpoints cost: the daemon's checkpoint at each tick (with no
change since the last one, and with ``--changes`` rows changed), the first checkpoint of a log
(every chain), the bytes a line adds to the file; and ``audit verify`` over the whole log with
and without the checkpoints.

One lab PostgreSQL, one database migrated and holding an imported fleet (``inventory_load``'s:
N Marquees with 5 Playgrounds each, one entry per row, so 10,000 Marquees make about 70,000
entries and 15,000 about 105,000).

    .venv/bin/python bench/audit_checkpoint_cost.py [--marquees 15000] [--ticks 20] [--changes 10]

Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import tempfile
import time
from pathlib import Path

import asyncpg
from inventory_load import write_inventory

from playguard_async.desired_state.postgres.audit_chain import verify_changes
from playguard_async.desired_state.postgres.audit_checkpoint import (
    read_checkpoints,
    take_checkpoint,
)
from playguard_async.desired_state.postgres.schema import migrate
from playguard_async.desired_state.postgres.transfer import import_inventory
from playguard_lab import PostgresServer


def ms(seconds: list[float]) -> str:
    return f"median {statistics.median(seconds) * 1000:.2f} ms, max {max(seconds) * 1000:.2f} ms"


def size_of(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


async def timed(connection: asyncpg.Connection, path: Path, key: bytes) -> tuple[float, int]:
    """One checkpoint's wall time and the bytes it added to the file."""
    size = size_of(path)
    started = time.perf_counter()
    await take_checkpoint(connection, "playguard", path, key)
    return time.perf_counter() - started, size_of(path) - size


async def measure(connection: asyncpg.Connection, workdir: Path, args: argparse.Namespace) -> None:
    key, path = secrets.token_bytes(32), workdir / "checkpoints"
    first, first_bytes = await timed(connection, path, key)
    entries = await connection.fetchval("SELECT count(*) FROM playguard.changes")
    chains = await connection.fetchval("SELECT count(DISTINCT chain) FROM playguard.changes")
    print(f"{args.marquees} Marquees, {entries} entries in {chains} chains")
    print(f"  first checkpoint (every chain): {first * 1000:.1f} ms, {first_bytes} bytes")
    quiet, quiet_bytes = [], []
    for _ in range(args.ticks):
        took, added = await timed(connection, path, key)
        quiet.append(took)
        quiet_bytes.append(added)
    print(f"  a tick with no change: {ms(quiet)}, {max(quiet_bytes)} bytes")
    busy, busy_bytes = [], []
    for tick in range(args.ticks):
        for number in range(args.changes):
            marquee = (tick * args.changes + number) * 7919 % args.marquees
            await connection.execute(
                "UPDATE playguard.playgrounds SET branch = $1 WHERE name = $2",
                f"feature/t{tick}", f"shop-{marquee}-0",
            )  # fmt: skip
        took, added = await timed(connection, path, key)
        busy.append(took)
        busy_bytes.append(added)
    print(f"  a tick after {args.changes} changes: {ms(busy)}, {max(busy_bytes)} bytes")
    for label, checkpoints in (("without", None), ("with", read_checkpoints(path, key))):
        started = time.perf_counter()
        found = await verify_changes(connection, checkpoints=checkpoints)
        took = time.perf_counter() - started
        print(f"  verify {label} checkpoints: {found.entries} entries, {took:.2f} s, "
              f"intact {found.intact}")  # fmt: skip
    started = time.perf_counter()
    read_checkpoints(path, key)
    print(f"  reading the checkpoint file ({size_of(path)} bytes, {2 * args.ticks + 1} "
          f"lines): {(time.perf_counter() - started) * 1000:.1f} ms")  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--marquees", type=int, default=15000)
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument("--changes", type=int, default=10)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="checkpoint-bench-") as workdir,
        PostgresServer(Path(workdir) / "postgres") as server,
    ):
        connection = await asyncpg.connect(server.url, password=server.password)
        try:
            await migrate(connection)
            inventory = write_inventory(Path(workdir), args.marquees)
            await import_inventory(connection, inventory, max_bytes=1 << 30, timeout=900)
            await measure(connection, Path(workdir), args)
        finally:
            await connection.close()


if __name__ == "__main__":
    asyncio.run(main())
