"""``playguard why`` joins a change to the cycle that first read it, on the lab's PostgreSQL: each
cycle's version is what the daemon's read of the snapshot records (``read_snapshot``), each change
what the change log holds (``read_changes``), so the join is proven on the database's own ids and
snapshots. The review's three cases: a drift fixed after a change, a long transaction that
commits after a cycle started, and a history whose first reader Redis no longer keeps; and when
Redis keeps none of the cycles that applied it, the lab host's journal, written by its guard and
read back as ``why`` reads it, names the one that did."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from playguard_async.cycle_record import DesiredVersion, StoredRecord, read_through
from playguard_async.desired_state.model import Marquee
from playguard_async.desired_state.postgres.change_log import read_changes
from playguard_async.desired_state.postgres.snapshot import read_snapshot
from playguard_async.operator.display import timeline_lines
from playguard_async.operator.why import (
    Event,
    Sources,
    Timeline,
    change_event,
    joined,
    read_host_journal,
)
from playguard_async.remote.ssh import open_session
from playguard_lab import DockerDaemon, SshServer
from tests.support.engine import settings_for
from tests.support.fencing import StaticLease
from tests.support.postgres import LabDatabase
from tests.support.world import LAB_OPTIONS, lab_marquee_fields

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
    connection: asyncpg.Connection, records: list[dict[str, Any]], marquee: Marquee | None = None
) -> tuple[dict[str, Event], dict[str, Event]]:
    """edge-0's timeline from ``records``, its change log and, given its ``marquee``, the host's
    journal as ``why`` reads it: the cycles by id and the changes by their claimed actor."""
    changes = [change_event(e) for e in await read_changes(connection, "playguard", "edge-0",
                                                           since=0.0)]  # fmt: skip
    kept: list[StoredRecord] = list(records)
    writes = [] if marquee is None else (await read_host_journal(marquee, settings_for())).writes
    sources = Sources(records=kept, writes=writes, changes=changes)
    events = joined(sources, extra=[], playground=None, since=0.0)
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


async def write_as_cycle(
    marquee: Marquee, fence: int, cycle_id: str, read: DesiredVersion | None
) -> None:
    """One write through the host's fence guard, as the cycle ``cycle_id`` that read ``read``
    makes it under ``fence`` (the engine's opener gives the session the same two)."""
    async with open_session(
        marquee, LAB_OPTIONS, lease=StaticLease(fence), cycle_id=cycle_id,
        read_through=read_through(read),
    ) as session:  # fmt: skip
        await session.change(f"update playground shop-0-1 ({cycle_id})", ["true"])


@pytest.mark.parametrize("kept", [(), ("c3",)], ids=["redis-flushed", "history-trimmed"])
async def test_when_redis_keeps_no_record_of_the_cycle_that_applied_a_change_the_journal_names_it(
    fleet: asyncpg.Connection, ssh_server: SshServer, docker_daemon: DockerDaemon,
    tmp_path: Path, kept: tuple[str, ...],
) -> None:  # fmt: skip
    marquee = Marquee.model_validate(lab_marquee_fields(ssh_server, docker_daemon, tmp_path / "w"))
    start = time.time()
    await write_as_cycle(marquee, 1, "c1", await version(fleet))
    await moved(fleet, "late", "shop-0-1")
    read = await version(fleet)
    await write_as_cycle(marquee, 2, "c2", read)
    await write_as_cycle(marquee, 3, "c3", read)
    records = [cycle_record(c, start + 10, read) for c in kept]

    cycles, changes = await timeline_of(fleet, records, marquee)

    assert (changes["late"].applied_by, changes["late"].included_in) == ("c2", None)
    assert changes["late"].read_by_or_before is None, "c2, not the kept c3 'or one before it'"
    assert all(cycle.includes == () for cycle in cycles.values())
    text = "\n".join(timeline_lines(Timeline("edge-0", None, 0.0, [changes["late"]])))
    assert "[applied by cycle c2, from the host journal]" in text
    assert "no longer recorded" not in text
