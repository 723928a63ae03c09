"""The engine's observer hook (what metrics are fed from) against the lab's real redis-server: every
renewal with its headroom, every loss, every release (a cancelled cycle's too), every tick's lag."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

import pytest
from redis.asyncio import Redis

from playguard_async.coordination.keys import marquee_lock_key
from playguard_async.coordination.lock import LossReason, ReleaseResult
from playguard_async.engine.results import CycleResult, Outcome
from playguard_async.phases.protocol import PhaseContext
from tests.support.engine import EngineHarness, ScriptedPhase

pytestmark = pytest.mark.integration

TTL = 30.0


class Recorder:
    """An EngineObserver that keeps what it was told, in order."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, Any]] = []
        self.renewals: list[str] = []
        """How each renewal ended, apart from ``heard``."""

    def tick_started(self, lag: float) -> None:
        self.heard.append(("tick", lag))

    def fleet_shared(self, replicas: int, share: Collection[str]) -> None:
        self.heard.append(("shared", (replicas, tuple(sorted(share)))))

    def cycle_started(self, result: CycleResult) -> None:
        pass

    def lease_renewing(self, headroom: float) -> None:
        self.heard.append(("renewing", headroom))

    def lease_renewal_ended(self, outcome: str) -> None:
        self.renewals.append(outcome)

    def lease_lost(self, reason: LossReason) -> None:
        self.heard.append(("lost", reason))

    def lease_released(self, result: ReleaseResult) -> None:
        self.heard.append(("released", result))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.heard]


def observed_engine(
    redis: Redis, *phases: ScriptedPhase, **settings: Any
) -> tuple[EngineHarness, Recorder]:
    recorder = Recorder()
    return EngineHarness(redis, *phases, observer=recorder, lock_ttl=TTL, **settings), recorder


async def test_every_renewal_is_heard_with_its_headroom_then_the_release(redis: Redis) -> None:
    harness, recorder = observed_engine(redis, ScriptedPhase("first"), ScriptedPhase("second"))
    assert (await harness.cycle()).outcome is Outcome.OK
    assert recorder.kinds() == ["renewing", "renewing", "released"]
    assert recorder.renewals == ["renewed", "renewed"]
    headrooms = [value for kind, value in recorder.heard if kind == "renewing"]
    assert all(TTL * 0.9 < headroom < TTL for headroom in headrooms), headrooms
    assert recorder.heard[-1] == ("released", ReleaseResult.RELEASED)


async def test_a_stolen_lease_is_heard_as_lost_and_its_release_as_stolen(redis: Redis) -> None:
    async def steal(ctx: PhaseContext) -> None:
        await redis.set(marquee_lock_key("m1"), "intruder")

    harness, recorder = observed_engine(redis, ScriptedPhase("first", steal))
    assert (await harness.cycle()).outcome is Outcome.LOCK_LOST
    assert recorder.heard[1:] == [("lost", "stolen"), ("released", ReleaseResult.STOLEN)]


async def test_a_cancelled_cycles_release_is_still_heard(redis: Redis) -> None:
    entered = asyncio.Event()

    async def hang(ctx: PhaseContext) -> None:
        entered.set()
        await asyncio.Event().wait()

    harness, recorder = observed_engine(redis, ScriptedPhase("first", hang))
    cycle = asyncio.create_task(harness.cycle())
    await entered.wait()
    cycle.cancel()
    await asyncio.gather(cycle, return_exceptions=True)
    for _ in range(100):  # the release runs on in its own task after the cancel
        if recorder.heard:
            break
        await asyncio.sleep(0.01)
    assert recorder.heard == [("released", ReleaseResult.RELEASED)]
    assert await redis.exists(marquee_lock_key("m1")) == 0


async def test_each_tick_is_heard_with_how_late_it_started(redis: Redis) -> None:
    harness, recorder = observed_engine(redis, tick_interval=0.2)
    running = asyncio.create_task(harness.engine.run())
    try:
        for _ in range(100):
            if recorder.kinds().count("tick") >= 3:
                break
            await asyncio.sleep(0.02)
    finally:
        harness.engine.request_stop()
        await running
    lags = [value for kind, value in recorder.heard if kind == "tick"]
    assert len(lags) >= 3
    assert all(lag < 0.1 for lag in lags), lags  # late by far less than an interval
    shares = {value for kind, value in recorder.heard if kind == "shared"}
    assert shares == {(1, ("m1",))}, "alone, the replica attempts its whole fleet of one"
