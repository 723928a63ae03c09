"""The event loop's lag and holds: the drift arithmetic and the episode logic on a driven clock,
then a real loop held by a blocking call, told once and by name."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable

from structlog.testing import capture_logs

from playguard_async.kits.aio import bounded
from playguard_async.service.loop_health import (
    FRAME_TEXT_LIMIT,
    Beat,
    Held,
    HoldEpisodes,
    LagWindow,
    LoopWatch,
    still_held_after,
    where_held,
)

THIS_FILE = "tests/unit/test_loop_health.py"


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_lag_is_the_worst_drift_of_the_window_then_forgotten() -> None:
    window = LagWindow(window=10.0)
    window.add(Beat(due=1.0, woke=1.001))
    window.add(Beat(due=2.0, woke=4.5))
    window.add(Beat(due=4.75, woke=5.0))
    assert window.worst(5.0) == 2.5
    assert window.worst(14.6) == 0.25, "the long drift woke at 4.5: out of the window at 14.5"
    assert window.worst(30.0) == 0.0


def test_a_timer_that_fires_early_counts_as_no_drift() -> None:
    window = LagWindow()
    window.add(Beat(due=1.0, woke=0.999))
    assert window.worst(1.0) == 0.0


def test_lag_counts_a_beat_still_overdue() -> None:
    clock = Clock()
    watch = LoopWatch(bound=1.0, interval=0.25, clock=clock)
    assert watch.lag() == 0.0
    assert watch.lagging() is None
    clock.now += 0.25 + 2.3  # the beat due a quarter second from now has not come back
    assert round(watch.lag(), 6) == 2.3
    assert watch.lagging() == "event loop lagging 2.3 s (bound 1 s)"


def where_sampled(frames: tuple[str, ...]) -> tuple[Callable[[], tuple[str, ...]], list[int]]:
    """A stack sampler that answers ``frames``, and the count of its samples."""
    calls: list[int] = []

    def sample() -> tuple[str, ...]:
        calls.append(1)
        return frames

    return sample, calls


def test_a_hold_seen_while_it_lasts_is_told_once_when_it_ends_with_its_stack() -> None:
    episodes = HoldEpisodes(bound=1.0, still_after=10.0)
    sample, samples = where_sampled(("spin (redis/asyncio/client.py:10)",))
    due = 0.25
    told = [episodes.look(now, due, None, sample) for now in (0.5, 1.0, 1.5, 2.0, 2.25)]
    back = Beat(due=due, woke=2.4)
    told += [episodes.look(now, 2.65, back, sample) for now in (2.5, 2.75)]
    assert told[:-2] == [None] * 5
    assert told[-2:] == [Held(back.drift, ("spin (redis/asyncio/client.py:10)",), ended=True), None]
    assert len(samples) == 1, "the stack is sampled once, when the hold is noticed"


def test_a_hold_between_two_looks_is_told_without_a_stack() -> None:
    episodes = HoldEpisodes(bound=1.0, still_after=10.0)
    sample, samples = where_sampled(("never",))
    assert episodes.look(0.3, 0.25, None, sample) is None
    told = episodes.look(2.0, 1.9, Beat(due=0.25, woke=1.65), sample)
    assert told == Held(1.4, (), ended=True)
    assert samples == []


def test_a_long_hold_is_told_once_while_it_lasts_and_once_when_it_ends() -> None:
    episodes = HoldEpisodes(bound=1.0, still_after=10.0)
    sample, _ = where_sampled(("block (app.py:3)",))
    due = 0.25
    looks = [episodes.look(due + 0.25 * n, due, None, sample) for n in range(1, 200)]
    told = [held for held in looks if held is not None]
    assert len(told) == 1
    assert not told[0].ended
    assert told[0].seconds >= 10.0
    assert told[0].where == ("block (app.py:3)",)
    back = Beat(due=due, woke=59.95)
    assert episodes.look(60.0, 60.2, back, sample) == Held(back.drift, told[0].where, ended=True)


def test_a_loop_that_wakes_within_the_bound_is_never_told() -> None:
    episodes = HoldEpisodes(bound=1.0, still_after=10.0)
    sample, samples = where_sampled(("never",))
    last = None
    for n in range(100):
        due = 0.25 + n * 1.15
        assert episodes.look(due + 0.9, due, last, sample) is None
        last = Beat(due=due, woke=due + 0.9)
    assert samples == []


def test_the_beat_just_back_is_not_taken_for_a_hold() -> None:
    """The loop wrote its last beat and not yet the next one's due: the due read is that of
    the beat already back."""
    episodes = HoldEpisodes(bound=1.0, still_after=10.0)
    sample, samples = where_sampled(("never",))
    assert episodes.look(5.0, 0.25, Beat(due=0.25, woke=0.3), sample) is None
    assert samples == []


def test_a_long_hold_is_told_before_systemds_watchdog_would_restart_the_process() -> None:
    assert still_held_after(1.0) == 10.0
    assert still_held_after(30.0) == 30.0
    assert still_held_after(0.1) >= 0.1


def test_where_names_the_innermost_functions_relative_to_the_path() -> None:
    def inner() -> tuple[str, ...]:
        return where_held(sys._getframe(), limit=2)

    where = inner()
    assert len(where) == 2
    assert where[0].startswith(
        "test_where_names_the_innermost_functions_relative_to_the_path.<locals>.inner "
        f"({THIS_FILE}:"
    )
    assert where[1].startswith(
        f"test_where_names_the_innermost_functions_relative_to_the_path ({THIS_FILE}:"
    )
    assert all(len(frame) <= FRAME_TEXT_LIMIT for frame in where)


def hold_the_loop(seconds: float) -> None:
    time.sleep(seconds)  # the defect: a blocking call on the event loop


async def test_a_loop_held_by_a_blocking_call_is_told_once_naming_the_call() -> None:
    loop = asyncio.get_running_loop()
    told = asyncio.Event()
    held: list[int] = []

    def on_held() -> None:  # on the watchdog's thread
        held.append(1)
        loop.call_soon_threadsafe(told.set)

    watch = LoopWatch(bound=0.3, interval=0.05, on_held=on_held)
    with capture_logs() as logs:
        async with watch.running():
            await asyncio.sleep(0.2)
            loop.call_soon(hold_the_loop, 1.5)  # 5 bounds
            await bounded(10, told.wait())
            assert watch.lag() > watch.bound
            assert (watch.lagging() or "").startswith("event loop lagging ")
            await asyncio.sleep(0.2)
    lines = [line for line in logs if line["event"].startswith("loop.")]
    assert len(lines) == 1, lines
    assert lines[0]["event"] == "loop.held"
    assert lines[0]["held_seconds"] > 0.3
    assert lines[0]["where"][0].startswith(f"hold_the_loop ({THIS_FILE}:")
    assert held == [1]


async def test_a_loop_that_is_not_held_tells_nothing_and_its_watchdog_ends_with_it() -> None:
    held: list[int] = []
    watch = LoopWatch(bound=1.0, interval=0.02, on_held=lambda: held.append(1))
    with capture_logs() as logs:
        async with watch.running():
            for _ in range(25):
                await asyncio.sleep(0.02)
            assert "loop-watchdog" in {thread.name for thread in threading.enumerate()}
    assert [line for line in logs if line["event"].startswith("loop.")] == []
    assert held == []
    assert "loop-watchdog" not in {thread.name for thread in threading.enumerate()}
