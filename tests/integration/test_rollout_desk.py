"""The rollout desk against a real Redis, without hosts: what two replicas' cycles do to one
record when they meet it at once, a wave that times out, and keys this project did not write.
(``test_rollouts.py`` runs the same desk inside real cycles on the lab.)"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import RedisError
from structlog.testing import capture_logs

from playguard_async.coordination.keys import (
    ROLLOUTS_KEY,
    rollout_counts_key,
    rollout_key,
    rollout_marks_key,
)
from playguard_async.coordination.rollouts import rollout_scopes
from playguard_async.desired_state.model import Inventory, Playspec
from playguard_async.desired_state.rollout_policy import admission_key
from playguard_async.phases.release_identity import release_digest
from playguard_async.phases.rollout_desk import RolloutDesk, Standing, Verdict
from playguard_async.phases.rollout_reads import rollouts_standing, unfinished_rollouts
from playguard_async.phases.rollout_record import Rollout
from playguard_lab import RedisServer
from tests.support.daemon import marquee_entry

pytestmark = pytest.mark.integration

NAMES = [f"m{index}" for index in range(6)]
OLD, NEW = "0" * 64, "1" * 64
HEAD = "c" * 40
CLOSED = [{"kind": "allow", "cron": "0 0 1 1 *", "duration": 60, "timezone": "UTC"}]
"""A window that opens one minute a year: outside it nearly always."""


def inventory(
    *, bake: float = 0, wave_timeout: float = 900, closed: str | None = None, max_failures: int = 5
) -> Inventory:
    marquees: list[dict[str, Any]] = [marquee_entry(name) for name in NAMES]
    for entry in marquees:
        if entry["name"] == closed:
            entry["windows"] = CLOSED
    return Inventory.model_validate({
        "marquees": marquees,
        "playspecs": [{"name": "web", "repo": "https://git.example/web.git",
                       "rollout": {"waves": [1, "50%", "100%"], "bake": bake,
                                   "max_failures": max_failures,
                                   "wave_timeout": wave_timeout}}],
        "playgrounds": [{"name": f"web-{name}", "playspec": "web", "marquee": name,
                         "branch": "main"} for name in NAMES],
    })  # fmt: skip


def key_of(name: str) -> str:
    return admission_key("web@main", name, canary=False)


def desk(redis: Redis, world: Inventory, name: str) -> RolloutDesk:
    return RolloutDesk(redis, 2.0, world, world.marquee(name), dry_run=False)


async def verdict(
    redis: Redis,
    world: Inventory,
    name: str,
    *,
    at: str = OLD,
    kept: Rollout | None = None,
    release: str = NEW,
    has_previous: bool = False,
) -> Verdict:
    playground = world.playgrounds_on(name)[0]
    policy = world.playspec_of(playground).rollout
    assert policy is not None
    standing = Standing(has_good=True, good_release=at, has_previous=has_previous,
                        rolls_back=True, kept=kept)  # fmt: skip
    return await desk(redis, world, name).verdict(playground, policy, release, HEAD, standing)


async def stored(redis: Redis) -> Rollout:
    raw = await redis.get(rollout_key("web@main"))
    assert raw is not None
    record = Rollout.parse("web@main", raw)
    assert record is not None
    return record


async def test_replicas_meeting_a_release_at_once_open_one_rollout_and_each_wave_once(
    redis: Redis,
) -> None:
    world = inventory()
    await redis.delete(rollout_key("web@main"), rollout_marks_key("web@main"))
    first = await asyncio.gather(*(verdict(redis, world, name) for name in NAMES))

    assert len({v.rollout.id for v in first if v.rollout is not None}) == 1
    assert sum(v.admitted for v in first) == 1  # the first wave: one Marquee
    for _ in range(4):  # every Marquee reports from both replicas at once, again and again
        verdicts = await asyncio.gather(*(verdict(redis, world, name) for name in NAMES * 2))
        await asyncio.gather(*(
            desk(redis, world, name).tell(v, healthy=True, why="")
            for name, v in zip(NAMES * 2, verdicts, strict=True) if v.admitted
        ))  # fmt: skip

    record = await stored(redis)
    assert record.status == "done"
    assert [event.what for event in record.events] == [
        "opened",
        "wave 2 started",
        "wave 3 started",
        "done",
    ]
    counts = await redis.hgetall(rollout_counts_key("web@main"))
    assert {int(wave): int(count) for wave, count in counts.items()} == {0: 1, 1: 2, 2: 3}


async def test_a_rollout_not_done_stands_with_its_waves_verified_healthy_counts(
    redis: Redis,
) -> None:
    """What the web view draws as a rollout's progress: the record and the counts beside it."""
    world = inventory(bake=3600)
    await redis.delete(*(key("web@main") for key in (rollout_key, rollout_marks_key)))
    await redis.delete(rollout_counts_key("web@main"))
    first = await asyncio.gather(*(verdict(redis, world, name) for name in NAMES))
    [(admitted, told)] = [(n, v) for n, v in zip(NAMES, first, strict=True) if v.admitted]
    [standing] = await rollouts_standing(redis, 2.0)
    assert (standing.rollout.status, standing.rollout.wave, standing.verified) == ("running", 0, 0)
    await desk(redis, world, admitted).tell(told, healthy=True, why="")
    [standing] = await rollouts_standing(redis, 2.0)
    assert standing.healthy == {0: 1}
    assert (standing.rollout.wave, standing.verified) == (0, 1), "baking: still wave 1"
    assert [s.rollout for s in await rollouts_standing(redis, 2.0)] == await unfinished_rollouts(
        redis, 2.0
    )


async def aged(redis: Redis, seconds: float) -> None:
    """The stored record as if its current wave had started ``seconds`` earlier."""
    record = await stored(redis)
    await redis.set(
        rollout_key("web@main"), replace(record, started=record.started - seconds).encode()
    )


async def test_a_timed_out_wave_fails_its_silent_marquees_but_not_one_outside_its_windows(
    redis: Redis,
) -> None:
    await redis.delete(rollout_key("web@main"), rollout_marks_key("web@main"))
    world = inventory(wave_timeout=100)
    opened = await verdict(redis, world, NAMES[0])
    assert opened.rollout is not None
    [first] = [name for name in NAMES if opened.rollout.wave_of(key_of(name)) == 0]
    world = inventory(wave_timeout=100, closed=first)
    await aged(redis, 150)  # past one wave_timeout, not two
    await verdict(redis, world, NAMES[1])

    assert (await stored(redis)).failures == ()  # the silent one is outside its windows
    await verdict(redis, inventory(wave_timeout=100), NAMES[1])
    record = await stored(redis)
    assert [failure.marquee for failure in record.failures] == [first]
    assert "wave_timeout" in record.failures[0].why


async def test_a_marquee_of_a_past_wave_marks_nothing_while_the_current_wave_marks_again(
    redis: Redis,
) -> None:
    """Once the rollout is past a Marquee's wave its healthy reports leave the marks alone (a
    past wave's count is never read again); a Marquee of the current wave still marks itself,
    so a mark Redis lost is put back."""
    world = inventory(bake=3600)
    marks = rollout_marks_key("web@main")
    await redis.delete(rollout_key("web@main"), marks, rollout_counts_key("web@main"))
    opened = await verdict(redis, world, NAMES[0])
    assert opened.rollout is not None
    waves = {name: opened.rollout.wave_of(key_of(name)) for name in NAMES}
    [canary] = [name for name in NAMES if waves[name] == 0]
    second = [name for name in NAMES if waves[name] == 1]
    told = await desk(redis, world, canary).tell(
        await verdict(redis, world, canary), healthy=True, why=""
    )
    assert told is not None
    promoted = told.rollout.by_operator("promote", "op", "test", told.rollout.healthy_at or 0)
    await redis.set(rollout_key("web@main"), promoted.encode())
    await redis.delete(marks)  # Redis lost the marks

    for name in [canary, *second]:
        current = await verdict(redis, world, name)
        assert current.admitted
        await desk(redis, world, name).tell(current, healthy=True, why="")

    assert await redis.smembers(marks) == {name.encode() for name in second}
    assert (await stored(redis)).wave == 1


@pytest.mark.parametrize(
    "foreign",
    [("hset", "a", "b"), ("rpush", "x"), ("sadd", "x"), ("zadd", {"x": 1})],
)
async def test_a_record_key_of_another_type_holds_every_marquee_and_is_left_alone(
    redis: Redis, foreign: tuple[Any, ...]
) -> None:
    """Fails closed: no record this process can trust is no admission, one line names the key."""
    world = inventory()
    key = rollout_key("web@main")
    await getattr(redis, foreign[0])(key, *foreign[1:])

    with capture_logs() as logs:
        verdicts = [await verdict(redis, world, name) for name in NAMES]

    assert not any(v.admitted for v in verdicts)
    assert all(key in v.why for v in verdicts)
    assert await redis.type(key) == {"hset": b"hash", "rpush": b"list", "sadd": b"set",
                                     "zadd": b"zset"}[foreign[0]]  # fmt: skip
    unreadable = [e for e in logs if e["event"] == "rollout.unreadable"]
    assert unreadable
    assert all(e["key"] == key for e in unreadable)


async def answering(redis: Redis) -> None:
    """Once the restarted server answers (the pool's connections to the old one are gone)."""
    for _ in range(50):
        try:
            await redis.ping()
            return
        except RedisError:
            await asyncio.sleep(0.1)
    raise AssertionError("Redis did not answer after its restart")


LOSSES = ["flushall", "restart", "last write lost"]
"""How Redis forgets: every key, every key with the server, or only the write that decided."""


async def decided(redis: Redis, world: Inventory, decision: str) -> tuple[Rollout, Rollout]:
    """A rollout of NEW opened, its canary verified healthy and baking, then ``decision`` taken
    (``halted``: the canary failed past the budget; ``aborted``, ``paused`` by an operator;
    ``running``: none): the record before the decision and the one after it."""
    opened = await verdict(redis, world, NAMES[0])
    assert opened.rollout is not None
    [canary] = [n for n in NAMES if opened.rollout.wave_of(key_of(n)) == 0]
    told = await desk(redis, world, canary).tell(await verdict(redis, world, canary), True, "")
    assert told is not None
    before = await stored(redis)
    if decision == "running":
        return before, before
    if decision == "halted":
        after = before.with_failure(canary, 0, "broke", before.opened)
        assert after is not None
        after = replace(after, status="halted")
    else:
        action = {"aborted": "abort", "paused": "pause"}[decision]
        after = before.by_operator(action, "op", "test", before.opened)
    after = after.stored_over(before)
    await redis.set(rollout_key("web@main"), after.encode())
    return before, after


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("decision", ["halted", "aborted", "paused", "running"])
async def test_a_decision_redis_forgot_is_rebuilt_from_its_copy_and_admits_no_one_more(
    redis: Redis,
    live_redis_server: RedisServer,
    decision: str,
    loss: str,
) -> None:
    world = inventory(bake=3600)
    before, kept = await decided(redis, world, decision)
    admitted = {n for n in NAMES if kept.admits(key_of(n), at_target=False)}
    if loss == "flushall":
        await redis.flushall()
    elif loss == "restart":
        live_redis_server.kill()
        live_redis_server.restart()
        await answering(redis)
    else:
        await redis.set(rollout_key("web@main"), before.encode())
    if loss != "last write lost" or decision != "running":
        assert (await redis.get(rollout_key("web@main"))) != kept.encode()

    with capture_logs() as logs:
        verdicts = await asyncio.gather(*(verdict(redis, world, n, kept=kept) for n in NAMES * 2))

    record = await stored(redis)
    if kept == before and loss == "last write lost":
        assert record == kept  # nothing was lost: nothing rebuilt
        return
    assert (record.id, record.status, record.wave, record.failed_count) == (
        kept.id, kept.status, kept.wave, kept.failed_count)  # fmt: skip
    assert record.seq == kept.seq + 1
    assert record.events[-1].what == "rebuilt"
    assert {n for n, v in zip(NAMES * 2, verdicts, strict=True) if v.admitted} == admitted
    rebuilt = [e for e in logs if e["event"] == "decisions.rebuilt"]
    assert len(rebuilt) == 1, "one replica writes it back, one line says so"
    assert (rebuilt[0]["kind"], rebuilt[0]["scope"], rebuilt[0]["status"]) == (
        "rollout", "web@main", kept.status)  # fmt: skip
    assert await redis.sismember(ROLLOUTS_KEY, "web@main")


FIX = "2" * 64
"""A release that opens after NEW was aborted."""


@pytest.mark.parametrize("has_previous", [True, False])
@pytest.mark.parametrize("now", ["the aborted one", "a fix's", "a fix's, rebuilt after FLUSHALL"])
async def test_a_marquee_on_an_aborted_release_is_taken_back_whatever_rollout_is_the_scopes(
    redis: Redis, now: str, has_previous: bool
) -> None:
    """Back at the revision before the aborted release (``back``), or stopped when it has none
    (``stop``), unless the scope's rollout now admits it to a release that is not aborted; a
    Marquee that never ran the aborted release is only held."""
    world = inventory(bake=3600)
    await decided(redis, world, "aborted")
    release = NEW
    if now != "the aborted one":
        release = FIX
        await verdict(redis, world, NAMES[0], at=NEW, release=FIX)  # opens the fix's rollout
    record = await stored(redis)
    if now.endswith("FLUSHALL"):
        await redis.flushall()

    ran = {
        name: await verdict(redis, world, name, at=NEW, release=release, kept=record,
                            has_previous=has_previous)
        for name in NAMES
    }  # fmt: skip
    never = await verdict(redis, world, NAMES[1], at=OLD, release=release, kept=record)

    stands = await stored(redis)
    assert (stands.id, stands.target, stands.status) == (record.id, record.target, record.status)
    assert NEW in stands.aborted
    assert FIX not in stands.aborted
    for name, seen in ran.items():
        admitted = release == FIX and stands.wave_of(key_of(name)) == 0
        assert (seen.admitted, seen.back, seen.stop) == (
            admitted,
            not admitted and has_previous,
            not admitted and not has_previous,
        ), name
        if not admitted:
            assert f"release {NEW[:12]} was aborted" in seen.why
    assert (never.back, never.stop) == (False, False)


async def test_a_copy_older_than_redis_is_not_written_back(redis: Redis) -> None:
    world = inventory(bake=3600)
    before, after = await decided(redis, world, "aborted")

    await asyncio.gather(*(verdict(redis, world, n, kept=before) for n in NAMES))

    assert await stored(redis) == after


async def test_the_index_of_rollouts_reads_only_scopes_and_a_foreign_type_as_none(
    redis: Redis,
) -> None:
    await redis.delete(ROLLOUTS_KEY)
    hostile = ["x" * 100_000, "<script>@main", "web@", "@main", "web@main\n", "web@ma in"]
    await redis.sadd(ROLLOUTS_KEY, "web@main", "api@feature/x", *hostile)
    assert await rollout_scopes(redis, 2.0) == ["api@feature/x", "web@main"]
    assert await unfinished_rollouts(redis, 2.0) == []  # listed, but no record: nothing shown

    await redis.delete(ROLLOUTS_KEY)
    await redis.hset(ROLLOUTS_KEY, "a", "b")
    assert await rollout_scopes(redis, 2.0) == []
    assert await redis.type(ROLLOUTS_KEY) == b"hash"  # left as found


async def canary_verified(redis: Redis, world: Inventory) -> dict[str, int]:
    """A rollout opened afresh with its one canary verified healthy (bake 0: wave 2 runs);
    each Marquee's wave."""
    scope = "web@main"
    await redis.delete(rollout_key(scope), rollout_marks_key(scope), rollout_counts_key(scope))
    opened = await verdict(redis, world, NAMES[0])
    assert opened.rollout is not None
    waves = {name: opened.rollout.wave_of(key_of(name)) for name in NAMES}
    [canary] = [name for name in NAMES if waves[name] == 0]
    await desk(redis, world, canary).tell(await verdict(redis, world, canary), True, "")
    return waves


@pytest.mark.parametrize("healthy_first", [True, False])
async def test_a_wave_completes_only_when_each_of_its_marquees_reported_each_counted_once(
    redis: Redis, healthy_first: bool
) -> None:
    """A Marquee verified healthy that then fails (or the other way round) is one of its wave,
    not two: the wave waits for the one that never reported."""
    world = inventory()
    waves = await canary_verified(redis, world)
    reporter, silent = [name for name in NAMES if waves[name] == 1]
    admitted = await verdict(redis, world, reporter)
    for healthy in (healthy_first, not healthy_first):
        await desk(redis, world, reporter).tell(admitted, healthy, "unhealthy: web")
    await verdict(redis, world, silent)

    record = await stored(redis)
    assert (record.wave, record.status, record.healthy_at) == (1, "running", None)
    assert [failure.marquee for failure in record.failures] == [reporter]
    await desk(redis, world, silent).tell(await verdict(redis, world, silent), True, "")
    assert (await stored(redis)).wave == 2


def without(world: Inventory, gone: str) -> Inventory:
    data = world.model_dump(mode="json")
    data["playgrounds"] = [entry for entry in data["playgrounds"] if entry["marquee"] != gone]
    return Inventory.model_validate(data)


@pytest.mark.parametrize("leaves", ["canary", "wave 2's silent one"])
async def test_a_marquee_that_leaves_the_cohort_leaves_its_wave(redis: Redis, leaves: str) -> None:
    """Wave sizes follow the cohort: the rollout goes on without the one that left, rather
    than wait for a report that never comes."""
    world = inventory()
    scope = "web@main"
    await redis.delete(rollout_key(scope), rollout_marks_key(scope), rollout_counts_key(scope))
    opened = await verdict(redis, world, NAMES[0])
    assert opened.rollout is not None
    waves = {name: opened.rollout.wave_of(key_of(name)) for name in NAMES}
    [canary] = [name for name in NAMES if waves[name] == 0]
    reporter, silent = [name for name in NAMES if waves[name] == 1]
    if leaves == "canary":
        smaller = without(world, canary)
        await verdict(redis, smaller, reporter)
        assert (await stored(redis)).wave == 1
        return
    await desk(redis, world, canary).tell(await verdict(redis, world, canary), True, "")
    await desk(redis, world, reporter).tell(await verdict(redis, world, reporter), True, "")
    assert (await stored(redis)).wave == 1, "waits for the silent one while it is in the cohort"
    await verdict(redis, without(world, silent), reporter)
    record = await stored(redis)
    assert (record.wave, record.failures) == (2, ())


async def test_a_wave_stalled_past_twice_its_timeout_halts_naming_whom_it_waited_for(
    redis: Redis,
) -> None:
    """A canary outside its maintenance window is never counted failed; the wave waiting on it
    halts with a reason rather than stall in silence."""
    scope = "web@main"
    await redis.delete(rollout_key(scope), rollout_marks_key(scope), rollout_counts_key(scope))
    opened = await verdict(redis, inventory(wave_timeout=100), NAMES[0])
    assert opened.rollout is not None
    [canary] = [name for name in NAMES if opened.rollout.wave_of(key_of(name)) == 0]
    world = inventory(wave_timeout=100, closed=canary)
    other = next(name for name in NAMES if name != canary)
    await aged(redis, 150)
    await verdict(redis, world, other)
    assert (await stored(redis)).status == "running", "one timeout: pending, not halted"

    await aged(redis, 60)  # past two
    with capture_logs() as logs:
        held = await verdict(redis, world, other)
    record = await stored(redis)
    assert (record.status, record.failures) == ("halted", ())
    assert "wave 1 stalled" in record.why
    assert canary in record.why
    assert not held.admitted
    assert [(e["event"], e["status"]) for e in logs if e["event"] == "rollout.step"] == [
        ("rollout.step", "halted")
    ]


MIXED = "replicas of versions 0.1.0 x1, unknown x1 share the fleet"


@pytest.mark.parametrize("step", ["opening", "next wave"])
async def test_while_replicas_of_different_versions_share_the_fleet_no_wave_starts(
    redis: Redis, step: str
) -> None:
    """Neither the first wave of a new release nor the next of one running; held Marquees
    say why, and the rollout goes on once the versions agree."""
    world = inventory()
    scope = "web@main"
    await redis.delete(rollout_key(scope), rollout_marks_key(scope), rollout_counts_key(scope))
    playground = world.playgrounds_on(NAMES[0])[0]
    policy = world.playspec_of(playground).rollout
    assert policy is not None
    standing = Standing(has_good=True, good_release=OLD, has_previous=False, rolls_back=True)
    mixed = replace(desk(redis, world, NAMES[0]), versions_mixed=MIXED)
    if step == "opening":
        held = await mixed.verdict(playground, policy, NEW, HEAD, standing)
        assert await redis.get(rollout_key(scope)) is None
    else:
        opened = await verdict(redis, world, NAMES[0])  # opened while the versions agreed
        assert opened.rollout is not None
        waves = {name: opened.rollout.wave_of(key_of(name)) for name in NAMES}
        [canary] = [name for name in NAMES if waves[name] == 0]
        canary_desk = replace(desk(redis, world, canary), versions_mixed=MIXED)
        canary_play = world.playgrounds_on(canary)[0]
        told = await canary_desk.verdict(canary_play, policy, NEW, HEAD, standing)
        await canary_desk.tell(told, True, "")
        later = next(name for name in NAMES if waves[name] == 1)
        later_desk = replace(desk(redis, world, later), versions_mixed=MIXED)
        held = await later_desk.verdict(world.playgrounds_on(later)[0], policy, NEW, HEAD, standing)
        record = await stored(redis)
        assert (record.wave, record.status) == (0, "running")
        assert record.healthy_at is not None, "the wave is complete; only the next waits"
    assert not held.admitted
    assert f"no new wave while {MIXED}" in held.why

    await verdict(redis, world, NAMES[0])  # the versions agree again
    record = await stored(redis)
    assert (record.status, record.wave) == ("running", 0 if step == "opening" else 1)


class NewerPlayspec(Playspec):
    """The Playspec as a newer version of playguard models it: a field more, at its default."""

    notes: str = ""


IMAGES = {"registry.example/web:1": "sha256:" + "a" * 64}
"""The registry's answer both replicas read (reference -> digest)."""


async def cycled(
    redis: Redis, world: Inventory, views: dict[str, str], good: dict[str, str]
) -> set[str]:
    """One tick: each Marquee's cycle meets the release its ``views`` names, from its last good
    release in ``good`` (moved when admitted and verified healthy); the ids of the rollouts the
    verdicts named."""
    ids: set[str] = set()
    for name in NAMES:
        playground = world.playgrounds_on(name)[0]
        policy = world.playspec_of(playground).rollout
        assert policy is not None
        standing = Standing(has_good=True, good_release=good[name], has_previous=True,
                            rolls_back=True)  # fmt: skip
        seen = await desk(redis, world, name).verdict(
            playground, policy, views[name], HEAD, standing
        )
        assert seen.rollout is not None
        ids.add(seen.rollout.id)
        if seen.admitted and seen.release == seen.rollout.target:
            await desk(redis, world, name).tell(seen, healthy=True, why="")
            good[name] = views[name]
    return ids


async def test_replicas_of_two_code_versions_name_one_release_and_its_rollout_passes_wave_1(
    redis: Redis,
) -> None:
    """One replica's model of the Playspec has a field the other's lacks (at its default); both
    name the release from what reaches the host (commit, compose file, image digests), so the
    Marquees each cycles, alternately, meet one rollout, which goes wave by wave to done."""
    world = inventory()
    await redis.delete(*(key("web@main") for key in (rollout_key, rollout_marks_key)))
    await redis.delete(rollout_counts_key("web@main"))
    defined = {**world.playspecs[0].model_dump(), "images": list(IMAGES)}
    named = {model: release_digest(model.model_validate(defined), HEAD, IMAGES)
             for model in (Playspec, NewerPlayspec)}  # fmt: skip
    good = dict.fromkeys(NAMES, OLD)
    ids: set[str] = set()
    for tick in range(6):
        views = {
            name: named[(Playspec, NewerPlayspec)[(tick + index) % 2]]
            for index, name in enumerate(NAMES)
        }
        ids |= await cycled(redis, world, views, good)

    record = await stored(redis)
    assert len(set(named.values())) == 1
    assert len(ids) == 1
    assert (record.status, record.target) == ("done", named[Playspec])
    assert [event.what for event in record.events] == [
        "opened", "wave 2 started", "wave 3 started", "done"]  # fmt: skip
    assert set(good.values()) == {named[Playspec]}


async def test_a_view_that_lags_opens_no_rollout_of_a_release_the_scope_moved_past(
    redis: Redis,
) -> None:
    """The scope's rollout of NEW replaced OLD's. Marquees whose host still sees OLD (its
    ``ls-remote`` behind) for a few ticks send it back to wave 1 no more: one at NEW is held
    there (saying why), one at OLD stays at OLD, and the rollout of NEW, its id unchanged, goes
    to done once their views catch up."""
    world = inventory()
    await redis.delete(*(key("web@main") for key in (rollout_key, rollout_marks_key)))
    await redis.delete(rollout_counts_key("web@main"))
    await verdict(redis, world, NAMES[0], at=FIX, release=OLD)  # OLD's rollout, replaced next
    good = dict.fromkeys(NAMES, OLD)
    [opened] = await cycled(redis, world, dict.fromkeys(NAMES, NEW), good)
    record = await stored(redis)
    assert OLD in record.superseded_before
    assert (record.id, record.status) == (opened, "running")
    canaries = [name for name in NAMES if good[name] == NEW]
    assert canaries, "wave 1 took NEW"
    lagging = {*canaries, next(name for name in NAMES if good[name] == OLD)}

    for _ in range(3):
        views = {name: OLD if name in lagging else NEW for name in NAMES}
        assert await cycled(redis, world, views, good) == {opened}
        held = await desk(redis, world, canaries[0]).verdict(
            world.playgrounds_on(canaries[0])[0], record.policy, OLD, HEAD,
            Standing(has_good=True, good_release=NEW, has_previous=True, rolls_back=True),
        )  # fmt: skip
        assert not held.admitted
        assert f"release {OLD[:12]} is older than its release {NEW[:12]}" in held.why
        assert {good[name] for name in canaries} == {NEW}
    for _ in range(4):
        assert await cycled(redis, world, dict.fromkeys(NAMES, NEW), good) == {opened}

    record = await stored(redis)
    assert (record.id, record.status, record.target) == (opened, "done", NEW)
    assert set(good.values()) == {NEW}


@pytest.mark.parametrize("decision", ["running", "paused", "halted", "aborted"])
async def test_a_view_that_lags_behind_a_decided_rollout_leaves_the_decision_standing(
    redis: Redis, decision: str
) -> None:
    """Whatever the status of the rollout that replaced OLD's, a Marquee on its release whose
    view names OLD opens nothing and changes nothing in the record: held where it is, or, when
    that release was aborted, taken back to the revision before it."""
    world = inventory(bake=3600)
    await verdict(redis, world, NAMES[0], at=FIX, release=OLD)  # OLD's rollout, replaced next
    _, after = await decided(redis, world, decision)
    assert OLD in after.superseded_before

    lagging = {
        name: await verdict(redis, world, name, at=NEW, release=OLD, has_previous=True)
        for name in NAMES
    }

    assert await stored(redis) == after
    for seen in lagging.values():
        assert (seen.admitted, seen.back, seen.stop) == (False, decision == "aborted", False)
        reason = "was aborted" if decision == "aborted" else "this view of the branch or registry"
        assert reason in seen.why
