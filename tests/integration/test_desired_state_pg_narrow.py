"""Narrow reads (``PostgresDesiredState.load_marquees``) against the lab's PostgreSQL: what a
wake-up reads of a few Marquees is, for each of them, what a whole snapshot says; where it
cannot be trusted it gives up (None) and the caller reads whole."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from structlog.testing import capture_logs

from playguard_async.desired_state.model import Inventory
from playguard_async.desired_state.postgres.connection import PgAddress, password_from
from playguard_async.desired_state.postgres.source import NARROW_READ_MAX, PostgresDesiredState
from tests.support.fencing import eventually
from tests.support.postgres import LabDatabase

EVERYONE = ["edge-0", "edge-1", "edge-2"]


def _source(postgres: LabDatabase, *, timeout: float = 3.0, **options: Any) -> PostgresDesiredState:
    return PostgresDesiredState(
        PgAddress.parse(postgres.url),
        password_from(postgres.password, None),
        timeout=timeout,
        **options,
    )


@pytest.fixture
async def source(postgres: LabDatabase) -> AsyncIterator[PostgresDesiredState]:
    source = _source(postgres)
    yield source
    await source.close()


def _what_concerns(inventory: Inventory, name: str) -> dict[str, Any]:
    """Everything a cycle of ``name`` reads of the inventory."""
    playgrounds = inventory.playgrounds_on(name)
    playspecs = {p.playspec: inventory.playspec_of(p) for p in playgrounds}
    return {
        "marquee": inventory.marquee(name),
        "playgrounds": playgrounds,
        "playspecs": playspecs,
        "registries": {n: inventory.registry_of(spec) for n, spec in playspecs.items()},
        "agent_chats": inventory.agent_chats_on(name),
    }


@pytest.mark.parametrize(
    "names",
    [["edge-0"], ["edge-2"], ["edge-1", "edge-2"], EVERYONE, ["nobody"], ["edge-0", "nobody"]],
)
async def test_a_narrow_read_is_what_the_whole_snapshot_says_of_its_marquees(
    fleet: asyncpg.Connection, source: PostgresDesiredState, names: list[str]
) -> None:
    whole = await source.load()
    narrow = await source.load_marquees(names)

    assert narrow is not None
    present = [name for name in names if name in EVERYONE]
    assert sorted(m.name for m in narrow.marquees) == sorted(present)
    for name in present:
        assert _what_concerns(narrow, name) == _what_concerns(whole, name)
    assert {p.marquee for p in narrow.playgrounds} == set(present)


async def test_a_narrow_read_sees_a_committed_edit_and_leaves_the_whole_snapshot_alone(
    fleet: asyncpg.Connection, source: PostgresDesiredState
) -> None:
    whole = await source.load()
    await fleet.execute(
        "UPDATE playguard.playgrounds SET branch = 'edited' WHERE name = 'shop-1-0'"
    )
    await fleet.execute("DELETE FROM playguard.agent_chats WHERE name = 'chat-0'")
    await fleet.execute("UPDATE playguard.marquee_steering SET mode = 'off' WHERE name = 'edge-0'")

    narrow = await source.load_marquees(["edge-0", "edge-1"])

    assert narrow is not None
    assert [p.branch for p in narrow.playgrounds_on("edge-1") if p.name == "shop-1-0"] == ["edited"]
    assert narrow.agent_chats_on("edge-0") == []
    assert narrow.marquee("edge-0").mode == "off"
    assert await source.load() != whole  # the next whole read sees them too
    assert (await source.load_marquees(["edge-1"])) is not None


async def test_a_deleted_marquee_is_absent_from_a_narrow_read(
    fleet: asyncpg.Connection, source: PostgresDesiredState
) -> None:
    await source.load()
    async with fleet.transaction():
        await fleet.execute(
            "DELETE FROM playguard.agent_chats WHERE playground IN "
            "(SELECT name FROM playguard.playgrounds WHERE marquee = 'edge-1')"
        )
        await fleet.execute("DELETE FROM playguard.playgrounds WHERE marquee = 'edge-1'")
        await fleet.execute("DELETE FROM playguard.marquee_steering WHERE name = 'edge-1'")
        await fleet.execute("DELETE FROM playguard.marquees WHERE name = 'edge-1'")

    narrow = await source.load_marquees(["edge-1"])

    assert narrow is not None
    assert narrow.marquees == []
    assert narrow.playgrounds == []


# Names are the outside's (a NOTIFY payload any writer of the database may send): a parameter,
# never SQL. A NUL cannot be a text parameter: the read gives up, nothing else happens.
HOSTILE_NAMES = [
    ["'; DROP TABLE playguard.marquees; --"],
    ["edge-0' OR '1'='1"],
    ["édge-0", "😀" * 100],
    ["x" * 10_000],
    ["edge-0\x00"],
    [""],
]


@pytest.mark.parametrize("names", HOSTILE_NAMES)
async def test_hostile_names_read_nothing_and_change_nothing(
    fleet: asyncpg.Connection, source: PostgresDesiredState, names: list[str]
) -> None:
    whole = await source.load()
    narrow = await source.load_marquees(names)
    assert narrow is None or narrow.marquees == []
    assert await source.load() == whole
    assert (await source.load_marquees(["edge-0"])) is not None, "the next narrow read works"


async def test_a_narrow_read_gives_up_where_only_a_whole_snapshot_will_do(
    fleet: asyncpg.Connection, source: PostgresDesiredState, postgres: LabDatabase
) -> None:
    assert await source.load_marquees(["edge-0"]) is None, "no whole snapshot read yet"
    await source.load()
    assert await source.load_marquees([]) is None
    too_many = [f"m-{index}" for index in range(NARROW_READ_MAX + 1)]
    assert await source.load_marquees(too_many) is None

    # The connection killed under it (its end seen, however long the backend takes to go): the
    # next read connects again.
    killed = source._connection
    assert killed is not None
    await fleet.execute("SELECT pg_terminate_backend($1)", killed.get_server_pid())
    await eventually(killed.is_closed, timeout=10, what="the killed connection's end")
    assert await source.load_marquees(["edge-0"]) is not None

    # A read that cannot end in time (a table locked by a migration): None within the timeout,
    # its connection dropped; once the lock is gone, the next read works.
    hurried = _source(postgres, timeout=0.5)
    try:
        await hurried.load()
        async with fleet.transaction():
            await fleet.execute("LOCK TABLE playguard.playgrounds IN ACCESS EXCLUSIVE MODE")
            with capture_logs() as logs:
                assert await hurried.load_marquees(["edge-0"]) is None
        assert [e["event"] for e in logs] == ["desired_state.narrow_read_failed"]
        assert "TimeoutError" in logs[0]["error"]
        assert await hurried.load_marquees(["edge-0"]) is not None
    finally:
        await hurried.close()

    # A relation read by its keys alone: narrow reads wait for a whole snapshot again.
    await fleet.execute("ALTER TABLE playguard.agent_chats DROP COLUMN image")
    await source.load()
    assert await source.load_marquees(["edge-0"]) is None


async def test_a_narrow_read_is_bounded_in_bytes_as_a_whole_read_is(
    fleet: asyncpg.Connection, postgres: LabDatabase
) -> None:
    sized = _source(postgres, max_bytes=64 << 10)
    try:
        whole = await sized.load()
        await fleet.execute(
            "ALTER TABLE playguard.agent_chats DROP CONSTRAINT agent_chats_command_check"
        )
        await fleet.execute(
            "UPDATE playguard.agent_chats SET command = array_fill('x'::text, ARRAY[100000]) "
            "WHERE name = 'chat-0'"
        )
        with capture_logs() as logs:
            assert await sized.load_marquees(["edge-0"]) is None
        assert "more than the limit of 65536" in logs[0]["error"]
        assert await sized.load_marquees(["edge-1"]) is not None, "edge-1's rows are small"
        with pytest.raises(Exception, match="inventory_max_bytes"):
            await sized.load()
        assert sized._last is whole
    finally:
        await sized.close()
