"""What a wake-up's narrow read means for the ticks after it (``DesiredStateReads.newest``):
until a whole snapshot ends after it, a woken Marquee is cycled from what the wake-up read,
never from the older snapshot, so a tick whose whole read lags cannot undo a change on the host;
and for a tick's cycle still waiting out its start offset, which starts from it at once. The
desired state is a source the test holds (two reads it answers by hand); Redis is real."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Collection

import pytest
from redis.asyncio import Redis

from playguard_async import __version__
from playguard_async.coordination.replicas import ReplicaRoster
from playguard_async.desired_state.model import Inventory
from playguard_async.desired_state.source import Ability
from playguard_async.engine.desired_reads import TICK_READ_WAIT
from playguard_async.engine.scheduler import Engine
from playguard_async.kits.aio import bounded
from playguard_async.phases.protocol import PhaseContext
from tests.support.engine import EngineHarness, ScriptedPhase, inventory_of
from tests.support.state import StaticState


def _with_hosts(hosts: dict[str, str], **modes: str) -> Inventory:
    """Marquees named as ``hosts``'s keys on those hosts (a change a cycle can see), with
    ``modes`` where given."""
    inventory = inventory_of(*hosts)
    return Inventory(
        marquees=[
            m.model_copy(update={"host": hosts[m.name], "mode": modes.get(m.name, "apply")})
            for m in inventory.marquees
        ]
    )


class NarrowState(StaticState):
    """A remote source whose whole reads can be held (``hold``) and whose narrow reads answer
    ``narrow``; ``snapshot_age`` as the PostgreSQL source keeps it (set when a whole read ends)."""

    abilities = frozenset({Ability.REMOTE, Ability.NARROW})

    def __init__(self, inventory: Inventory) -> None:
        super().__init__(inventory)
        self.narrow: Inventory | None = None
        self.hold = asyncio.Event()
        self.hold.set()
        self.reachable: bool | None = True
        self.last_error: str | None = None
        self.last_snapshot_at: float | None = None
        self.narrow_reads: list[list[str]] = []

    async def load(self) -> Inventory:
        await self.hold.wait()
        inventory = await super().load()
        self.last_snapshot_at = time.monotonic()
        return inventory

    async def load_marquees(self, names: Collection[str]) -> Inventory | None:
        self.narrow_reads.append(sorted(names))
        return self.narrow

    def set_share(self, owns: Callable[[str], bool] | None) -> None:
        self.share = owns

    def snapshot_age(self) -> float | None:
        return None if self.last_snapshot_at is None else time.monotonic() - self.last_snapshot_at

    async def listen(
        self,
        wake: Callable[[set[str]], Awaitable[object]],
        resync: Callable[[], Awaitable[object]],
    ) -> None:
        await asyncio.Event().wait()

    def record_cycle(self, record: object) -> None:
        return None

    def write_failures(self) -> int:
        return 0

    async def close(self) -> None:
        return None


async def test_ticks_cycle_a_woken_marquee_from_its_wake_up_read_until_a_whole_read_is_newer(
    redis: Redis,
) -> None:
    seen: list[tuple[str, str]] = []

    async def note(ctx: PhaseContext) -> None:
        seen.append((ctx.marquee.name, ctx.marquee.host))

    old = _with_hosts({"m1": "10.0.0.1", "m2": "10.0.0.2", "m3": "10.0.0.3"})
    state = NarrowState(old)
    harness = EngineHarness(redis, ScriptedPhase("note", note), state=state)
    engine = harness.engine
    await engine.load_inventory()

    # m1 changed host, m2 was switched off, m3 deleted: what the wake-up read says.
    state.narrow = _with_hosts({"m1": "10.0.1.1", "m2": "10.0.0.2"}, m2="off")
    await asyncio.gather(*await engine.wake({"m1", "m2", "m3"}))
    assert state.narrow_reads == [["m1", "m2", "m3"]]
    assert seen == [("m1", "10.0.1.1")]

    # A tick whose whole read lags past TICK_READ_WAIT runs on the older snapshot, except
    # for what the wake-up read: m1 from it, m2 and m3 not at all.
    state.hold.clear()
    seen.clear()
    await harness.tick()
    assert seen == [("m1", "10.0.1.1")]

    # The whole read ends (newer than the wake-up's): it decides again, for everyone.
    state.inventory = _with_hosts({"m1": "10.0.2.1", "m2": "10.0.0.2", "m3": "10.0.0.3"})
    state.hold.set()
    await asyncio.sleep(TICK_READ_WAIT)
    seen.clear()
    await harness.tick()
    assert sorted(seen) == [("m1", "10.0.2.1"), ("m2", "10.0.0.2"), ("m3", "10.0.0.3")]
    assert engine.reads.woken == {}, "superseded wake-up reads are forgotten"


async def test_a_source_that_gives_up_a_narrow_read_is_read_whole(redis: Redis) -> None:
    state = NarrowState(_with_hosts({"m1": "10.0.0.1"}))
    harness = EngineHarness(redis, ScriptedPhase("noop"), state=state)
    await harness.engine.load_inventory()
    state.inventory = _with_hosts({"m1": "10.0.9.9"})
    whole_reads_before = state.last_snapshot_at

    started = await harness.engine.wake({"m1"})  # narrow is None: only a whole read will do

    assert [r.marquee for r in await asyncio.gather(*started)] == ["m1"]
    assert state.last_snapshot_at != whole_reads_before
    assert harness.engine.inventory is not None
    assert harness.engine.inventory.marquee("m1").host == "10.0.9.9"
    assert harness.engine.reads.woken == {}


async def test_a_replica_reads_and_cycles_only_the_woken_marquees_of_its_share(
    redis: Redis,
) -> None:
    fleet = {f"m{n}": f"10.0.0.{n}" for n in range(1, 21)}
    state = NarrowState(_with_hosts(fleet))
    state.narrow = _with_hosts(fleet)
    harness = EngineHarness(redis, ScriptedPhase("noop"), state=state, replica_id="a")
    engine = harness.engine
    other = ReplicaRoster(redis, "b", ttl=30.0, timeout=1.0, version=__version__)
    await other.announce()
    await engine.roster.announce()
    await engine.load_inventory()
    mine = sorted(name for name in fleet if engine.roster.owns(name))
    assert 0 < len(mine) < len(fleet)

    started = await engine.wake(set(fleet))
    none_of_mine = await engine.wake(set(fleet) - set(mine))

    assert state.narrow_reads == [mine]
    assert sorted(r.marquee for r in await asyncio.gather(*started)) == mine
    assert none_of_mine == []
    await other.leave()


TWENTY = {f"m{n}": f"10.0.0.{n}" for n in range(1, 21)}


def _noting_engine(redis: Redis, fleet: dict[str, str]) -> tuple[Engine, NarrowState, list[str]]:
    """Replica "a" over ``fleet`` (name -> host) from a state whose whole reads can be held,
    its start offsets spread over 3 s (of the 60 s tick), and the Marquees its cycles enter."""
    seen: list[str] = []

    async def note(ctx: PhaseContext) -> None:
        seen.append(ctx.marquee.name)

    state = NarrowState(_with_hosts(fleet))
    harness = EngineHarness(
        redis, ScriptedPhase("note", note), state=state, replica_id="a", tick_jitter=0.05
    )
    return harness.engine, state, seen


async def test_a_tick_waits_for_the_read_of_a_new_share_and_cycles_the_marquees_handed_over(
    redis: Redis,
) -> None:
    """A tick whose state in force was read for another share (the other replica left since)
    waits for its read, up to the start offsets' spread, and cycles the Marquees handed over
    in this tick, not the next."""
    fleet = TWENTY
    engine, state, seen = _noting_engine(redis, fleet)
    other = ReplicaRoster(redis, "b", ttl=30.0, timeout=1.0, version=__version__)
    await other.announce()
    await engine.roster.announce()
    mine = sorted(name for name in fleet if engine.roster.owns(name))
    state.inventory = _with_hosts({name: fleet[name] for name in mine})  # a read for the share
    await engine.load_inventory()

    await other.leave()
    state.inventory = _with_hosts(fleet)  # the next read, for everyone: held for a moment
    state.hold.clear()
    asyncio.get_running_loop().call_later(0.3, state.hold.set)
    started = time.monotonic()
    cycles = await engine.tick()
    assert 0.25 < time.monotonic() - started < 1.0  # waited for the read, not the whole spread
    await asyncio.gather(*cycles)
    assert sorted(seen) == sorted(fleet)

    # The share unchanged, a lagging read is not waited for (TICK_READ_WAIT).
    seen.clear()
    state.hold.clear()
    started = time.monotonic()
    cycles = await engine.tick()
    assert time.monotonic() - started < 1.0  # the cycles' start offsets are 0-3 s
    await asyncio.gather(*cycles)
    assert sorted(seen) == sorted(fleet)
    state.hold.set()


async def test_a_whole_read_covers_any_share_so_a_replica_joining_does_not_hold_up_the_tick(
    redis: Redis,
) -> None:
    """Alone, the replica read every Marquee: when another joins, its share is in that read, so
    the tick cycles it at once (``TICK_READ_WAIT``) instead of waiting for a read of the share."""
    fleet = TWENTY
    engine, state, seen = _noting_engine(redis, fleet)
    await engine.roster.announce()
    await engine.load_inventory()
    assert state.share is None, "alone: a whole read"

    other = ReplicaRoster(redis, "b", ttl=30.0, timeout=1.0, version=__version__)
    await other.announce()
    state.hold.clear()  # the share's read lags
    started = time.monotonic()
    cycles = await engine.tick()
    waited = time.monotonic() - started
    mine = sorted(name for name in fleet if engine.roster.owns(name))
    assert waited < 1.0, f"waited {waited:.2f} s for a read the whole one covers"
    await asyncio.gather(*cycles)
    assert 0 < len(mine) < len(fleet)
    assert sorted(seen) == mine
    state.hold.set()
    await other.leave()


async def test_a_wake_up_starts_a_ticks_cycle_waiting_out_its_offset_now_from_its_read(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not after the offset (up to ``tick_jitter`` of a tick), from the tick's older read, with
    a follow-up for the change after it: one cycle, now, that sees the change."""
    seen: list[tuple[str, str]] = []

    async def note(ctx: PhaseContext) -> None:
        seen.append((ctx.marquee.name, ctx.marquee.host))

    state = NarrowState(_with_hosts({"m1": "10.0.0.1"}))
    harness = EngineHarness(redis, ScriptedPhase("note", note), state=state, tick_jitter=0.5)
    engine = harness.engine
    monkeypatch.setattr(random, "uniform", lambda low, high: high)  # the longest offset: 30 s
    [waiting] = await engine.tick()
    await asyncio.sleep(0.1)
    assert seen == []

    state.narrow = _with_hosts({"m1": "10.0.1.1"})
    started = await engine.wake({"m1"})

    assert started == [waiting]
    result = await bounded(5, waiting)
    assert result.outcome.value == "ok"
    assert seen == [("m1", "10.0.1.1")]
    assert engine.cycles == {}, "no follow-up: the cycle read the change"
