"""What one tick's desired state costs from PostgreSQL and from the YAML file, side by side in
one run, for the same fleet (N Marquees with 5 Playgrounds each, ``inventory_load``'s fleet).

Interleaved round after round:
- ``yaml``: ``YamlInventorySource.load()`` of the file, read, parsed and validated (a fresh
  source each round, so nothing is remembered);
- ``pg cold``: a fresh ``PostgresDesiredState.load()``: connect, the five tables read in one
  REPEATABLE READ READ ONLY transaction, every row validated by the same models, index built;
- ``unchanged``: ``load()`` again on the kept source, nothing changed (the common tick);
- ``1% changed``: ``load()`` after about 1% of the Playgrounds changed branch (only those rows
  are validated again);
- ``pg read``: the snapshot's read alone (asyncpg, no validation).

With ``--share N`` the same rounds also read as one replica of N does (``set_share``: its
share's rows, and a listing of every other Marquee with its rollout cohorts): ``share read``
(``read_snapshot`` alone), ``share cold`` (a fresh source's ``load()``) and ``share unchanged``.

With ``--views`` the same fleet is also laid out as an application keeps it (schema ``app``:
``bigint`` ids, Playgrounds and AgentChats referring by id) and read through the views of the
README's integration guide (schema ``mapped``: a join per Playground and per chat): ``views
read``, ``views cold`` and ``views unchanged`` are printed beside the tables' figures, from the
same rounds.

Prints the best wall-clock milliseconds per operation (the target: under 1 s at 10,000
Marquees), our process's CPU ms for the cold load, and ratios to the YAML source. Starts the lab's
PostgreSQL (Debian's, as the tests do) in a temporary directory and stops it at the end.

    .venv/bin/python bench/desired_state_pg.py [--fleets 1000,10000] [--rounds 3] [--views]
        [--share N]

Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
from inventory_load import PLAYGROUNDS_PER_MARQUEE, write_inventory  # bench/ is on sys.path

from playguard_async.desired_state.postgres.connection import (
    PasswordSource,
    PgAddress,
    password_from,
)
from playguard_async.desired_state.postgres.schema import migrate
from playguard_async.desired_state.postgres.snapshot import read_snapshot
from playguard_async.desired_state.postgres.source import PostgresDesiredState
from playguard_async.desired_state.postgres.transfer import import_inventory
from playguard_async.desired_state.yaml_source import YamlInventorySource
from playguard_async.kits.collector import settle_new_desired_state
from playguard_lab import PostgresServer


async def timed(operation: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    """Wall-clock and process CPU milliseconds of one awaited operation.

    What is alive afterwards is then settled as the engine settles every new inventory (frozen
    out of the collector's generations): otherwise the collections the operation's objects are
    owed would be charged to the next operation measured."""
    wall, cpu = time.perf_counter(), time.process_time()
    await operation()
    figures = (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000
    settle_new_desired_state()
    return figures


MAPPED = "mapped"
"""The schema of the views over the application's layout (``--views``)."""

APP_LAYOUT = """
DROP SCHEMA IF EXISTS app CASCADE;
DROP SCHEMA IF EXISTS mapped CASCADE;
CREATE SCHEMA app;
CREATE SCHEMA mapped;
CREATE TABLE app.marquees AS
    SELECT row_number() OVER (ORDER BY name)::bigint AS id, m.* FROM playguard.marquees m;
ALTER TABLE app.marquees ADD PRIMARY KEY (id);
CREATE UNIQUE INDEX ON app.marquees (name);
CREATE TABLE app.playgrounds AS
    SELECT row_number() OVER (ORDER BY p.name)::bigint AS id, m.id AS marquee_id, p.name,
           p.playspec, p.branch, p.state, p.expires_at, p.stop_when_branch_gone
    FROM playguard.playgrounds p JOIN app.marquees m ON m.name = p.marquee;
ALTER TABLE app.playgrounds ADD PRIMARY KEY (id);
CREATE INDEX ON app.playgrounds (marquee_id);
CREATE TABLE app.agent_chats AS
    SELECT row_number() OVER (ORDER BY c.name)::bigint AS id, p.id AS playground_id, c.name,
           c.image, c.command, c.state
    FROM playguard.agent_chats c JOIN app.playgrounds p ON p.name = c.playground;
CREATE VIEW mapped.marquees AS
    SELECT name, host, port, "user", identity_file, known_hosts, docker_socket, workdir,
           state_dir, launchable FROM app.marquees;
CREATE VIEW mapped.registries AS SELECT * FROM playguard.registries;
CREATE VIEW mapped.playspecs AS SELECT * FROM playguard.playspecs;
CREATE VIEW mapped.playgrounds AS
    SELECT p.name, p.playspec, m.name AS marquee, p.branch, p.state, p.expires_at,
           p.stop_when_branch_gone
    FROM app.playgrounds p JOIN app.marquees m ON m.id = p.marquee_id;
CREATE VIEW mapped.agent_chats AS
    SELECT c.name, p.name AS playground, c.image, c.command, c.state
    FROM app.agent_chats c JOIN app.playgrounds p ON p.id = c.playground_id;
ANALYZE;
"""


def share_of(replicas: int) -> Callable[[str], bool]:
    """One replica's share of ``replicas``: about 1/N of the Marquees, the same every round."""
    return lambda name: zlib.crc32(name.encode()) % replicas == 0


async def measure(
    server: PostgresServer, path: Path, rounds: int, *, views: bool, share: int
) -> dict[str, float]:
    address, password = PgAddress.parse(server.url), password_from(server.password, None)
    warm = PostgresDesiredState(address, password, timeout=600)
    warm_views = PostgresDesiredState(address, password, timeout=600, schema=MAPPED)
    connection = await connect_to(server)
    best: dict[str, float] = {}

    def keep(name: str, value: float) -> None:
        best[name] = min(best.get(name, value), value)

    try:
        await import_inventory(connection, path, replace=True)
        expected = await YamlInventorySource(path, max_bytes=64 << 20, timeout=600).load()
        loaded = await warm.load()
        assert len(loaded.marquees) == len(expected.marquees)
        assert len(loaded.playgrounds) == len(expected.playgrounds)
        if views:
            await connection.execute(APP_LAYOUT)
            assert await warm_views.load() == loaded, "the views give the same inventory"
        for round_number in range(rounds):
            yaml_source = YamlInventorySource(path, max_bytes=64 << 20, timeout=600)
            keep("yaml", (await timed(yaml_source.load))[0])
            cold = PostgresDesiredState(address, password, timeout=600)
            try:
                wall, cpu = await timed(cold.load)
            finally:
                await cold.close()
            keep("pg cold", wall)
            keep("pg cold cpu", cpu)
            keep("pg unchanged", (await timed(warm.load))[0])
            await connection.execute(
                "UPDATE playgrounds SET branch = $1 WHERE name LIKE '%-0' AND random() < 0.05",
                f"feature/round-{round_number}",
            )
            keep("pg 1% changed", (await timed(warm.load))[0])
            keep("pg read", (await timed(lambda: read_snapshot(connection)))[0])
            if views:
                await measure_views(address, password, connection, warm_views, keep)
            if share:
                await measure_share(address, password, connection, share_of(share), keep)
    finally:
        await warm.close()
        await warm_views.close()
        await connection.close()
    return best


async def measure_views(
    address: PgAddress,
    password: PasswordSource,
    connection: Any,
    warm: PostgresDesiredState,
    keep: Callable[[str, float], None],
) -> None:
    """One round of the view figures, right after the tables' (same fleet, same load)."""
    keep("views read", (await timed(lambda: read_snapshot(connection, MAPPED)))[0])
    cold = PostgresDesiredState(address, password, timeout=600, schema=MAPPED)
    try:
        keep("views cold", (await timed(cold.load))[0])
    finally:
        await cold.close()
    keep("views unchanged", (await timed(warm.load))[0])


async def measure_share(
    address: PgAddress,
    password: PasswordSource,
    connection: Any,
    owns: Callable[[str], bool],
    keep: Callable[[str, float], None],
) -> None:
    """One round of the share figures, right after the tables' (same fleet, same load)."""
    keep("share read", (await timed(lambda: read_snapshot(connection, share=owns)))[0])
    source = PostgresDesiredState(address, password, timeout=600)
    source.set_share(owns)
    try:
        wall, cpu = await timed(source.load)
        keep("share cold", wall)
        keep("share cold cpu", cpu)
        keep("share unchanged", (await timed(source.load))[0])
    finally:
        await source.close()


async def connect_to(server: PostgresServer) -> Any:
    return await asyncpg.connect(server.url, password=server.password)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleets", default="1000,10000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--views", action="store_true", help="also read through views")
    parser.add_argument("--share", type=int, default=0, help="also read as 1 replica of N")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="pg-bench-") as workdir,
        PostgresServer(Path(workdir) / "postgres") as server,
    ):
        connection = await connect_to(server)
        await migrate(connection)
        await connection.close()
        print(
            f"best of {args.rounds} rounds, wall ms per load, "
            f"{PLAYGROUNDS_PER_MARQUEE} Playgrounds per Marquee"
        )
        print(
            f"{'marquees':>8} {'yaml':>7} {'pg cold':>8} {'(cpu)':>6} {'unchanged':>9} "
            f"{'1% changed':>10} {'pg read':>8} {'cold/yaml':>9} {'1%/yaml':>8}"
        )
        for marquees in (int(part) for part in args.fleets.split(",")):
            path = write_inventory(Path(workdir), marquees)
            figures = await measure(server, path, args.rounds, views=args.views, share=args.share)
            print(
                f"{marquees:>8} {figures['yaml']:>7.0f} {figures['pg cold']:>8.0f} "
                f"{figures['pg cold cpu']:>6.0f} {figures['pg unchanged']:>9.0f} "
                f"{figures['pg 1% changed']:>10.0f} {figures['pg read']:>8.0f} "
                f"{figures['pg cold'] / figures['yaml']:>9.2f} "
                f"{figures['pg 1% changed'] / figures['yaml']:>8.2f}"
            )
            if args.views:
                print(
                    f"{'':>8} views: read {figures['views read']:.0f} "
                    f"({figures['views read'] / figures['pg read']:.2f}x the tables'), "
                    f"cold {figures['views cold']:.0f} "
                    f"({figures['views cold'] / figures['pg cold']:.2f}x), "
                    f"unchanged {figures['views unchanged']:.0f} "
                    f"({figures['views unchanged'] / figures['pg unchanged']:.2f}x)"
                )
            if args.share:
                print(
                    f"{'':>8} share of 1/{args.share}: read {figures['share read']:.0f}, "
                    f"cold {figures['share cold']:.0f} (cpu {figures['share cold cpu']:.0f}), "
                    f"unchanged {figures['share unchanged']:.0f}"
                )


if __name__ == "__main__":
    asyncio.run(main())
