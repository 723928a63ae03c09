"""The engine with phases of its own, against the lab's real redis-server."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest
import structlog
from redis.asyncio import Redis
from structlog.testing import capture_logs

from playguard_async.coordination.keys import RESUME_KEY, marquee_lock_key, marquee_lock_name
from playguard_async.coordination.lock import Lease, ReleaseResult, TokenLock
from playguard_async.coordination.records import CycleRecords
from playguard_async.cycle_record import NoticeKind
from playguard_async.desired_state.model import Inventory, InventoryError, Marquee
from playguard_async.desired_state.rollout_policy import RolloutPolicy
from playguard_async.desired_state.windows import Window
from playguard_async.engine import cycle_ending
from playguard_async.engine.results import CycleCancelled, CycleResult, Outcome
from playguard_async.engine.services import CycleServices
from playguard_async.kits.aio import bounded
from playguard_async.phases.protocol import Notice, Phase, PhaseContext, PhaseReport
from playguard_lab import RedisServer
from tests.support.engine import EngineHarness, ScriptedPhase, inventory_of
from tests.support.state import StaticState

pytestmark = pytest.mark.integration


async def test_full_cycle_runs_every_phase_and_releases(redis: Redis) -> None:
    first, second = ScriptedPhase("first"), ScriptedPhase("second")
    result = await EngineHarness(redis, first, second).cycle()
    assert result.outcome is Outcome.OK
    assert first.finished == second.finished == ["m1"]
    assert result.fence == 1
    assert set(result.durations) == {"first", "second"}
    assert result.actions == {"first": ["first on m1"], "second": ["second on m1"]}
    assert await redis.exists(marquee_lock_key("m1")) == 0


@pytest.mark.parametrize("failing", [None, "first", "second"])
async def test_each_phase_logs_under_its_name_and_the_walk_leaves_the_context_as_it_was(
    redis: Redis, failing: str | None
) -> None:
    seen: list[object] = []

    async def note(ctx: PhaseContext) -> None:
        seen.append(structlog.contextvars.get_contextvars().get("phase"))
        if failing == seen[-1]:
            raise RuntimeError("refused")

    structlog.contextvars.bind_contextvars(phase="the caller's")
    try:
        result = await EngineHarness(
            redis, ScriptedPhase("first", note), ScriptedPhase("second", note)
        ).cycle()
        after = structlog.contextvars.get_contextvars().get("phase")
    finally:
        structlog.contextvars.unbind_contextvars("phase")
    assert seen == (["first"] if failing == "first" else ["first", "second"])
    assert result.outcome is (Outcome.OK if failing is None else Outcome.PHASE_FAILED)
    assert after == "the caller's"


async def test_loser_returns_at_once_and_logs_locked(redis: Redis) -> None:
    holder = await TokenLock(redis, marquee_lock_name("m1")).acquire()
    assert holder is not None
    phase = ScriptedPhase("first")
    with capture_logs() as logs:
        result = await EngineHarness(redis, phase).cycle()
    assert result.outcome is Outcome.LOCKED
    assert phase.entered == []
    assert any(line["event"] == "marquee.locked" for line in logs)
    assert await redis.get(marquee_lock_key("m1")) == holder.record.encode()


async def test_stolen_token_mid_cycle_runs_no_further_phase(redis: Redis) -> None:
    async def steal(ctx: PhaseContext) -> None:
        await redis.set(marquee_lock_key("m1"), "intruder")

    second = ScriptedPhase("second")
    result = await EngineHarness(redis, ScriptedPhase("first", steal), second).cycle()
    assert (result.outcome, result.reason, result.phase) == (Outcome.LOCK_LOST, "stolen", "first")
    assert second.entered == []
    assert await redis.get(marquee_lock_key("m1")) == b"intruder"


async def test_redis_paused_mid_cycle_runs_no_further_phase(
    redis: Redis, redis_server: RedisServer
) -> None:
    async def pause(ctx: PhaseContext) -> None:
        redis_server.pause()

    second = ScriptedPhase("second")
    try:
        result = await EngineHarness(redis, ScriptedPhase("first", pause), second).cycle()
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
        result = await EngineHarness(redis, ScriptedPhase("first", kill), second).cycle()
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
        result = await EngineHarness(redis, phase).cycle()
    finally:
        redis_server.restart()
    assert result.outcome is Outcome.REDIS_UNAVAILABLE
    assert phase.entered == []


def hanging_until_cancelled(
    cancelled: asyncio.Event, at: list[float] | None = None
) -> Callable[[PhaseContext], Awaitable[None]]:
    """A phase's action that waits a minute unless cancelled, and sets ``cancelled`` if it is
    (appending the moment, on the monotonic clock, to ``at``)."""

    async def hang(ctx: PhaseContext) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            if at is not None:
                at.append(time.monotonic())
            cancelled.set()
            raise

    return hang


async def test_phase_hanging_past_the_lease_is_cancelled_at_the_deadline(redis: Redis) -> None:
    cancelled, cancelled_at = asyncio.Event(), list[float]()
    hang = hanging_until_cancelled(cancelled, cancelled_at)

    second = ScriptedPhase("second")
    harness = EngineHarness(
        redis, ScriptedPhase("first", hang), second, lock_ttl=1.0, redis_socket_timeout=0.2
    )
    started = time.monotonic()
    result = await harness.cycle()
    assert (result.outcome, result.phase) == (Outcome.DEADLINE, "first")
    assert cancelled.is_set()
    # The lease began after ``started``; the release and the record after the cancel are not the
    # phase's time, so only the moment of the cancel is held to the lease.
    held = cancelled_at[0] - started
    assert held < 1.0, f"the phase outlived its 1 s lease: cancelled after {held:.3f}s"
    assert second.entered == []
    assert await redis.exists(marquee_lock_key("m1")) == 0


async def test_failing_phase_ends_the_cycle_with_its_traceback(redis: Redis) -> None:
    async def fail(ctx: PhaseContext) -> None:
        raise RuntimeError("disk full")

    second = ScriptedPhase("second")
    with capture_logs() as logs:
        result = await EngineHarness(redis, ScriptedPhase("first", fail), second).cycle()
    assert (result.outcome, result.phase) == (Outcome.PHASE_FAILED, "first")
    assert "disk full" in str(result.reason)
    assert second.entered == []
    failed = [line for line in logs if line["event"] == "phase.failed"]
    assert failed
    assert failed[0]["exc_info"] is True
    assert await redis.exists(marquee_lock_key("m1")) == 0


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

    harness = EngineHarness(
        redis,
        ScriptedPhase("first"),
        ScriptedPhase("second", fail),
        phase_listeners=[broken, listen],
    )
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
        locks = [key async for key in redis.scan_iter(match=marquee_lock_key("*"))]
        peak_locks = max(peak_locks, len(locks))
        await asyncio.sleep(0.1)
        in_flight -= 1

    harness = EngineHarness(
        redis, ScriptedPhase("first", busy), marquees=5, max_concurrent_cycles=2
    )
    await harness.engine.load_inventory()
    results = await harness.tick()
    assert [r.outcome for r in results] == [Outcome.OK] * 5
    assert peak_in_flight == 2
    assert peak_locks == 2


async def test_a_marquee_already_in_a_cycle_is_not_started_twice(redis: Redis) -> None:
    gate, entered = asyncio.Event(), asyncio.Event()

    async def wait(ctx: PhaseContext) -> None:
        entered.set()
        await gate.wait()

    phase = ScriptedPhase("first", wait)
    harness = EngineHarness(redis, phase)
    first_tick = await harness.engine.tick()
    await entered.wait()
    second_tick = await harness.engine.tick()
    gate.set()
    await asyncio.gather(*first_tick)
    assert len(first_tick) == 1
    assert second_tick == []
    assert phase.entered == ["m1"]


async def test_stop_request_ends_the_cycle_at_the_next_phase_boundary(redis: Redis) -> None:
    harness: EngineHarness

    async def stop(ctx: PhaseContext) -> None:
        harness.engine.request_stop()
        await asyncio.sleep(0.05)

    first, second = ScriptedPhase("first", stop), ScriptedPhase("second")
    harness = EngineHarness(redis, first, second)
    result = await harness.cycle()
    assert result.outcome is Outcome.INTERRUPTED
    assert first.finished == ["m1"], "the running phase finishes"
    assert second.entered == [], "no new phase starts"
    assert await redis.zrange(RESUME_KEY, 0, -1) == [b"m1"]
    assert await redis.exists(marquee_lock_key("m1")) == 0


async def test_second_stop_request_cancels_at_once(redis: Redis) -> None:
    harness: EngineHarness
    entered = asyncio.Event()

    async def hang(ctx: PhaseContext) -> None:
        entered.set()
        await asyncio.sleep(60)

    harness = EngineHarness(redis, ScriptedPhase("first", hang))
    [task] = await harness.engine.tick()
    await entered.wait()
    harness.engine.request_stop()
    await harness.engine.stopping.wait()
    assert (task.done(), task.cancelling()) == (False, 0), "the first request lets the phase run on"
    harness.engine.request_stop()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert harness.results[0].outcome is Outcome.INTERRUPTED
    assert await redis.zrange(RESUME_KEY, 0, -1) == [b"m1"]
    assert await redis.exists(marquee_lock_key("m1")) == 0


async def test_run_one_is_cancelled_by_a_second_stop_request(redis: Redis) -> None:
    harness: EngineHarness
    stopped_once = asyncio.Event()

    async def stop_then_hang(ctx: PhaseContext) -> None:
        harness.engine.request_stop()
        stopped_once.set()
        await asyncio.Event().wait()

    harness = EngineHarness(redis, ScriptedPhase("first", stop_then_hang), ScriptedPhase("second"))
    inventory = await harness.engine.load_inventory()
    one = asyncio.create_task(harness.engine.run_one(inventory.marquee("m1"), inventory))
    await stopped_once.wait()
    assert list(harness.engine.cycles) == ["m1"], "request_stop reaches it like a tick's cycle"
    harness.engine.request_stop()
    with pytest.raises(CycleCancelled, match="cycle of m1 cancelled in the middle of a phase"):
        await one
    assert harness.results[0].outcome is Outcome.INTERRUPTED
    assert await redis.zrange(RESUME_KEY, 0, -1) == [b"m1"]
    assert await redis.exists(marquee_lock_key("m1")) == 0


async def test_an_observer_bug_ends_the_cycle_in_the_error_outcome_at_once(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(result: ReleaseResult) -> None:
        raise RuntimeError("observer bug")

    harness = EngineHarness(redis, ScriptedPhase("first"))
    monkeypatch.setattr(harness.engine.observer, "lease_released", broken)
    with capture_logs() as logs:
        [task] = await harness.engine.tick()
        result = await task
    assert (result.outcome, result.reason) == (Outcome.ERROR, "RuntimeError: observer bug")
    assert [line["event"] for line in logs].count("cycle.error") == 1
    assert harness.engine.cycles == {}
    assert await redis.exists(marquee_lock_key("m1")) == 0


async def test_a_cycle_whose_ending_breaks_is_logged_when_it_fails_not_at_drain(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(services: CycleServices, result: CycleResult) -> None:
        raise RuntimeError("ending bug")

    harness = EngineHarness(redis, ScriptedPhase("first"))
    monkeypatch.setattr(cycle_ending, "_finish", broken)
    with capture_logs() as logs:
        [task] = await harness.engine.tick()
        await asyncio.wait([task])
        crashed = [line for line in logs if line["event"] == "cycle.crashed"]
    assert task.exception() is not None
    assert [(line["marquee"], line["error"]) for line in crashed] == [
        ("m1", "RuntimeError('ending bug')")
    ]
    assert harness.engine.cycles == {}


async def test_run_drains_then_cancels_after_the_grace(redis: Redis) -> None:
    entered = asyncio.Event()

    async def hang(ctx: PhaseContext) -> None:
        entered.set()
        await asyncio.sleep(60)

    harness = EngineHarness(redis, ScriptedPhase("first", hang), shutdown_grace=0.3)
    runner = asyncio.create_task(harness.engine.run())
    await entered.wait()
    harness.engine.request_stop()
    started = time.monotonic()
    await runner
    assert time.monotonic() - started < 2.0
    assert harness.results[0].outcome is Outcome.INTERRUPTED
    assert await redis.exists(marquee_lock_key("m1")) == 0


async def test_a_stop_with_a_backlog_counts_the_cycles_not_begun_instead_of_recording_each(
    redis: Redis,
) -> None:
    """A replica stopped while most of its share waits out start offsets or for a slot: those
    cycles did nothing, so none is recorded (a record would hide the Marquee's last real
    outcome) nor logged above debug (at 100,000 Marquees, tens of thousands of lines);
    ``engine.stopped`` counts them. The cycle stopped in a phase is recorded and resumed first,
    as before."""
    entered = asyncio.Event()

    async def hold(ctx: PhaseContext) -> None:
        entered.set()
        await asyncio.sleep(0.2)

    records = CycleRecords(redis, history_length=3, timeout=1.0)
    harness = EngineHarness(
        redis,
        ScriptedPhase("first", hold),
        ScriptedPhase("second"),
        marquees=120,
        records=records,
        max_concurrent_cycles=1,  # waiting for the slot, or ...
        tick_jitter=0.2,  # ... out start offsets of up to 12 s
    )
    with capture_logs() as logs:
        runner = asyncio.create_task(harness.engine.run())
        await bounded(15, entered.wait())
        harness.engine.request_stop()
        await runner
    [begun] = [r.marquee for r in harness.results if r.fence is not None]
    assert len(harness.results) == 120
    assert {r.outcome for r in harness.results} == {Outcome.INTERRUPTED}
    assert [await records.last(f"m{n}") is not None for n in range(1, 121)].count(True) == 1
    assert await records.last(begun) is not None
    assert await redis.zrange(RESUME_KEY, 0, -1) == [begun.encode()]
    told = [line for line in logs if line["event"] == "cycle.finished"]
    loud = [line for line in told if line["log_level"] != "debug"]  # (marquee: in contextvars)
    assert [(line["log_level"], line["fence"]) for line in loud] == [("warning", 1)]
    assert len(told) == 120
    [stopped] = [line for line in logs if line["event"] == "engine.stopped"]
    assert (stopped["drained"], stopped["not_begun"]) == (120, 119)


async def test_interrupted_marquees_run_first_and_their_record_clears(redis: Redis) -> None:
    await redis.zadd(RESUME_KEY, {"m3": time.time()})
    phase = ScriptedPhase("first")
    harness = EngineHarness(redis, phase, marquees=3, max_concurrent_cycles=1)
    await harness.tick()
    assert phase.entered == ["m3", "m1", "m2"]
    assert await redis.zrange(RESUME_KEY, 0, -1) == []


async def test_invalid_inventory_keeps_the_last_good_state(redis: Redis) -> None:
    phase = ScriptedPhase("first")
    state = StaticState(inventory_of("m1"))
    harness = EngineHarness(redis, phase, state=state)
    await harness.engine.load_inventory()
    state.error = InventoryError("inventory.yaml:3: marquees[0].name: bad (value 'X')")
    with capture_logs() as logs:
        results = await harness.tick()
    assert [r.outcome for r in results] == [Outcome.OK]
    assert phase.entered == ["m1"]
    [invalid] = [line for line in logs if line["event"] == "inventory.invalid"]
    assert "marquees[0].name" in invalid["error"]


async def test_the_same_refusal_is_logged_once_and_again_after_a_good_read(
    redis: Redis,
) -> None:
    state = StaticState(inventory_of("m1"))
    harness = EngineHarness(redis, ScriptedPhase("first"), state=state)
    await harness.engine.load_inventory()
    first = InventoryError("inventory.yaml:3: marquees[0].name: bad (value 'X')")
    second = InventoryError("inventory.yaml:4: marquees[0].host: bad (value 'Y')")
    with capture_logs() as logs:
        for error in (first, first, first, second, second, None, first):
            state.error = error
            await harness.tick()
    errors = [line["error"] for line in logs if line["event"] == "inventory.invalid"]
    assert errors == [str(first), str(second), str(first)]


class SlowState(StaticState):
    """A source whose reads take ``delay`` seconds once ``delay`` is set (a huge document)."""

    delay = 0.0

    async def load(self) -> Inventory:
        await asyncio.sleep(self.delay)
        return await super().load()


async def test_a_tick_goes_on_with_the_state_in_force_while_a_slow_read_runs(
    redis: Redis,
) -> None:
    state = SlowState(inventory_of("m1"))
    phase = ScriptedPhase("first")
    harness = EngineHarness(redis, phase, state=state)
    await harness.engine.load_inventory()
    state.delay, state.inventory = 1.0, inventory_of("m2")
    started = time.monotonic()
    await harness.tick()
    await harness.tick()
    assert time.monotonic() - started < 0.5, "two ticks waited on one read"
    assert phase.entered == ["m1", "m1"]
    await asyncio.sleep(1.2)  # the one read (not one per tick) ends and is in force
    state.delay = 0.0
    await harness.tick()
    assert phase.entered == ["m1", "m1", "m2"]


async def test_remote_session_opens_on_first_use_and_closes_before_release(redis: Redis) -> None:
    events: list[str] = []

    class Session:
        actions: tuple[str, ...] = ()
        host_fence = None

        def __str__(self) -> str:
            return "session"

    @contextlib.asynccontextmanager
    async def opener(
        marquee: Marquee, lease: Lease, dry_run: bool, cycle_id: str, read_through: int | None
    ) -> AsyncIterator[Session]:
        held = await redis.exists(marquee_lock_key(marquee.name))
        events.append(f"open {marquee.name} fence {lease.fence} while locked={held}")
        yield Session()
        events.append("close")

    async def use(ctx: PhaseContext) -> None:
        events.append(f"got {await ctx.remote()}")

    harness = EngineHarness(
        redis, ScriptedPhase("first", use), ScriptedPhase("second", use), open_session=opener
    )
    result = await harness.cycle()
    assert result.outcome is Outcome.OK
    assert events == [
        f"open m1 fence {result.fence} while locked=1",
        "got session",
        "got session",
        "close",
    ]

    events.clear()
    await EngineHarness(redis, ScriptedPhase("first"), ScriptedPhase("second")).cycle()
    assert events == [], "no phase asked for the remote session, so none was opened"


async def test_each_phase_is_credited_with_the_actions_its_session_recorded_and_its_notices(
    redis: Redis,
) -> None:
    class Session:
        def __init__(self) -> None:
            self.actions: list[str] = []
            self.host_fence: int | None = None

    @contextlib.asynccontextmanager
    async def opener(
        marquee: Marquee, lease: Lease, dry_run: bool, cycle_id: str, read_through: int | None
    ) -> AsyncIterator[Session]:
        yield Session()

    def acting(*done: str) -> Callable[[PhaseContext], Awaitable[None]]:
        async def act(ctx: PhaseContext) -> None:
            session = await ctx.remote()
            assert isinstance(session, Session)
            session.actions.extend(done)

        return act

    class Noticing:
        name = "noticing"

        async def __call__(self, ctx: PhaseContext) -> PhaseReport:
            await acting("third change")(ctx)
            return PhaseReport(notices=[Notice(NoticeKind.DRIFT, "web", "app: missing")])

    phases: list[Phase] = [
        ScriptedPhase("first", acting("first change", "second change")),
        ScriptedPhase("quiet"),
        Noticing(),
    ]
    harness = EngineHarness(redis, *phases, open_session=opener)
    result = await harness.cycle()
    assert result.actions == {
        "first": ["first change", "second change", "first on m1"],
        "quiet": ["quiet on m1"],
        "noticing": ["third change"],
    }
    assert result.to_record()["notices"] == {
        "noticing": [{"kind": "drift", "subject": "web", "detail": "app: missing"}]
    }


@pytest.mark.parametrize("hanging", ["second", "third"])
async def test_the_deadline_follows_each_renewal_and_cuts_the_phase_that_outlives_it(
    redis: Redis, hanging: str
) -> None:
    """Phases of 0.6 s each under a 1 s lease: each renewal moves the deadline on, so no phase
    but the hanging one is cut, however many deadlines it took before it; that one is cancelled
    within its lease (about 1 s after the last renewal), and the task carries no cancellation
    on into the ending."""
    cancelled = asyncio.Event()
    hang = hanging_until_cancelled(cancelled)

    async def busy(ctx: PhaseContext) -> None:
        await asyncio.sleep(0.6)

    names = ["first", "second", "third"]
    phases = [ScriptedPhase(name, hang if name == hanging else busy) for name in names]
    harness = EngineHarness(redis, *phases, lock_ttl=1.0, redis_socket_timeout=0.2)
    started = time.monotonic()
    result = await harness.cycle()
    elapsed = time.monotonic() - started
    before = names.index(hanging)
    assert (result.outcome, result.phase) == (Outcome.DEADLINE, hanging)
    assert cancelled.is_set()
    assert [phase.finished for phase in phases[:before]] == [["m1"]] * before
    assert 0.6 * before + 0.9 < elapsed < 0.6 * before + 1.4, f"cut after {elapsed:.2f}s"
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    assert await redis.exists(marquee_lock_key("m1")) == 0, "released after the cut"


async def test_phase_never_starts_on_a_lease_that_lapsed_while_the_process_stalled(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_renew = Lease.renew

    async def renew_then_stall(lease: Lease) -> None:
        await real_renew(lease)
        time.sleep(1.1)  # noqa: ASYNC251 - Redis answered, then the whole process froze

    monkeypatch.setattr(Lease, "renew", renew_then_stall)
    second = ScriptedPhase("second")
    harness = EngineHarness(
        redis, ScriptedPhase("first"), second, lock_ttl=1.0, redis_socket_timeout=0.2
    )
    result = await harness.cycle()
    assert (result.outcome, result.phase) == (Outcome.DEADLINE, "second")
    assert second.entered == [], "not even the phase's first synchronous steps ran"


def tracked(thing: object) -> bool:
    """Whether the collector's generations hold ``thing`` (frozen objects are in none)."""
    return any(candidate is thing for candidate in gc.get_objects())


async def test_a_new_desired_state_is_kept_out_of_the_collectors_generations(
    redis: Redis,
) -> None:
    state = StaticState(inventory_of("m1", "m2"))
    harness = EngineHarness(redis, state=state)
    try:
        first = await harness.engine.load_inventory()
        assert not tracked(first)
        assert not tracked(first.marquees[0])
        state.inventory = inventory_of("m3")
        second = await harness.engine.load_inventory()
        assert not tracked(second)
        frozen = gc.get_freeze_count()
        assert await harness.engine.load_inventory() is second
        assert gc.get_freeze_count() == frozen, "an unchanged state is not frozen again"
    finally:
        gc.unfreeze()


async def test_a_cycles_duration_starts_at_its_acquisition_and_its_wait_is_apart(
    redis: Redis,
) -> None:
    async def busy(ctx: PhaseContext) -> None:
        await asyncio.sleep(0.3)

    harness = EngineHarness(
        redis, ScriptedPhase("only", busy), marquees=2, max_concurrent_cycles=1, dry_run=True
    )
    first, second = sorted(await harness.tick(), key=lambda result: result.waited)
    assert first.waited < 0.1
    assert second.waited >= first.duration * 0.9, "it waited for the first one's slot"
    assert second.duration < second.waited + 0.3, "its wait counted in its duration"
    assert 0.3 <= second.duration < 1.0
    for result in (first, second):
        record = result.to_record()
        assert (record["replica"], record["dry_run"]) == ("test-replica", True)
        assert record["waited"] == result.waited


async def test_unhealthy_report_ends_the_cycle_unhealthy_after_every_phase_ran(
    redis: Redis,
) -> None:
    class Unhealthy:
        name = "unhealthy"

        async def __call__(self, ctx: PhaseContext) -> PhaseReport:
            return PhaseReport(unhealthy="playground web unhealthy")

    after = ScriptedPhase("after")
    harness = EngineHarness(redis, Unhealthy(), after)

    result = await harness.cycle()

    assert result.outcome is Outcome.UNHEALTHY
    assert (result.phase, result.reason) == ("unhealthy", "playground web unhealthy")
    assert after.finished == ["m1"]
    assert result.to_record()["outcome"] == "unhealthy"


async def test_a_phase_is_given_the_fleets_rollout_and_windows_from_the_settings(
    redis: Redis,
) -> None:
    seen: list[tuple[object, object]] = []

    async def note(ctx: PhaseContext) -> None:
        seen.append((ctx.rollout_default, tuple(ctx.windows_default)))

    rollout = RolloutPolicy(waves=[1, "100%"], bake=5)
    windows = [Window(kind="allow", cron="0 2 * * *", duration=timedelta(hours=1), timezone="UTC")]
    result = await EngineHarness(
        redis, ScriptedPhase("first", note), rollout=rollout, windows=windows,
        clock=lambda: datetime(2026, 1, 1, 2, 30, tzinfo=UTC).timestamp(),
    ).cycle()  # fmt: skip

    assert result.outcome is Outcome.OK
    assert seen == [(rollout, tuple(windows))]
