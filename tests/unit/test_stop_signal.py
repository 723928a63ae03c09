"""kits.aio.StopSignal: sleeps that end at their time or when the daemon stops, whichever is first,
and leave nothing behind either way (a tick's share of start offsets is one sleep per cycle)."""

from __future__ import annotations

import asyncio
import time

import pytest

from playguard_async.kits.aio import StopSignal


async def test_a_sleep_lasts_its_time_while_the_signal_is_not_set() -> None:
    signal = StopSignal()
    started = time.monotonic()
    await signal.sleep(0.05)
    assert time.monotonic() - started >= 0.04
    assert not signal.is_set()


@pytest.mark.parametrize("seconds", [0.0, -1.0, 0.01, 3600.0, float("inf")])
async def test_setting_the_signal_wakes_every_sleeper_at_once(seconds: float) -> None:
    signal = StopSignal()
    sleepers = [asyncio.create_task(signal.sleep(seconds)) for _ in range(100)]
    sleepers.append(asyncio.create_task(signal.wait()))
    await asyncio.sleep(0)
    signal.set()
    async with asyncio.timeout(1.0):
        await asyncio.gather(*sleepers)
    assert signal.is_set()
    assert not signal._sleepers


@pytest.mark.parametrize("seconds", [0.0, 3600.0, float("inf")])
async def test_once_set_a_sleep_returns_at_once(seconds: float) -> None:
    signal = StopSignal()
    signal.set()
    async with asyncio.timeout(1.0):
        await signal.sleep(seconds)
        await signal.wait()
    assert not signal._sleepers


async def test_sleeps_that_end_or_are_cancelled_leave_no_sleeper_and_no_live_timer() -> None:
    signal = StopSignal()
    loop = asyncio.get_running_loop()
    ended = [asyncio.create_task(signal.sleep(0.001 * n)) for n in range(1000)]
    cancelled = [asyncio.create_task(signal.sleep(3600.0)) for _ in range(1000)]
    await asyncio.gather(*ended)
    for task in cancelled:
        task.cancel()
    results = await asyncio.gather(*cancelled, return_exceptions=True)
    assert all(isinstance(result, asyncio.CancelledError) for result in results)
    assert not signal._sleepers
    timers = getattr(loop, "_scheduled", [])  # the default loop's heap; uvloop keeps its own
    assert not [timer for timer in timers if not timer.cancelled() and timer.when() > loop.time()]


async def test_a_cancel_that_comes_as_the_signal_is_set_is_not_swallowed() -> None:
    signal = StopSignal()
    sleeper = asyncio.create_task(signal.sleep(3600.0))
    await asyncio.sleep(0)
    signal.set()
    sleeper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sleeper


async def test_a_sleep_ends_early_when_its_own_future_is_done_and_no_other() -> None:
    signal = StopSignal()
    loop = asyncio.get_running_loop()
    early: asyncio.Future[None] = loop.create_future()
    mine = asyncio.create_task(signal.sleep(3600.0, until=early))
    other = asyncio.create_task(signal.sleep(3600.0))
    await asyncio.sleep(0)

    early.set_result(None)
    async with asyncio.timeout(1.0):
        await mine
    await asyncio.sleep(0.01)

    assert not other.done()
    assert not signal.is_set()
    other.cancel()
    await asyncio.gather(other, return_exceptions=True)
    assert not signal._sleepers
