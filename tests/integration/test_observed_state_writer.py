"""The observed-state write-back against the lab's real PostgreSQL: batched off the cycles,
never set back to an older cycle, one refused value failing only its own record, and a stop
bounded when the database does not answer."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator
from typing import Any, cast

import asyncpg
import pytest
from structlog.testing import capture_logs

from playguard_async.cycle_record import CycleRecord
from playguard_async.desired_state.postgres.connection import PgAddress, password_from
from playguard_async.desired_state.postgres.observed_state import WRITE_BATCH, ObservedStateWriter
from playguard_async.desired_state.postgres.schema import migrate
from tests.support.postgres import LabDatabase

pytestmark = pytest.mark.integration


def cycle_record(
    marquee: str, *, finished_at: float = 1_700_000_000.0, **changes: Any
) -> CycleRecord:
    """A cycle record of ``marquee`` that reconciled one Playground of its own."""
    record: dict[str, Any] = {
        "marquee": marquee, "outcome": "ok", "reason": None, "phase": None, "fence": 1,
        "host_fence": None, "cycle": "c-1", "durations": {"sync_git": 0.1},
        "actions": {"sync_git": []}, "duration": 0.2, "finished_at": finished_at,
        "findings": {"reconcile_playgrounds": {"playgrounds": {
            f"{marquee}-pg": {"state": "running", "drift": [], "actions": []}}}},
        "notices": {}, "replica": "r0", "dry_run": False, "waited": 0.0,
    }  # fmt: skip
    return cast(CycleRecord, {**record, **changes})


@contextlib.asynccontextmanager
async def migrated(postgres: LabDatabase) -> AsyncIterator[asyncpg.Connection]:
    connection = await postgres.connect()
    try:
        await migrate(connection)
        yield connection
    finally:
        await connection.close()


def writer_for(
    postgres: LabDatabase, replica: str = "r0", timeout: float = 5.0
) -> ObservedStateWriter:
    address, password = PgAddress.parse(postgres.url), password_from(postgres.password, None)
    return ObservedStateWriter(address, password, replica=replica, timeout=timeout)


async def test_records_handed_over_together_are_written_a_batch_a_transaction(
    postgres: LabDatabase,
) -> None:
    """A tick's cycles ending together cost PostgreSQL a transaction per ``WRITE_BATCH``
    records, not one each; the rows written in one transaction share its ``xmin``."""
    fleet = 2 * WRITE_BATCH + 17
    async with migrated(postgres) as connection:
        writer = writer_for(postgres)
        for n in range(fleet):
            writer.record(cycle_record(f"edge-{n}"))
        await writer.close()
        transactions = await connection.fetchval(
            "SELECT count(DISTINCT xmin::text) FROM playguard.marquee_status"
        )
        marquees = await connection.fetchval("SELECT count(*) FROM playguard.marquee_status")
        playgrounds = await connection.fetchval("SELECT count(*) FROM playguard.playground_status")
    assert (marquees, playgrounds, writer.failures) == (fleet, fleet, 0)
    assert transactions == math.ceil(fleet / WRITE_BATCH)


async def test_handing_over_does_not_wait_for_the_database(postgres: LabDatabase) -> None:
    """``record`` returns at once, the cycle's slot free: the write happens in the writer's
    task, and a Marquee's newer record replaces its older one not yet written."""
    async with migrated(postgres) as connection:
        writer = writer_for(postgres)
        for cycle in ("c-1", "c-2", "c-3"):
            writer.record(cycle_record("edge-0", cycle=cycle))
        assert await connection.fetchval("SELECT count(*) FROM playguard.marquee_status") == 0
        await writer.close()
        rows = await connection.fetch("SELECT marquee, cycle FROM playguard.marquee_status")
    assert [tuple(row) for row in rows] == [("edge-0", "c-3")]


@pytest.mark.parametrize(
    ("later_finished_at", "kept"),
    [
        (1_700_000_001.0, ("r1", "c-new")),  # a newer cycle: written
        (1_700_000_000.0, ("r1", "c-new")),  # the same moment: written (idempotent rewrites)
        (1_699_999_999.0, ("r0", "c-old")),  # an older one, written late by the last holder
        (0.0, ("r0", "c-old")),
    ],
)
async def test_a_row_is_never_set_back_to_an_older_cycle(
    postgres: LabDatabase, later_finished_at: float, kept: tuple[str, str]
) -> None:
    """After a hand-over the Marquee's earlier replica may write its last cycle after the new
    one's: the status rows keep the cycle that finished last."""
    async with migrated(postgres) as connection:
        first = writer_for(postgres, "r0")
        first.record(cycle_record("edge-0", finished_at=1_700_000_000.0, cycle="c-old"))
        await first.close()
        later = writer_for(postgres, "r1")
        later.record(cycle_record("edge-0", finished_at=later_finished_at, cycle="c-new"))
        await later.close()
        row = await connection.fetchrow("SELECT replica, cycle FROM playguard.marquee_status")
        playground = await connection.fetchval("SELECT cycle FROM playguard.playground_status")
    assert tuple(row) == kept
    assert playground == kept[1]


REFUSED = {
    "a NUL in a drift line": {"findings": {"reconcile_playgrounds": {"playgrounds": {
        "edge-3-pg": {"state": "running", "drift": ["image\x00differs"], "actions": []}}}}},
    "a NUL in the reason": {"reason": "host said \x00"},
    "a NUL in a Playground's name": {"findings": {"reconcile_playgrounds": {"playgrounds": {
        "pg\x00": {"state": "running", "drift": [], "actions": []}}}}},
    "a lone surrogate in the reason": {"reason": "bad \udc80 bytes"},
    "a NUL in the last action": {"findings": {"reconcile_playgrounds": {"playgrounds": {
        "edge-3-pg": {"state": "running", "drift": [], "actions": ["up\x00"]}}}}},
}  # fmt: skip


@pytest.mark.parametrize("changes", REFUSED.values(), ids=REFUSED.keys())
async def test_a_value_postgresql_refuses_fails_its_own_record_only(
    postgres: LabDatabase, changes: dict[str, Any]
) -> None:
    """Host output reaches the rows (drift lines, reasons): one value PostgreSQL cannot store
    must not cost the other Marquees of its batch their status."""
    async with migrated(postgres) as connection:
        writer = writer_for(postgres)
        with capture_logs() as logs:
            for n in range(10):
                writer.record(cycle_record(f"edge-{n}", **(changes if n == 3 else {})))
            await writer.close()
            writer.record(cycle_record("edge-3"))  # the writer goes on
            await writer.close()
        names = await connection.fetch("SELECT marquee FROM playguard.marquee_status")
    assert sorted(row["marquee"] for row in names) == sorted(f"edge-{n}" for n in range(10))
    assert writer.failures == 1
    failed = [line for line in logs if line["event"] == "observed_state.write_failed"]
    assert [(line["records"], line["marquee"]) for line in failed] == [(1, "edge-3")]


@contextlib.asynccontextmanager
async def database_away(how: str, unused_port: int) -> AsyncIterator[int]:
    """The port of a database that refuses connections, or of one that accepts them and never
    answers (hung, or behind a firewall that drops)."""
    if how == "refusing":
        yield unused_port
        return
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for writer in held:
            writer.close()
        await server.wait_closed()


@pytest.mark.parametrize("away", ["refusing", "silent"])
async def test_a_database_away_costs_a_log_line_a_batch_and_a_bounded_close(
    away: str, unused_tcp_port: int
) -> None:
    """Every record handed over is counted as failed; the log says so once a batch, not once a
    record; ``close`` (the daemon's stop) waits ``timeout`` at most, whatever is left."""
    fleet = 3 * WRITE_BATCH
    async with database_away(away, unused_tcp_port) as port:
        address = PgAddress.parse(f"postgresql://playguard@127.0.0.1:{port}/playguard")
        writer = ObservedStateWriter(
            address, password_from("secret", None), replica="r0", timeout=0.5
        )
        with capture_logs() as logs:
            for n in range(fleet):
                writer.record(cycle_record(f"edge-{n}"))
            started = time.monotonic()
            await writer.close()
            closing = time.monotonic() - started
    assert writer.failures == fleet
    failed = [line for line in logs if line["event"] == "observed_state.write_failed"]
    assert sum(line["records"] for line in failed) == fleet
    assert len(failed) <= math.ceil(fleet / WRITE_BATCH)
    assert closing < 2.0, f"close took {closing:.1f} s with a 0.5 s timeout"
    assert all("secret" not in str(line) for line in logs)
