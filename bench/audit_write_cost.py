"""What the audit of desired-state changes (migration 0009's ``changes``, written by the
triggers) costs the writers, and what ``audit verify`` costs the operator.

Two databases on one lab PostgreSQL, both migrated: ``audited`` as shipped, and ``unaudited``
where ``playguard_record_change`` is replaced by a function that returns at once (the wake-up
triggers still fire: the difference is the audit alone). For each fleet (N Marquees with 5
Playgrounds each, ``inventory_load``'s fleet):
- ``import``: ``import_inventory`` of the whole fleet (one transaction, COPY; a trigger per row);
- ``write``: ``--writes`` application transactions, one UPDATE of one Playground's branch each,
  interleaved between the two databases; the median and p99 per transaction;
- ``verify``: ``verify_changes`` over the audited database's entries; the audit's size on disk.

    .venv/bin/python bench/audit_write_cost.py [--fleets 1000,10000] [--writes 1000]

Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import asyncpg
from inventory_load import write_inventory

from playguard_async.desired_state.postgres.audit_chain import verify_changes
from playguard_async.desired_state.postgres.schema import migrate
from playguard_async.desired_state.postgres.transfer import import_inventory
from playguard_lab import PostgresServer

NO_AUDIT = """
CREATE OR REPLACE FUNCTION playguard.playguard_record_change(relation text, key text,
    operation text, old_row jsonb, new_row jsonb, concerned text[], acting text)
    RETURNS void LANGUAGE plpgsql AS $$ BEGIN END; $$
"""


async def database(server: PostgresServer, name: str) -> asyncpg.Connection:
    admin = await asyncpg.connect(server.url, password=server.password)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    connection = await asyncpg.connect(server.url_of(name), password=server.password)
    await migrate(connection)
    return connection


async def timed_import(connection: asyncpg.Connection, inventory: Path) -> float:
    started = time.perf_counter()
    await import_inventory(connection, inventory, max_bytes=1 << 30, timeout=600)
    return time.perf_counter() - started


async def timed_write(connection: asyncpg.Connection, marquees: int, number: int) -> float:
    playground = f"shop-{number * 7919 % marquees}-{number % 5}"
    started = time.perf_counter()
    async with connection.transaction():
        await connection.execute("SET LOCAL playguard.actor = 'bench'")
        await connection.execute(
            "UPDATE playguard.playgrounds SET branch = $1 WHERE name = $2",
            f"feature/w{number}",
            playground,
        )
    return time.perf_counter() - started


def summary(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"median {statistics.median(ordered) * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms"


async def measure(server: PostgresServer, inventory: Path, marquees: int, writes: int) -> None:
    audited = await database(server, "audit_bench_audited")
    unaudited = await database(server, "audit_bench_unaudited")
    try:
        await unaudited.execute(NO_AUDIT)
        unaudited_import = await timed_import(unaudited, inventory)
        audited_import = await timed_import(audited, inventory)
        print(
            f"{marquees} Marquees: import {unaudited_import:.2f} s without the audit, "
            f"{audited_import:.2f} s with it ({audited_import / unaudited_import:.2f}x)"
        )
        times: dict[str, list[float]] = {"without": [], "with": []}
        for number in range(writes):
            times["without"].append(await timed_write(unaudited, marquees, number))
            times["with"].append(await timed_write(audited, marquees, number))
        print(
            f"  one-row write: without {summary(times['without'])}; with {summary(times['with'])}"
        )
        started = time.perf_counter()
        found = await verify_changes(audited)
        took = time.perf_counter() - started
        size = await audited.fetchval("SELECT pg_total_relation_size('playguard.changes')")
        print(
            f"  verify: {found.entries} entries in {found.chains} chains, {took:.2f} s, "
            f"intact {found.intact}; playguard.changes {size / 1048576:.1f} MiB"
        )
    finally:
        await audited.close()
        await unaudited.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleets", default="1000,10000")
    parser.add_argument("--writes", type=int, default=1000)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="audit-bench-") as workdir,
        PostgresServer(Path(workdir) / "postgres") as server,
    ):
        for marquees in (int(part) for part in args.fleets.split(",")):
            inventory = write_inventory(Path(workdir), marquees)
            await measure(server, inventory, marquees, args.writes)


if __name__ == "__main__":
    asyncio.run(main())
