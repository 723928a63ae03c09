"""``playguard why`` joins a change to the cycle that first read it, on the lab's PostgreSQL: each
cycle's version is what the daemon's read of the snapshot records (``read_snapshot``), each change
what the change log holds (``read_changes``), so the join is proven on the database's own ids and
snapshots. The review's three cases: a drift fixed after a change, a long transaction that
commits after a cycle started, and a history whose first reader Redis no longer keeps."""

from __future__ import annotations

import time
from typing import Any

import asyncpg
import pytest

from playguard_async.cycle_record import DesiredVersion, StoredRecord
from playguard_async.desired_state.postgres.change_log import read_changes
from playguard_async.desired_state.postgres.snapshot import read_snapshot
from playguard_async.operator.display import timeline_lines
from playguard_async.operator.why import Event, Sources, Timeline, change_event, joined
from tests.support.postgres import LabDatabase

MOVE = "UPDATE playguard.playgrounds SET branch = $1 WHERE name = $2"


def cycle_record(
    cycle_id: str, at: float, desired: DesiredVersion | None, *, drift: bool = False,
    acted: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """A cycle record of edge-0 as the engine writes one: it read ``desired``, and acted on
    shop-0-1 (a drift fixed when ``drift``, else the branch it was given) unless not ``acted``."""
    actions = ["compose up playground shop-0-1 (drift)" if drift else
               "update playground shop-0-1 from a to b"] if acted else []  # fmt: skip
    finding = {"state": "running", "drift": ["app: missing"] if drift else [], "actions": actions}
    return {
        "marquee": "edge-0", "cycle": cycle_id, "outcome": "ok", "fence": 3, "replica": "r1",
        "finished_at": at + 1.0, "duration": 1.0, "desired": desired,
        "actions": {"reconcile_playgrounds": actions},
        "findings": {"reconcile_playgrounds": {"playgrounds": {"shop-0-1": finding}}},
    }  # fmt: skip


async def version(connection: asyncpg.Connection) -> DesiredVersion | None:
    """The change log's version a cycle reading now records."""
    return (await read_snapshot(connection)).last_change


async def moved(connection: asyncpg.Connection, actor: str, playground: str) -> None:
    async with connection.transaction():
        await connection.execute("SELECT set_config('playguard.actor', $1, true)", actor)
        await connection.execute(MOVE, f"feature/{actor}-{time.monotonic_ns()}", playground)


async def timeline_of(
    connection: asyncpg.Connection, records: list[dict[str, Any]]
) -> tuple[dict[str, Event], dict[str, Event]]:
    """edge-0's timeline from ``records`` and its change log: the cycles by id and the changes
    by their claimed actor."""
    changes = [change_event(e) for e in await read_changes(connection, "playguard", "edge-0",
                                                           since=0.0)]  # fmt: skip
    kept: list[StoredRecord] = list(records)
    events = joined(Sources(records=kept, changes=changes), extra=[], playground=None, since=0.0)
    lines = timeline_lines(Timeline("edge-0", None, 0.0, events))
    assert lines, "the timeline reads as text"
    return (
        {e.cycle_id: e for e in events if e.kind == "cycle" and e.cycle_id is not None},
        {e.by.split(" (claimed)")[0]: e for e in events if e.kind == "change"},
    )


@pytest.mark.parametrize("reader_acted", [True, False], ids=["reader-acted", "reader-quiet"])
async def test_a_drift_fixed_after_a_change_includes_no_change(
    fleet: asyncpg.Connection, reader_acted: bool
) -> None:
    start = time.time()
    before = await version(fleet)
    await moved(fleet, "bob", "shop-0-1")
    read = await version(fleet)
    records = [
        cycle_record("c0", start, before, acted=False),
        cycle_record("c1", start + 10, read, acted=reader_acted),
        cycle_record("c2", start + 20, read, drift=True),
    ]

    cycles, changes = await timeline_of(fleet, records)

    assert changes["bob"].included_in == "c1"
    assert changes["bob"].read_by_or_before is None
    assert len(cycles["c1"].includes) == 1, "the reader is shown, quiet or not"
    assert cycles["c2"].includes == (), "a drift fix includes no change"
    assert "c0" not in cycles, "a quiet cycle that read nothing new is left out"


async def test_a_long_transaction_joins_the_cycle_after_its_commit_not_the_one_after_its_start(
    fleet: asyncpg.Connection, postgres: LabDatabase
) -> None:
    start = time.time()
    before = await version(fleet)
    long = await postgres.connect()
    other = await postgres.connect()
    try:
        transaction = long.transaction()
        await transaction.start()
        await long.execute("SELECT set_config('playguard.actor', 'slow', true)")
        await long.execute(MOVE, "feature/slow", "shop-0-1")
        await moved(other, "quick", "shop-1-1")  # edge-1's chain: a higher id commits first
        during = await version(fleet)
        await transaction.commit()
        after = await version(fleet)
    finally:
        await long.close()
        await other.close()
    records = [
        cycle_record("c0", start, before, acted=False),
        cycle_record("c1", start + 10, during, drift=True),
        cycle_record("c2", start + 20, after),
    ]

    cycles, changes = await timeline_of(fleet, records)

    assert during is not None
    assert during.get("unseen"), "the snapshot names the id it did not see"
    assert changes["slow"].included_in == "c2"
    assert changes["slow"].at < records[1]["finished_at"] - 1.0, "by time, c1 would have it"
    assert cycles["c1"].includes == (), "c1 started after it, but did not see it"
    assert len(cycles["c2"].includes) == 1


async def test_a_change_whose_first_reader_is_no_longer_recorded_is_credited_to_no_later_cycle(
    fleet: asyncpg.Connection,
) -> None:
    start = time.time()
    for actor in ("a1", "a2", "a3"):
        await moved(fleet, actor, "shop-0-1")
    read = await version(fleet)
    kept = [cycle_record(f"c{n}", start + 10 * n, read, drift=True) for n in range(2, 5)]

    cycles, changes = await timeline_of(fleet, kept)

    assert {changes[a].included_in for a in ("a1", "a2", "a3")} == {None}
    assert {changes[a].read_by_or_before for a in ("a1", "a2", "a3")} == {"c2"}
    assert all(cycle.includes == () for cycle in cycles.values())
    text = "\n".join(timeline_lines(Timeline("edge-0", None, 0.0, list(changes.values()))))
    assert "[in cycle c2 or one before it, no longer recorded]" in text
