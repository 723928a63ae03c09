"""Reads for a share (``PostgresDesiredState.set_share``) against the lab's PostgreSQL: a replica
holds the rows of its share of the fleet alone, each Marquee of it as the whole snapshot says,
and lists the others; the engine reads for the share its roster gives it, and for everyone when
it is alone."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from redis.asyncio import Redis

from playguard_async.desired_state.model import CohortMember, Inventory, InventoryError
from playguard_async.desired_state.postgres.connection import PgAddress, password_from
from playguard_async.desired_state.postgres.source import PostgresDesiredState
from tests.integration.test_desired_state_pg_narrow import EVERYONE, _what_concerns
from tests.support.engine import EngineHarness, ScriptedPhase
from tests.support.postgres import LabDatabase


def _source(postgres: LabDatabase, **options: Any) -> PostgresDesiredState:
    return PostgresDesiredState(
        PgAddress.parse(postgres.url), password_from(postgres.password, None), timeout=3.0,
        **options,
    )  # fmt: skip


@pytest.fixture
async def source(postgres: LabDatabase) -> AsyncIterator[PostgresDesiredState]:
    source = _source(postgres)
    yield source
    await source.close()


@pytest.mark.parametrize(
    "share", [[], ["edge-0"], ["edge-2"], ["edge-1", "edge-2"], EVERYONE, ["nobody", "edge-1"]]
)
async def test_a_read_for_a_share_holds_its_rows_as_the_whole_snapshot_says_and_lists_the_rest(
    fleet: asyncpg.Connection, source: PostgresDesiredState, share: list[str]
) -> None:
    whole = await source.load()
    source.set_share(set(share).__contains__)
    held = await source.load()

    mine = [name for name in EVERYONE if name in share]
    assert [m.name for m in held.marquees] == mine
    for name in mine:
        assert _what_concerns(held, name) == _what_concerns(whole, name)
    assert {p.marquee for p in held.playgrounds} <= set(mine)
    assert {held.playground_of(chat).marquee for chat in held.agent_chats} <= set(mine)
    assert held.listed() == whole.listed()
    # Models of the whole read are not reused: they would keep its memory (the allocator's
    # arenas) alive for the few a share holds.
    models = {id(model) for model in (*whole.marquees, *whole.playgrounds, *whole.playspecs)}
    assert not models & {id(m) for m in (*held.marquees, *held.playgrounds, *held.playspecs)}
    # What the source keeps between reads is the share's too.
    assert {row.marquee for row in source._memo.models["playgrounds"].values()} <= set(mine)


async def test_a_changed_share_is_read_anew_and_edits_elsewhere_show_in_the_listing(
    fleet: asyncpg.Connection, source: PostgresDesiredState
) -> None:
    source.set_share({"edge-0"}.__contains__)
    first = await source.load()
    await fleet.execute(
        "UPDATE playguard.marquee_steering SET mode = 'detect' WHERE name = 'edge-2'"
    )
    await fleet.execute(
        "UPDATE playguard.playgrounds SET branch = 'edited' WHERE name = 'shop-0-0'"
    )
    second = await source.load()
    source.set_share({"edge-1", "edge-2"}.__contains__)
    third = await source.load()

    assert [m.name for m in first.marquees] == [m.name for m in second.marquees] == ["edge-0"]
    assert [p.branch for p in second.playgrounds_on("edge-0") if p.name == "shop-0-0"] == ["edited"]
    assert ("edge-2", "detect") in [(m.name, m.mode) for m in second.listed()]
    assert [m.name for m in third.marquees] == ["edge-1", "edge-2"]
    assert third.marquee("edge-2").mode == "detect"
    assert [m.name for m in third.listed()] == EVERYONE


async def test_the_size_bound_counts_what_a_share_reads(
    fleet: asyncpg.Connection, postgres: LabDatabase
) -> None:
    async def fits(limit: int, share: set[str] | None) -> bool:
        source = _source(postgres, max_bytes=limit)
        source.set_share(None if share is None else share.__contains__)
        try:
            await source.load()
        except InventoryError as exc:
            refused = str(exc)
        else:
            return True
        finally:
            await source.close()
        assert "inventory_max_bytes" in refused
        return False

    async def least(share: set[str] | None) -> int:
        for limit in range(250, 20_000, 250):
            if await fits(limit, share):
                return limit
        raise AssertionError(f"{share} does not fit 20,000 bytes")

    whole, one = await least(None), await least({"edge-0"})
    assert one < whole
    assert not await fits(one, None)
    assert await fits(one, {"edge-0"})


async def test_an_engine_reads_for_its_rosters_share_and_for_everyone_alone(
    fleet: asyncpg.Connection, postgres: LabDatabase, redis: Redis
) -> None:
    sources = [_source(postgres) for _ in range(3)]
    harnesses = [
        EngineHarness(redis, ScriptedPhase("noop"), state=source, replica_id=f"replica-{n}")
        for n, source in enumerate(sources)
    ]
    try:
        alone = await harnesses[0].engine.load_inventory()
        for harness in harnesses:
            await harness.engine.roster.announce()
        for harness in harnesses:
            await harness.engine.roster.announce()  # each now sees all three
        held = [await harness.engine.load_inventory() for harness in harnesses]
        owned = [[n for n in EVERYONE if harness.engine.roster.owns(n)] for harness in harnesses]
        await harnesses[2].engine.roster.leave()
        await harnesses[0].engine.roster.announce()
        await harnesses[1].engine.roster.announce()
        after = [await harness.engine.load_inventory() for harness in harnesses[:2]]
    finally:
        for source in sources:
            await source.close()

    assert [m.name for m in alone.marquees] == EVERYONE
    shares = [sorted(m.name for m in inventory.marquees) for inventory in held]
    assert sorted(name for share in shares for name in share) == EVERYONE  # each once
    assert shares == owned
    for inventory in held:
        assert [m.name for m in inventory.listed()] == EVERYONE
    survivors = [sorted(m.name for m in inventory.marquees) for inventory in after]
    assert sorted(name for share in survivors for name in share) == EVERYONE


SCOPES = [("blog", "feature/x-0"), ("blog", "gone"), ("shop", "feature/next"),
          ("shop", "feature/x-1"), ("shop", "feature/x-2")]  # fmt: skip
"""Every (playspec, branch) of ``full_document``'s Playgrounds, and two no Playground has."""


def _cohorts(inventory: Inventory) -> dict[tuple[str, str], list[CohortMember]]:
    return {scope: list(inventory.cohort(*scope)) for scope in SCOPES}


@pytest.mark.parametrize(
    "share", [[], ["edge-0"], ["edge-1"], ["edge-2"], ["edge-0", "edge-2"], EVERYONE]
)
async def test_every_share_counts_the_whole_fleets_cohorts_and_canaries(
    fleet: asyncpg.Connection, source: PostgresDesiredState, share: list[str]
) -> None:
    await fleet.execute("UPDATE playguard.marquee_steering SET canary = true WHERE name = 'edge-1'")
    # edge-2 is neither launchable nor in apply mode: in no cohort, wherever it is held.
    await fleet.execute("UPDATE playguard.marquees SET launchable = true WHERE name = 'edge-2'")
    whole = await source.load()
    source.set_share(set(share).__contains__)
    held = await source.load()

    assert held.listed() == whole.listed()
    assert (
        _cohorts(held)
        == _cohorts(whole)
        == {
            ("blog", "feature/x-0"): [CohortMember("edge-0", False), CohortMember("edge-1", True)],
            ("blog", "gone"): [],
            ("shop", "feature/next"): [],
            ("shop", "feature/x-1"): [CohortMember("edge-0", False), CohortMember("edge-1", True)],
            ("shop", "feature/x-2"): [],  # stopped Playgrounds
        }
    )


async def test_a_cohort_elsewhere_changed_shows_though_the_shares_own_rows_did_not(
    fleet: asyncpg.Connection, source: PostgresDesiredState
) -> None:
    source.set_share({"edge-0"}.__contains__)
    first = await source.load()
    await fleet.execute(
        "UPDATE playguard.playgrounds SET branch = 'feature/next' WHERE name = 'shop-1-1'"
    )
    await fleet.execute("UPDATE playguard.marquee_steering SET canary = true WHERE name = 'edge-1'")
    second = await source.load()

    assert second is first, "the share's rows are unchanged: the same validated inventory"
    assert list(second.cohort("shop", "feature/next")) == [CohortMember("edge-1", True)]
    assert list(second.cohort("shop", "feature/x-1")) == [CohortMember("edge-0", False)]


RAISING_PLAYGROUNDS = """
ALTER TABLE playguard.playgrounds RENAME TO app_playgrounds;
CREATE VIEW playguard.playgrounds AS
SELECT name, playspec, marquee, branch, expires_at, stop_when_branch_gone,
       CASE WHEN 1 / (CASE WHEN name = 'shop-1-1' THEN 0 ELSE 1 END) = 1 THEN state END AS state
FROM playguard.app_playgrounds;
"""
"""A playgrounds view whose ``state`` raises for one row: the cohorts' read of it fails."""


@pytest.mark.parametrize(
    "breakage",
    [RAISING_PLAYGROUNDS,
     "ALTER TABLE playguard.playgrounds RENAME COLUMN branch TO branch_name"],
    ids=["view raises", "column missing"],
)  # fmt: skip
async def test_a_wrong_playgrounds_lists_the_others_with_no_cohort_as_their_owners_hold_none(
    fleet: asyncpg.Connection, postgres: LabDatabase, source: PostgresDesiredState, breakage: str
) -> None:
    await fleet.execute(breakage)
    whole = await source.load()
    problems = list(source.problems)
    shared = _source(postgres)
    shared.set_share({"edge-0"}.__contains__)
    try:
        held = await shared.load()
    finally:
        await shared.close()

    assert problems[0].startswith("playguard.playgrounds: ")
    assert list(shared.problems)[:1] == problems[:1]
    assert whole.marquees == held.marquees == [], "every Marquee has Playgrounds"
    assert [(m.name, m.cohorts) for m in held.listed()] == [("edge-1", ()), ("edge-2", ())]
    assert _cohorts(held) == _cohorts(whole) == {scope: [] for scope in SCOPES}
