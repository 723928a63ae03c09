"""Replicas split the fleet through their announcements in the real lab redis-server.

Assignment is a hint: these tests show that live replicas attempt disjoint shares covering the
whole fleet, that a replica stopping or dying hands its share on, and that an unreadable or
hostile roster makes a replica attempt everything rather than nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from redis.asyncio import Redis
from structlog.testing import capture_logs

from playguard_async import __version__
from playguard_async.coordination.client import connect_redis
from playguard_async.coordination.keys import REPLICA_VERSIONS_KEY, REPLICAS_KEY
from playguard_async.coordination.replicas import (
    MAX_REPLICAS,
    ReplicaRoster,
    Share,
    live_versions,
    mix_of,
)
from playguard_async.engine.results import Outcome
from playguard_async.kits.capacity import MAX_SECONDS
from playguard_lab.process import free_port
from tests.support.engine import EngineHarness, ScriptedPhase

pytestmark = pytest.mark.integration

FLEET = [f"m{i}" for i in range(1, 201)]
TTL = 0.5


def roster(redis: Redis, replica: str, *, ttl: float = TTL) -> ReplicaRoster:
    return ReplicaRoster(redis, replica, ttl=ttl, timeout=1.0, version=__version__)


def share(of: ReplicaRoster) -> set[str]:
    return {marquee for marquee in FLEET if of.owns(marquee)}


async def poll(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_live_replicas_attempt_disjoint_shares_that_cover_the_fleet(redis: Redis) -> None:
    rosters = [roster(redis, f"r{n}") for n in range(1, 4)]
    for _ in range(2):  # the first ones announced before the others existed
        for each in rosters:
            await each.announce()
    shares = [share(each) for each in rosters]
    assert set().union(*shares) == set(FLEET)
    assert sum(len(each) for each in shares) == len(FLEET)
    assert all(len(each) > len(FLEET) / 6 for each in shares), [len(each) for each in shares]


async def test_a_replica_that_leaves_hands_its_share_over_at_the_next_announcement(
    redis: Redis,
) -> None:
    staying, leaving = roster(redis, "staying"), roster(redis, "leaving")
    await leaving.announce()
    await staying.announce()
    assert share(staying) != set(FLEET)
    await leaving.leave()
    assert share(leaving) == set(FLEET), "a replica that left no longer trusts its old view"
    await staying.announce()
    assert share(staying) == set(FLEET)


async def test_a_replica_that_stops_announcing_drops_out_after_its_ttl(redis: Redis) -> None:
    survivor, dead = roster(redis, "survivor"), roster(redis, "dead")
    await dead.announce()
    await survivor.announce()
    orphaned = set(FLEET) - share(survivor)
    assert orphaned
    died = time.monotonic()

    async def announce_and_check() -> bool:
        await survivor.announce()
        return share(survivor) == set(FLEET)

    while not await announce_and_check():
        assert time.monotonic() - died < 5 * TTL, "the dead replica's share was never taken"
        await asyncio.sleep(TTL / 10)
    assert time.monotonic() - died >= TTL * 0.9, "taken before its announcement ran out"


async def test_a_view_older_than_its_ttl_is_not_trusted(redis: Redis) -> None:
    now = [100.0]
    first = ReplicaRoster(
        redis, "first", ttl=60.0, timeout=1.0, version=__version__, clock=lambda: now[0]
    )
    await roster(redis, "other", ttl=60.0).announce()
    await first.announce()
    assert first.sharing
    assert share(first) != set(FLEET)
    now[0] += 60.0
    assert not first.sharing
    assert share(first) == set(FLEET)


async def test_an_unreachable_redis_means_attempting_every_marquee_logged_once_per_change() -> None:
    client = connect_redis(f"redis://127.0.0.1:{free_port()}/0", socket_timeout=0.5)
    try:
        alone = roster(client, "alone")  # type: ignore[arg-type]
        with capture_logs() as logs:
            for _ in range(3):
                await alone.announce()
        assert share(alone) == set(FLEET)
        assert [entry["event"] for entry in logs] == ["replicas.unreachable"]
    finally:
        await client.aclose()


HOSTILE_MEMBERS: dict[str, tuple[bytes, float | str]] = {
    "not UTF-8": (b"\xff\xfe\x00garbage", 10_000),
    "terminal markup": (b"\x1b[31mred\x1b[0m\r\n", 10_000),
    "a megabyte": (b"x" * 1_000_000, 10_000),
    "announced for ever": (b"squatter", "+inf"),
    "past any replica's ttl": (b"squatter", MAX_SECONDS * 1000 + 3_600_000),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_MEMBERS))
async def test_members_this_project_did_not_write_neither_crash_nor_strand_the_fleet(
    redis: Redis, case: str
) -> None:
    member, expires_in = HOSTILE_MEMBERS[case]
    now_ms = (await redis.time())[0] * 1000
    score = expires_in if isinstance(expires_in, str) else now_ms + expires_in
    await redis.zadd(REPLICAS_KEY, {member: score})
    ours = roster(redis, "ours")
    await ours.announce()
    if case in ("announced for ever", "past any replica's ttl"):
        assert share(ours) == set(FLEET), "a squatter kept a share of the fleet unattempted"
    else:
        assert ours.sharing
        assert member in ours.live


async def test_the_roster_read_is_bounded_whatever_the_set_holds(redis: Redis) -> None:
    now_ms = (await redis.time())[0] * 1000
    fillers = {f"filler-{n}": now_ms + 60_000 for n in range(3 * MAX_REPLICAS)}
    await redis.zadd(REPLICAS_KEY, fillers)
    ours = roster(redis, "ours")
    await ours.announce()
    assert len(ours.live) == MAX_REPLICAS
    # the soonest to expire come first: a live replica's own short announcement makes the cut
    assert ours.sharing
    assert b"ours" in ours.live


async def test_two_engines_tick_disjoint_shares_and_one_takes_all_when_the_other_left(
    redis: Redis,
) -> None:
    marquees = 12
    fleet = {f"m{i}" for i in range(1, marquees + 1)}
    phases = {name: ScriptedPhase("only") for name in ("a", "b")}
    harnesses = {
        name: EngineHarness(redis, phases[name], marquees=marquees, replica_id=name)
        for name in ("a", "b")
    }
    for _ in range(2):
        for harness in harnesses.values():
            await harness.engine.roster.announce()
    for harness in harnesses.values():
        await harness.tick()
    entered = {name: set(phase.entered) for name, phase in phases.items()}
    assert entered["a"]
    assert entered["b"]
    assert entered["a"].isdisjoint(entered["b"]), entered
    assert entered["a"] | entered["b"] == fleet

    await harnesses["b"].engine.roster.leave()
    await harnesses["a"].engine.roster.announce()
    phases["a"].entered.clear()
    await harnesses["a"].tick()
    assert set(phases["a"].entered) == fleet
    assert {r.outcome for h in harnesses.values() for r in h.results} == {Outcome.OK}


async def test_a_running_engine_announces_itself_and_leaves_when_asked_to_stop(
    redis: Redis,
) -> None:
    harness = EngineHarness(redis, ScriptedPhase("only"), replica_id="runner", tick_interval=0.3)
    running = asyncio.create_task(harness.engine.run())
    try:
        await poll(lambda: bool(harness.results), timeout=5, what="a first cycle")
        assert await redis.zscore(REPLICAS_KEY, "runner") is not None
        # announced again before the first announcement expires
        first = await redis.zscore(REPLICAS_KEY, "runner")
        deadline = time.monotonic() + 3.0
        while await redis.zscore(REPLICAS_KEY, "runner") == first:
            assert time.monotonic() < deadline, "the announcement was never renewed"
            await asyncio.sleep(0.02)
    finally:
        harness.engine.request_stop()
        await running
    assert await redis.zscore(REPLICAS_KEY, "runner") is None


async def test_a_tick_reads_the_roster_again_so_a_replica_dead_since_the_last_beat_is_out(
    redis: Redis,
) -> None:
    marquees = 12
    fleet = {f"m{i}" for i in range(1, marquees + 1)}
    phase = ScriptedPhase("only")
    survivor = EngineHarness(redis, phase, marquees=marquees, replica_id="a", tick_interval=1.0)
    dead = ReplicaRoster(redis, "b", ttl=1.0, timeout=1.0, version=__version__)
    await dead.announce()
    died = time.monotonic()  # b announces no more, and does not leave
    await survivor.engine.roster.announce()
    assert survivor.engine.roster.live == (b"a", b"b")
    await asyncio.sleep(max(0.0, died + 0.85 - time.monotonic()))
    await survivor.engine.roster.announce()  # a last beat that still sees b
    assert survivor.engine.roster.live == (b"a", b"b")
    await asyncio.sleep(max(0.0, died + 1.15 - time.monotonic()))
    assert survivor.engine.roster.sharing  # its view is fresh, and names b

    await survivor.tick()
    assert set(phase.entered) == fleet
    assert list(survivor.engine.roster.live) == [b"a"]


async def test_a_share_is_none_alone_and_equal_while_the_live_replicas_are_the_same(
    redis: Redis,
) -> None:
    first, second = roster(redis, "r1", ttl=5.0), roster(redis, "r2", ttl=5.0)
    await first.announce()
    assert first.share is None  # alone: every Marquee is its own, a whole read
    await second.announce()
    await first.announce()
    before = first.share
    await first.announce()
    assert before is not None
    assert first.share == before
    assert {m for m in FLEET if before(m)} == share(first)
    await second.leave()
    await first.announce()
    assert first.share is None
    await second.announce()
    await first.announce()
    assert first.share == before  # the same view again: the same share
    assert Share(b"r2", before.live) != before  # the same view, another replica's share


async def announce_as_before_versions(redis: Redis, replica: str) -> None:
    """What a replica from before versions were published writes: its bare id, no version."""
    seconds, micros = await redis.time()
    await redis.zadd(REPLICAS_KEY, {replica: seconds * 1000 + micros // 1000 + 60_000})


@pytest.mark.parametrize(
    ("others", "mixed"),
    [
        ([], None),
        ([__version__], None),
        (["9.9.9"], f"replicas of versions {__version__} x1, 9.9.9 x1 share the fleet"),
        ([None], f"replicas of versions {__version__} x1, unknown x1 share the fleet"),
        (["bad\x07version"], f"replicas of versions {__version__} x1, unknown x1 share the fleet"),
        (["x" * 65], f"replicas of versions {__version__} x1, unknown x1 share the fleet"),
    ],
)
async def test_replicas_publish_their_version_and_a_fleet_of_several_is_mixed(
    redis: Redis, others: list[str | None], mixed: str | None
) -> None:
    """A replica that does not publish one (from before versions) is of an unknown version: a
    mix. The roster's members stay bare ids, so old replicas hash the same owners."""
    await redis.delete(REPLICAS_KEY, REPLICA_VERSIONS_KEY)
    for index, version in enumerate(others):
        if version is None:
            await announce_as_before_versions(redis, f"other{index}")
        else:
            await ReplicaRoster(redis, f"other{index}", ttl=60.0, timeout=1.0,
                                version=version).announce()  # fmt: skip
    this = roster(redis, "this", ttl=60.0)
    with capture_logs() as logs:
        await this.announce()

    assert this.versions.mixed == mixed
    assert set(await redis.zrange(REPLICAS_KEY, 0, -1)) == {
        b"this",
        *(f"other{index}".encode() for index in range(len(others))),
    }
    live = dict(await live_versions(redis, 1.0))
    assert live["this"] == __version__
    assert mix_of(list(live.values())) == mixed
    warned = [e["why"] for e in logs if e["event"] == "replicas.versions_mixed"]
    assert warned == ([] if mixed is None else [mixed])


async def test_a_replica_that_leaves_or_expires_takes_its_version_with_it(redis: Redis) -> None:
    await redis.delete(REPLICAS_KEY, REPLICA_VERSIONS_KEY)
    leaving, dying = roster(redis, "leaving", ttl=60.0), roster(redis, "dying", ttl=0.05)
    await leaving.announce()
    await dying.announce()
    await leaving.leave()
    await asyncio.sleep(0.1)
    await roster(redis, "stays", ttl=60.0).announce()

    assert await redis.hgetall(REPLICA_VERSIONS_KEY) == {b"stays": __version__.encode()}


async def test_a_versions_key_of_another_type_reads_as_a_mixed_fleet(redis: Redis) -> None:
    """Fails closed: no version this process can trust holds rollouts at their wave."""
    await redis.delete(REPLICAS_KEY, REPLICA_VERSIONS_KEY)
    await redis.rpush(REPLICA_VERSIONS_KEY, "x")
    first, second = roster(redis, "a", ttl=60.0), roster(redis, "b", ttl=60.0)
    await first.announce()
    await second.announce()

    assert second.versions.mixed == "replicas of versions unknown x2 share the fleet"
    assert second.live == (b"a", b"b"), "sharing the fleet as before"
    assert await redis.type(REPLICA_VERSIONS_KEY) == b"list"
    await redis.delete(REPLICA_VERSIONS_KEY)
