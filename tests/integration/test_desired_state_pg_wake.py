"""Wake-ups from the lab's PostgreSQL meeting a cycle already running: one coalesced follow-up
cycle after it, never none, never one per notification, never two cycles of a Marquee at once."""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import Any

import asyncpg
import pytest
from redis.asyncio import Redis
from structlog.testing import capture_logs

from playguard_async.desired_state.model import Inventory
from playguard_async.desired_state.postgres.connection import PgAddress, password_from
from playguard_async.desired_state.postgres.notify import NOTIFY_CHANNEL, NotificationListener
from playguard_async.desired_state.postgres.source import PostgresDesiredState
from playguard_async.engine.results import CycleResult
from playguard_async.kits.aio import background, bounded
from playguard_async.phases.protocol import PhaseContext
from tests.support.engine import EngineHarness, ScriptedPhase
from tests.support.fencing import eventually
from tests.support.postgres import LabDatabase


@pytest.fixture
async def source(postgres: LabDatabase) -> AsyncIterator[PostgresDesiredState]:
    source = PostgresDesiredState(
        PgAddress.parse(postgres.url), password_from(postgres.password, None), timeout=3.0
    )
    yield source
    await source.close()


class HeldPhase:
    """A phase that holds edge-0's first cycle until ``release`` is set, and records what every
    cycle saw and how many cycles of one Marquee ran at once."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = asyncio.Event()
        self.running: Counter[str] = Counter()
        self.most_at_once: Counter[str] = Counter()
        self.branches_seen: list[str] = []

    async def __call__(self, ctx: PhaseContext) -> None:
        name = ctx.marquee.name
        self.running[name] += 1
        self.most_at_once[name] = max(self.most_at_once[name], self.running[name])
        try:
            if name == "edge-0":
                [watched] = (p for p in ctx.inventory.playgrounds_on(name) if p.name == "shop-0-0")
                self.branches_seen.append(watched.branch)
                self.entered.set()
                await self.release.wait()
        finally:
            self.running[name] -= 1


async def _listening(logs: Sequence[Mapping[str, Any]]) -> None:
    await eventually(
        lambda: any(entry["event"] == "desired_state.listening" for entry in logs),
        timeout=10,
        what="the listener LISTENing",
    )


def _cycles(results: list[CycleResult], marquee: str) -> int:
    return sum(result.marquee == marquee for result in results)


async def test_notifications_during_a_cycle_give_exactly_one_follow_up_after_it(
    redis: Redis, fleet: asyncpg.Connection, source: PostgresDesiredState
) -> None:
    held = HeldPhase()
    harness = EngineHarness(redis, ScriptedPhase("held", held), state=source)
    engine = harness.engine
    wakes: list[set[str]] = []

    async def wake(names: Collection[str]) -> object:
        started = await engine.wake(names)
        wakes.append(set(names))  # once the wake-up has done all it will
        return started

    with capture_logs() as logs:
        async with background("listener", source.listen(wake, engine.resync)):
            await _listening(logs)
            result = await _held_cycle_meets_wake_ups(harness, held, fleet, wakes)

    assert result.outcome.value == "ok"
    assert held.branches_seen == ["feature/x-0", "edit-3"], "the follow-up saw the last edit"
    assert "edge-0" not in engine.cycles, "exactly one follow-up, not one per wake-up"
    assert _cycles(harness.results, "edge-0") == 2
    assert _cycles(harness.results, "edge-1") == 1, "Marquees nobody woke get none"
    assert held.most_at_once == Counter({"edge-0": 1, "edge-1": 1})


async def _held_cycle_meets_wake_ups(
    harness: EngineHarness,
    held: HeldPhase,
    fleet: asyncpg.Connection,
    wakes: list[set[str]],
) -> CycleResult:
    """Hold edge-0's first cycle, edit its rows three times (a notification each) and wake it
    once more directly, release it: the follow-up cycle's result."""
    engine = harness.engine
    first = await engine.tick()  # edge-0 and edge-1 (edge-2 is not launchable)
    assert sorted(task.get_name() for task in first) == ["cycle:edge-0", "cycle:edge-1"]
    await bounded(10, held.entered.wait())
    running = engine.cycles["edge-0"].task

    # Three edits, in separate debounce windows: three notifications, three wake-ups, while
    # edge-0's first cycle still runs on the snapshot from before them.
    for branch in ("edit-1", "edit-2", "edit-3"):
        wanted = len(wakes) + 1
        await fleet.execute(
            "UPDATE playguard.playgrounds SET branch = $1 WHERE name = 'shop-0-0'", branch
        )
        reached = functools.partial(lambda n: len(wakes) >= n, wanted)
        await eventually(reached, timeout=10, what=f"the wake-up for {branch}")
    await engine.wake({"edge-0"})  # and one more, as a direct call
    assert wakes == [{"edge-0"}] * 3
    assert not running.done(), "the held cycle is still running"
    assert _cycles(harness.results, "edge-0") == 0

    held.release.set()
    await running
    follow_up = engine.cycles["edge-0"].task  # started as the first one ended, not later
    assert follow_up is not running
    return await follow_up


async def test_a_wake_up_during_a_cycle_gives_no_follow_up_once_stopping(
    redis: Redis, fleet: asyncpg.Connection, source: PostgresDesiredState
) -> None:
    held = HeldPhase()
    harness = EngineHarness(redis, ScriptedPhase("held", held), state=source)
    engine = harness.engine
    await engine.tick()
    await bounded(10, held.entered.wait())
    running = engine.cycles["edge-0"].task
    await engine.wake({"edge-0"})

    engine.request_stop()
    held.release.set()
    await running
    await engine.drain()

    assert engine.cycles == {}
    assert _cycles(harness.results, "edge-0") == 1


async def test_a_burst_of_edits_wakes_by_narrow_reads_never_a_whole_read_per_notification(
    redis: Redis, fleet: asyncpg.Connection, source: PostgresDesiredState
) -> None:
    harness = EngineHarness(redis, ScriptedPhase("noop"), state=source)
    engine = harness.engine
    await engine.load_inventory()
    whole_reads = 0
    read_whole = source.load

    async def counted() -> Inventory:
        nonlocal whole_reads
        whole_reads += 1
        return await read_whole()

    source.load = counted  # type: ignore[method-assign]
    wakes: list[set[str]] = []

    async def wake(names: Collection[str]) -> object:
        started = await engine.wake(names)
        wakes.append(set(names))
        return started

    edits = [(f"shop-{n % 2}-0", f"burst-{n}") for n in range(40)]
    with capture_logs() as logs:
        async with background("listener", source.listen(wake, engine.resync)):
            await _listening(logs)
            for playground, branch in edits:  # 40 transactions, about 40 a second
                await fleet.execute(
                    "UPDATE playguard.playgrounds SET branch = $1 WHERE name = $2",
                    branch,
                    playground,
                )
                await asyncio.sleep(0.025)

            def settled() -> bool:
                woken = engine.reads.woken.get("edge-1")
                return woken is not None and any(
                    p.branch == "burst-39" for p in woken[1].playgrounds_on("edge-1")
                )

            await eventually(settled, timeout=10, what="the last edit read by a wake-up")
        await asyncio.gather(*(cycle.task for cycle in engine.cycles.values()))

    assert whole_reads == 0, "every wake-up read its Marquees alone"
    assert 1 <= len(wakes) <= 10, f"{len(wakes)} wake-ups for 40 notifications"
    assert set().union(*wakes) == {"edge-0", "edge-1"}


async def test_gathering_ends_at_a_quiet_gap_or_at_its_longest(postgres: LabDatabase) -> None:
    listener = NotificationListener(
        PgAddress.parse(postgres.url),
        password_from(postgres.password, None),
        timeout=3.0,
        quiet=0.05,
        gather_max=0.3,
    )
    handed: list[set[str]] = []

    async def wake(names: set[str]) -> None:
        handed.append(names)

    def notify(name: str) -> None:
        listener._notified(None, 0, NOTIFY_CHANNEL, name)

    async with background("wake-loop", listener._wake_loop(wake)):
        for name in ("a", "b", "c"):  # one edit's rows: together, well within the quiet gap
            notify(name)
        await eventually(lambda: len(handed) == 1, timeout=5, what="the first gathering")
        notify("d")  # a lone change, after a quiet gap: a gathering of its own
        await eventually(lambda: len(handed) == 2, timeout=5, what="the second gathering")
        for index in range(30):  # a stream never quiet for 50 ms, for about 0.6 s
            notify(f"s{index}")
            await asyncio.sleep(0.02)
        await eventually(
            lambda: set().union(*handed[2:]) == {f"s{i}" for i in range(30)},
            timeout=5,
            what="the stream handed over",
        )

    assert handed[:2] == [{"a", "b", "c"}, {"d"}]
    assert len(handed[2:]) >= 2, "a stream is cut at gather_max, not held while it lasts"
