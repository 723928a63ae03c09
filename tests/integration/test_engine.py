"""The engine with phases of its own, against the lab's real redis-server."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from structlog.testing import capture_logs

from playguard_async.engine import RESUME_KEY, CycleResult, Engine, Outcome, marquee_lock_name
from playguard_async.inventory import Inventory, InventoryError, Marquee
from playguard_async.lab import RedisServer
from playguard_async.lock import Lease, TokenLock, lock_key
from playguard_async.phase import PhaseContext, PhaseReport
from playguard_async.settings import Settings, load_settings
from tests.support.daemon import within_lease
from tests.support.state import StaticState

pytestmark = pytest.mark.integration

Action = Callable[[PhaseContext], Awaitable[None]]


class ScriptedPhase:
    """A phase that runs ``action`` and remembers which Marquees it entered and left."""

    def __init__(self, name: str, action: Action | None = None) -> None:
        self.name = name
        self.action = action
        self.entered: list[str] = []
        self.finished: list[str] = []

    async def __call__(self, ctx: PhaseContext) -> PhaseReport:
        self.entered.append(ctx.marquee.name)
        if self.action is not None:
            await self.action(ctx)
        self.finished.append(ctx.marquee.name)
        return PhaseReport(actions=[f"{self.name} on {ctx.marquee.name}"])


def inventory_of(*names: str) -> Inventory:
    return Inventory(
        marquees=[
            Marquee(
                name=name,
                host="127.0.0.1",
                user="root",
                identity_file=Path("/nonexistent/id"),
                known_hosts=Path("/nonexistent/known_hosts"),
            )
            for name in names
        ]
    )


def settings_for(**overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "replica_id": "test-replica",
        "lock_ttl": 30.0,
        "redis_socket_timeout": 0.5,
        "tick_interval": 60.0,
        "shutdown_grace": 5.0,
        "tick_jitter": 0.0,
    }
    values.update(overrides)
    return load_settings(None, **within_lease(values))


class Harness:
    def __init__(self, redis: Redis, *phases: ScriptedPhase, marquees: int = 1, **settings: Any):
        self.results: list[CycleResult] = []
        self.state = StaticState(inventory_of(*(f"m{i}" for i in range(1, marquees + 1))))
        self.engine = Engine(
            settings_for(**settings), self.state, redis, phases, listeners=[self.record]
        )

    async def record(self, result: CycleResult) -> None:
        self.results.append(result)

    async def cycle(self, name: str = "m1") -> CycleResult:
        inventory = await self.engine.load_inventory()
        return await self.engine.cycle(inventory.marquee(name), inventory)


async def test_full_cycle_runs_every_phase_and_releases(redis: Redis) -> None:
    first, second = ScriptedPhase("first"), ScriptedPhase("second")
    result = await Harness(redis, first, second).cycle()
    assert result.outcome is Outcome.OK
    assert first.finished == second.finished == ["m1"]
    assert result.fence == 1
    assert set(result.durations) == {"first", "second"}
    assert result.actions == {"first": ["first on m1"], "second": ["second on m1"]}
    assert await redis.exists(lock_key(marquee_lock_name("m1"))) == 0


async def test_loser_returns_at_once_and_logs_locked(redis: Redis) -> None:
    holder = await TokenLock(redis, marquee_lock_name("m1")).acquire()
    assert holder is not None
    phase = ScriptedPhase("first")
    with capture_logs() as logs:
        result = await Harness(redis, phase).cycle()
    assert result.outcome is Outcome.LOCKED
    assert phase.entered == []
    assert any(line["event"] == "marquee.locked" for line in logs)
    assert await redis.get(lock_key(marquee_lock_name("m1"))) == holder.record.encode()


async def test_stolen_token_mid_cycle_runs_no_further_phase(redis: Redis) -> None:
    async def steal(ctx: PhaseContext) -> None:
        await redis.set(lock_key(marquee_lock_name("m1")), "intruder")

    second = ScriptedPhase("second")
    result = await Harness(redis, ScriptedPhase("first", steal), second).cycle()
    assert (result.outcome, result.reason, result.phase) == (Outcome.LOCK_LOST, "stolen", "first")
    assert second.entered == []
    assert await redis.get(lock_key(marquee_lock_name("m1"))) == b"intruder"


async def test_redis_paused_mid_cycle_runs_no_further_phase(
    redis: Redis, redis_server: RedisServer
) -> None:
    async def pause(ctx: PhaseContext) -> None:
        redis_server.pause()

    second = ScriptedPhase("second")
    try:
        result = await Harness(redis, ScriptedPhase("first", pause), second).cycle()
    finally:
        redis_server.resume()
    assert (result.outcome, result.reason) == (Outcome.LOCK_LOST, "unreachable")
    assert second.entered == []


async def test_redis_killed_mid_cycle_runs_no_further_phase(
    redis: Redis, redis_server: RedisServer
) -> None:
    async def kill(ctx: PhaseContext) -> None:
        redis_server.kill()

    second = ScriptedPhase("second")
    try:
        result = await Harness(redis, ScriptedPhase("first", kill), second).cycle()
    finally:
        redis_server.restart()
    assert (result.outcome, result.reason) == (Outcome.LOCK_LOST, "unreachable")
    assert second.entered == []


async def test_redis_down_at_acquire_is_classified_and_runs_nothing(
    redis: Redis, redis_server: RedisServer
) -> None:
    phase = ScriptedPhase("first")
    redis_server.kill()
    try:
        result = await Harness(redis, phase).cycle()
    finally:
        redis_server.restart()
    assert result.outcome is Outcome.REDIS_UNAVAILABLE
    assert phase.entered == []


async def test_phase_hanging_past_the_lease_is_cancelled_at_the_deadline(redis: Redis) -> None:
    cancelled = asyncio.Event()

    async def hang(ctx: PhaseContext) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    second = ScriptedPhase("second")
    harness = Harness(
        redis, ScriptedPhase("first", hang), second, lock_ttl=1.0, redis_socket_timeout=0.2
    )
    started = time.monotonic()
    result = await harness.cycle()
    elapsed = time.monotonic() - started
    assert (result.outcome, result.phase) == (Outcome.DEADLINE, "first")
    assert cancelled.is_set()
    assert elapsed < 1.0, f"the phase outlived its 1 s lease: {elapsed:.2f}s"
    assert second.entered == []
    assert await redis.exists(lock_key(marquee_lock_name("m1"))) == 0


async def test_failing_phase_ends_the_cycle_with_its_traceback(redis: Redis) -> None:
    async def fail(ctx: PhaseContext) -> None:
        raise RuntimeError("disk full")

    second = ScriptedPhase("second")
    with capture_logs() as logs:
        result = await Harness(redis, ScriptedPhase("first", fail), second).cycle()
    assert (result.outcome, result.phase) == (Outcome.PHASE_FAILED, "first")
    assert "disk full" in str(result.reason)
    assert second.entered == []
    failed = [line for line in logs if line["event"] == "phase.failed"]
    assert failed
    assert failed[0]["exc_info"] is True
    assert await redis.exists(lock_key(marquee_lock_name("m1"))) == 0


async def test_phase_listeners_hear_each_phase_as_it_ends_and_cannot_break_the_cycle(
    redis: Redis,
) -> None:
    async def fail(ctx: PhaseContext) -> None:
        raise RuntimeError("disk full")

    heard: list[tuple[str, str, list[str], bool]] = []

    def listen(result: CycleResult, phase: str) -> None:
        heard.append((phase, result.outcome.value, result.actions.get(phase, []),
                      phase in result.durations))  # fmt: skip

    def broken(result: CycleResult, phase: str) -> None:
        raise RuntimeError("listener bug")

    harness = Harness(redis, ScriptedPhase("first"), ScriptedPhase("second", fail))
    harness.engine.phase_listeners += [broken, listen]
    with capture_logs() as logs:
        result = await harness.cycle()
    assert heard == [
        ("first", "ok", ["first on m1"], True),
        ("second", "phase_failed", [], True),
    ]
    assert result.outcome is Outcome.PHASE_FAILED
    assert [line["event"] for line in logs].count("phase.listener_failed") == 2


async def test_concurrency_limit_holds_and_slots_come_before_locks(redis: Redis) -> None:
    in_flight = 0
    peak_in_flight = 0
    peak_locks = 0

    async def busy(ctx: PhaseContext) -> None:
        nonlocal in_flight, peak_in_flight, peak_locks
        in_flight += 1
        peak_in_flight = max(peak_in_flight, in_flight)
        locks = [key async for key in redis.scan_iter(match="playguard:{marquee:*}:lock")]
        peak_locks = max(peak_locks, len(locks))
        await asyncio.sleep(0.1)
        in_flight -= 1

    harness = Harness(redis, ScriptedPhase("first", busy), marquees=5, max_concurrent_cycles=2)
    await harness.engine.load_inventory()
    results = await asyncio.gather(*await harness.engine.tick())
    assert [r.outcome for r in results] == [Outcome.OK] * 5
    assert peak_in_flight == 2
    assert peak_locks == 2


async def test_a_marquee_already_in_a_cycle_is_not_started_twice(redis: Redis) -> None:
    gate = asyncio.Event()

    async def wait(ctx: PhaseContext) -> None:
        await gate.wait()

    phase = ScriptedPhase("first", wait)
    harness = Harness(redis, phase)
    first_tick = await harness.engine.tick()
    await asyncio.sleep(0.05)
    second_tick = await harness.engine.tick()
    gate.set()
    await asyncio.gather(*first_tick)
    assert len(first_tick) == 1
    assert second_tick == []
    assert phase.entered == ["m1"]


async def test_stop_request_ends_the_cycle_at_the_next_phase_boundary(redis: Redis) -> None:
    harness: Harness

    async def stop(ctx: PhaseContext) -> None:
        harness.engine.request_stop()
        await asyncio.sleep(0.05)

    first, second = ScriptedPhase("first", stop), ScriptedPhase("second")
    harness = Harness(redis, first, second)
    result = await harness.cycle()
    assert result.outcome is Outcome.INTERRUPTED
    assert first.finished == ["m1"], "the running phase finishes"
    assert second.entered == [], "no new phase starts"
    assert await redis.zrange(RESUME_KEY, 0, -1) == [b"m1"]
    assert await redis.exists(lock_key(marquee_lock_name("m1"))) == 0


async def test_second_stop_request_cancels_at_once(redis: Redis) -> None:
    harness: Harness
    entered = asyncio.Event()

    async def hang(ctx: PhaseContext) -> None:
        entered.set()
        await asyncio.sleep(60)

    harness = Harness(redis, ScriptedPhase("first", hang))
    [task] = await harness.engine.tick()
    await entered.wait()
    harness.engine.request_stop()
    await asyncio.sleep(0.05)
    assert not task.done(), "the first request lets the phase run on"
    harness.engine.request_stop()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert harness.results[0].outcome is Outcome.INTERRUPTED
    assert await redis.zrange(RESUME_KEY, 0, -1) == [b"m1"]
    assert await redis.exists(lock_key(marquee_lock_name("m1"))) == 0


async def test_run_drains_then_cancels_after_the_grace(redis: Redis) -> None:
    entered = asyncio.Event()

    async def hang(ctx: PhaseContext) -> None:
        entered.set()
        await asyncio.sleep(60)

    harness = Harness(redis, ScriptedPhase("first", hang), shutdown_grace=0.3)
    runner = asyncio.create_task(harness.engine.run())
    await entered.wait()
    harness.engine.request_stop()
    started = time.monotonic()
    await runner
    assert time.monotonic() - started < 2.0
    assert harness.results[0].outcome is Outcome.INTERRUPTED
    assert await redis.exists(lock_key(marquee_lock_name("m1"))) == 0


async def test_interrupted_marquees_run_first_and_their_record_clears(redis: Redis) -> None:
    await redis.zadd(RESUME_KEY, {"m3": time.time()})
    phase = ScriptedPhase("first")
    harness = Harness(redis, phase, marquees=3, max_concurrent_cycles=1)
    await asyncio.gather(*await harness.engine.tick())
    assert phase.entered == ["m3", "m1", "m2"]
    assert await redis.zrange(RESUME_KEY, 0, -1) == []


async def test_invalid_inventory_keeps_the_last_good_state(redis: Redis) -> None:
    phase = ScriptedPhase("first")
    harness = Harness(redis, phase)
    await harness.engine.load_inventory()
    harness.state.error = InventoryError("inventory.yaml:3: marquees[0].name: bad (value 'X')")
    with capture_logs() as logs:
        results = await asyncio.gather(*await harness.engine.tick())
    assert [r.outcome for r in results] == [Outcome.OK]
    assert phase.entered == ["m1"]
    [invalid] = [line for line in logs if line["event"] == "inventory.invalid"]
    assert "marquees[0].name" in invalid["error"]


async def test_remote_session_opens_on_first_use_and_closes_before_release(redis: Redis) -> None:
    events: list[str] = []

    @contextlib.asynccontextmanager
    async def opener(marquee: Marquee) -> AsyncIterator[str]:
        held = await redis.exists(lock_key(marquee_lock_name(marquee.name)))
        events.append(f"open {marquee.name} while locked={held}")
        yield "session"
        events.append("close")

    async def use(ctx: PhaseContext) -> None:
        events.append(f"got {await ctx.remote()}")

    harness = Harness(redis, ScriptedPhase("first", use), ScriptedPhase("second", use))
    harness.engine.open_session = opener
    result = await harness.cycle()
    assert result.outcome is Outcome.OK
    assert events == ["open m1 while locked=1", "got session", "got session", "close"]

    events.clear()
    await Harness(redis, ScriptedPhase("first"), ScriptedPhase("second")).cycle()
    assert events == [], "no phase asked for the remote session, so none was opened"


async def test_phase_never_starts_on_a_lease_that_lapsed_while_the_process_stalled(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_renew = Lease.renew

    async def renew_then_stall(lease: Lease) -> None:
        await real_renew(lease)
        time.sleep(1.1)  # noqa: ASYNC251 - Redis answered, then the whole process froze

    monkeypatch.setattr(Lease, "renew", renew_then_stall)
    second = ScriptedPhase("second")
    harness = Harness(redis, ScriptedPhase("first"), second, lock_ttl=1.0, redis_socket_timeout=0.2)
    result = await harness.cycle()
    assert (result.outcome, result.phase) == (Outcome.DEADLINE, "second")
    assert second.entered == [], "not even the phase's first synchronous steps ran"
