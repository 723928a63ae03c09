"""Keys of another Redis type than playguard writes there, against the lab's real Redis: each is
reported for its own Marquee only, by every reader (the web view's fleet picture, ``status``,
``describe``), never written over by one, and a cycle of that Marquee still ends with a
classified outcome.

Table-driven: every key a Marquee's readers read, times string-garbage, hash, list, set, zset
and stream (a key's own type holds garbage content; every other type is foreign to it)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis
from structlog.testing import capture_logs

from playguard_async.coordination.keys import (
    FLEET_PAUSE_KEY,
    RESUME_KEY,
    cycle_history_key,
    fence_key,
    health_key,
    last_cycle_key,
    marquee_lock_key,
    marquee_lock_name,
    pause_key,
)
from playguard_async.coordination.lock import LockHeld, LockLost, ReleaseResult, TokenLock
from playguard_async.coordination.marquee_reads import read_status, read_story
from playguard_async.coordination.pause import FLEET, FleetPauseWatch, lift_pause
from playguard_async.coordination.records import CycleRecords
from playguard_async.desired_state.yaml_source import YamlInventorySource
from playguard_async.engine.cycle import Cycle
from playguard_async.engine.results import Outcome
from playguard_async.engine.scheduler import Engine
from playguard_async.engine.services import CycleServices
from playguard_async.service.notifications import ChangeNotifier
from playguard_async.web.fleet_picture import FleetPicture, Listed
from playguard_async.web.fleet_table import Row
from tests.support.cli import EXIT_LOCKED, Playguard
from tests.support.daemon import marquee_entry
from tests.support.engine import ScriptedPhase, inventory_of, settings_for
from tests.support.topologies import TopologyUnderTest

pytestmark = pytest.mark.integration

Plant = Callable[[SyncRedis, str], Any]

KINDS: dict[str, Plant] = {
    "string": lambda store, key: store.set(key, b"\xff\x00 [/x] not ours"),
    "hash": lambda store, key: store.hset(key, "a", "b"),
    "list": lambda store, key: store.rpush(key, b"\xff not a record", b"[1, 2]"),
    "set": lambda store, key: store.sadd(key, "a"),
    "zset": lambda store, key: store.zadd(key, {"a": 1.0}),
    "stream": lambda store, key: store.xadd(key, {"a": "b"}),
}
"""A value of each Redis type, planted with redis-cli's means."""

KEYS: dict[str, tuple[str, Callable[[str], str], str]] = {
    "lock": ("lock key", marquee_lock_key, "string"),
    "fence": ("fence counter", lambda name: fence_key(marquee_lock_name(name)), "string"),
    "pause": ("pause key", pause_key, "string"),
    "last": ("last-cycle key", last_cycle_key, "string"),
    "history": ("history key", cycle_history_key, "list"),
}
"""Each key a Marquee's readers read: what the report calls it, its name, the type playguard
writes there."""

CASES = [(key, kind) for key in KEYS for kind in KINDS]

ON_THE_ROW = ("lock", "fence", "pause", "last")
"""The keys a Marquee's row (``status``, the fleet page) reads; its page and ``describe`` read
the history too."""


def case_id(case: tuple[str, str]) -> str:
    return f"{case[0]}-{case[1]}"


def foreign(key: str, kind: str) -> bool:
    return KEYS[key][2] != kind


def report(key: str, kind: str, marquee: str) -> str:
    what, name_of, _ = KEYS[key]
    return f"{what} {name_of(marquee)} holds a {kind}"


def dumped(store: SyncRedis, key: str) -> tuple[bytes | None, str]:
    """The key's exact value and type, to prove that nothing wrote over it."""
    raw = store.dump(key)
    assert raw is None or isinstance(raw, bytes)
    kind = store.type(key)
    return raw, kind.decode() if isinstance(kind, bytes) else str(kind)


def record_of(cycle: str) -> dict[str, Any]:
    return {"cycle": cycle, "outcome": "ok", "finished_at": 1.0, "duration": 1.0}


# -- the readers -------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=case_id)
async def test_a_foreign_key_is_its_marquees_report_and_the_fleet_picture_stays_fresh(
    redis: Redis, store: SyncRedis, case: tuple[str, str]
) -> None:
    key, kind = case
    records = CycleRecords(redis, history_length=5, timeout=1.0)
    names = ["m0", "m1", "m2"]
    for name in names:
        await records.record(name, record_of(f"cycle-{name}"))
    planted = KEYS[key][1]("m1")
    store.delete(planted)
    KINDS[kind](store, planted)
    before = dumped(store, planted)
    picture = FleetPicture(
        records,
        lambda: [Listed(name) for name in names],
        interval=3600.0,
        publish_interval=0.0,
        tell_story=lambda name: read_story(records, name, limit=5),
    )

    with capture_logs() as logs:
        await picture._read([Listed(name) for name in names])
        await picture._read([Listed(name) for name in names])  # the second read says nothing new
        story = await picture.story("m1")

    assert picture.error is None, "no banner: Redis answered"
    assert set(picture.statuses) == set(names)
    for name in ("m0", "m2"):
        other = picture.statuses[name]
        assert other.unreadable == (), name
        assert other.last is not None, name
        assert other.last.cycle == f"cycle-{name}", name
        assert (other.pause, other.lock) == (None, None), name
    m1 = picture.statuses["m1"]
    noted = [line for line in logs if line["event"] == "web.unreadable"]
    if foreign(key, kind):
        expected = report(key, kind, "m1")
        assert [line.split(" (")[0] for line in story.unreadable] == [expected]
    if foreign(key, kind) and key in ON_THE_ROW:
        assert [line.split(" (")[0] for line in m1.unreadable] == [expected]
        assert (Row.of(m1, 0.0).unreadable or "").startswith(expected)
        assert [line["marquee"] for line in noted] == ["m1"], "one line, at its first read"
    else:
        assert m1.unreadable == ()
        assert noted == []
    if key == "pause":  # a value of any type there is someone's pause
        assert m1.pause is not None
        assert not m1.pause.known
    if key == "lock":  # and there, someone's lock
        assert m1.lock is not None
        assert m1.lock.holder is None
    assert dumped(store, planted) == before, "no reader writes over it"


async def test_a_foreign_fleet_pause_key_pauses_every_marquee_and_fails_none(
    redis: Redis, store: SyncRedis
) -> None:
    records = CycleRecords(redis, history_length=5, timeout=1.0)
    store.hset(FLEET_PAUSE_KEY, "a", "b")
    picture = FleetPicture(
        records,
        lambda: [Listed("m0"), Listed("m1")],
        interval=3600.0,
        publish_interval=0.0,
        tell_story=lambda name: read_story(records, name, limit=5),
    )
    await picture._read([Listed("m0"), Listed("m1")])
    assert picture.error is None
    for status in picture.statuses.values():
        assert status.pause is not None
        assert status.pause.scope == FLEET
        assert status.pause.describe() == (
            f"fleet paused: fleet pause key {FLEET_PAUSE_KEY} holds a hash"
        )
    watch = FleetPauseWatch(redis, every=0.0, timeout=1.0)  # what a cycle reads
    fleet_pause = await watch.settled(watch.refresh())
    assert fleet_pause is not None
    assert fleet_pause.describe() == (
        f"fleet paused: fleet pause key {FLEET_PAUSE_KEY} holds a value of another type than a "
        "string"
    )
    lifted = await lift_pause(redis, FLEET, 1.0)
    assert lifted is not None
    assert lifted.foreign is not None
    assert store.exists(FLEET_PAUSE_KEY) == 0, "resume --all lifts it"


# -- the operator's commands -------------------------------------------------------------------


def test_status_and_describe_report_each_foreign_key_on_its_own_marquee(
    playguard: Playguard, store: SyncRedis
) -> None:
    """Every case at once, one Marquee each, beside a Marquee with nothing planted."""
    names = {case: f"m{index}" for index, case in enumerate(CASES)}
    clean = "clean"
    playguard.configure({"marquees": [marquee_entry(name) for name in [clean, *names.values()]]})
    for (key, kind), name in names.items():
        KINDS[kind](store, KEYS[key][1](name))
    before = {name: dumped(store, KEYS[key][1](name)) for (key, _), name in names.items()}

    shown = playguard("status", "--json")
    assert shown.returncode == 0, shown.stderr
    assert "Traceback" not in shown.stdout + shown.stderr
    marquees = {m["name"]: m for m in json.loads(shown.stdout)["marquees"]}
    assert marquees[clean]["unreadable"] == []
    assert marquees[clean]["paused"] is None
    for (key, kind), name in names.items():
        unreadable = marquees[name]["unreadable"]
        if foreign(key, kind) and key in ON_THE_ROW:
            assert len(unreadable) == 1
            assert unreadable[0].startswith(report(key, kind, name))
        else:
            assert unreadable == [], name

    table = playguard("status")
    assert table.returncode == 0, table.stderr
    assert "Traceback" not in table.stdout + table.stderr
    lines = {line.split()[0]: line for line in table.stdout.splitlines()[1:] if line.strip()}
    assert "unreadable" not in lines[clean]
    for (key, kind), name in names.items():
        if foreign(key, kind) and key in ON_THE_ROW:
            assert f"unreadable: {report(key, kind, name)}" in lines[name], lines[name]

    for key, kind in (("pause", "hash"), ("history", "zset"), ("last", "stream")):
        told = playguard("describe", names[key, kind])
        assert told.returncode == 0, told.stderr
        assert f"unreadable: {report(key, kind, names[key, kind])}" in told.stdout
    described = json.loads(playguard("describe", names["fence", "set"], "--json").stdout)
    assert described["unreadable"] == [report("fence", "set", names["fence", "set"])]

    after = {name: dumped(store, KEYS[key][1](name)) for (key, _), name in names.items()}
    assert after == before, "no reader writes over a key"


def test_unlock_force_leaves_a_lock_key_of_another_type_and_says_so(
    playguard: Playguard, store: SyncRedis
) -> None:
    playguard.configure({"marquees": [marquee_entry("m1")]})
    store.sadd(marquee_lock_key("m1"), "a")
    done = playguard("unlock", "m1", "--force")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.count("\n") == 1, done.stdout
    assert f"lock key {marquee_lock_key('m1')} holds a set" in done.stdout
    assert store.type(marquee_lock_key("m1")) == b"set"
    locked = playguard("cycle", "m1")
    assert locked.returncode == EXIT_LOCKED, locked.stdout + locked.stderr
    assert "holds a set" in locked.stderr


# -- a cycle -----------------------------------------------------------------------------------

EXPECTED_OUTCOME = {
    "lock": Outcome.LOCKED,
    "fence": Outcome.OK,
    "pause": Outcome.PAUSED,
    "last": Outcome.OK,
    "history": Outcome.OK,
}


@pytest.mark.parametrize("case", [case for case in CASES if foreign(*case)], ids=case_id)
async def test_a_cycle_of_a_marquee_with_a_foreign_key_ends_with_a_classified_outcome(
    redis: Redis, store: SyncRedis, case: tuple[str, str]
) -> None:
    key, kind = case
    planted = KEYS[key][1]("m1")
    KINDS[kind](store, planted)
    records = CycleRecords(redis, history_length=5, timeout=1.0)
    phase = ScriptedPhase("first")
    services = CycleServices.build(settings_for(), redis, [phase], records=records)
    engine = Engine(services, YamlInventorySource(Path("/nonexistent")))
    inventory = inventory_of("m1")
    with capture_logs() as logs:
        result = await Cycle(engine.services, inventory.marquee("m1"), inventory).run()
    assert result.outcome is EXPECTED_OUTCOME[key], (result.outcome, result.reason)
    assert not [line for line in logs if line.get("log_level") in ("error", "critical")]
    if key == "pause":
        assert result.reason == f"paused: {report(key, kind, 'm1')}"
        assert phase.entered == []
    if key in ("lock", "pause"):  # held back: left as it was
        assert store.type(planted) == kind.encode()
    if EXPECTED_OUTCOME[key] is Outcome.OK:  # the writers of those keys replace them
        assert [entry["cycle"] for entry in await records.history("m1")] == [result.cycle_id]
        assert await redis.exists(marquee_lock_key("m1")) == 0, "released"
    if key == "fence":  # dropped and counted again, as a counter that is not a number
        assert result.fence == 1


async def test_a_pause_key_of_another_type_stops_a_running_cycle_at_its_next_renewal(
    redis: Redis, store: SyncRedis
) -> None:
    lock = TokenLock(redis, marquee_lock_name("m1"), ttl=10.0, hold_key=pause_key("m1"))
    lease = await lock.acquire()
    assert lease is not None
    store.xadd(pause_key("m1"), {"a": "b"})
    with pytest.raises(LockHeld) as paused:
        await lease.renew()
    assert paused.value.foreign_type == "stream"
    assert await lease.release() is not None
    assert await redis.exists(marquee_lock_key("m1")) == 0


async def test_a_lock_key_turned_to_another_type_is_another_holders_for_renew_and_release(
    redis: Redis, store: SyncRedis
) -> None:
    lock = TokenLock(redis, marquee_lock_name("m1"), ttl=10.0)
    lease = await lock.acquire()
    assert lease is not None
    store.delete(marquee_lock_key("m1"))
    store.hset(marquee_lock_key("m1"), "a", "b")
    with pytest.raises(LockLost) as lost:
        await lease.renew()
    assert lost.value.reason == "stolen"
    assert await lease.release() is ReleaseResult.STOLEN
    assert store.type(marquee_lock_key("m1")) == b"hash", "left where it is"
    assert await lock.raise_fence(3) >= 1


# -- the daemon's other keys -------------------------------------------------------------------


async def test_a_foreign_health_key_is_replaced_and_a_foreign_resume_set_is_one_line(
    redis: Redis, store: SyncRedis
) -> None:
    store.hset(health_key("m1"), "a", "b")
    notifier = ChangeNotifier(settings_for(), redis)
    assert await notifier._swap_health("m1", "ok") is None
    assert store.get(health_key("m1")) == b"ok"

    store.hset(RESUME_KEY, "a", "b")
    services = CycleServices.build(settings_for(), redis, [ScriptedPhase("p")])
    engine = Engine(services, YamlInventorySource(Path("/nonexistent")))
    with capture_logs() as logs:
        assert await engine._resume_order() == set()
    assert [line["event"] for line in logs] == ["resume.unreadable"]
    assert not engine.redis_outage.down, "Redis answered: no outage"


async def test_foreign_keys_are_reported_on_every_topology(topology: TopologyUnderTest) -> None:
    """A Cluster's pipeline and the single server's command channel answer a WRONGTYPE alike:
    as that command's answer only."""
    redis = topology.redis
    records = CycleRecords(redis, history_length=5, timeout=2.0)
    await records.record("m0", record_of("cycle-m0"))
    await redis.hset(marquee_lock_key("m1"), "a", "b")
    await redis.sadd(fence_key(marquee_lock_name("m1")), "a")
    await redis.rpush(pause_key("m1"), "a")
    await redis.zadd(last_cycle_key("m1"), {"a": 1.0})
    await redis.hset(cycle_history_key("m1"), "a", "b")

    m0, m1 = [await read_status(records, name, launchable=True) for name in ("m0", "m1")]
    story = await read_story(records, "m1", limit=5)

    assert m0.unreadable == ()
    assert m0.last is not None
    assert m1.unreadable == (
        report("lock", "hash", "m1"),
        report("pause", "list", "m1") + " (read as paused)",
        report("fence", "set", "m1"),
        report("last", "zset", "m1"),
    )
    assert report("history", "hash", "m1") in story.unreadable
    with pytest.raises(LockHeld):
        await TokenLock(redis, marquee_lock_name("m1"), hold_key=pause_key("m1")).acquire()
    await redis.delete(
        *(name_of("m1") for _, name_of, _ in KEYS.values()),
        *(name_of("m0") for _, name_of, _ in KEYS.values()),
    )
