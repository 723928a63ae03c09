"""``kits.turns``: a reader's empty turns are paced and end in ``ReaderStalled``; back-off waits."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from playguard_async.kits.turns import Backoff, ReaderStalled, Turns

LEAST = 0.01


class SteppedClock:
    """A clock a test moves by hand: each turn lasts what the test says."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# A turn: (share of ``least`` it took, whether it delivered a message).
turn = st.tuples(st.sampled_from([0.0, 0.3, 0.99, 1.0, 5.0]), st.booleans())


@settings(max_examples=200, deadline=None)
@given(turns=st.lists(turn, max_size=30), stall_after=st.integers(1, 5))
async def test_stalled_exactly_after_stall_after_empty_turns_in_a_row(
    turns: list[tuple[float, bool]], stall_after: int
) -> None:
    clock = SteppedClock()
    pacer = Turns(least=LEAST, stall_after=stall_after, clock=clock)
    in_a_row = 0
    for took, delivered in turns:
        pacer.begin()
        clock.now += took * LEAST
        empty = not delivered and took < 1.0
        in_a_row = in_a_row + 1 if empty else 0
        if in_a_row >= stall_after:
            with pytest.raises(ReaderStalled):
                await pacer.end(delivered=delivered)
            return
        await pacer.end(delivered=delivered)
        assert pacer.empty_in_a_row == in_a_row


async def test_an_empty_turn_waits_out_the_rest_of_least_on_the_loop() -> None:
    """A turn answered "nothing" at once costs at least ``least`` seconds of waiting, so a broken
    reader turns at most once per ``least``."""
    pacer = Turns(least=0.2, stall_after=100)
    loop = asyncio.get_running_loop()
    began = loop.time()
    for _ in range(3):
        pacer.begin()
        await pacer.end(delivered=False)
    assert loop.time() - began >= 3 * 0.2 * 0.9  # the loop's timer may fire a tick early


@pytest.mark.parametrize(("least", "stall_after"), [(0, 3), (-1.0, 3), (1.0, 0), (1.0, -2)])
def test_turns_refuse_settings_that_cannot_pace(least: float, stall_after: int) -> None:
    with pytest.raises(ValueError, match="least"):
        Turns(least=least, stall_after=stall_after)


def test_backoff_doubles_up_to_its_cap_within_the_upper_half() -> None:
    drawn: list[tuple[float, float]] = []

    def draw(low: float, high: float) -> float:
        drawn.append((low, high))
        return high

    backoff = Backoff(first=0.5, cap=8.0, draw=draw)
    waits = [backoff.next_wait() for _ in range(7)]
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert all(low == high / 2 for low, high in drawn)
    backoff.reset()
    assert backoff.next_wait() == 0.5


@given(failures=st.integers(0, 100_000))
def test_backoff_stays_bounded_however_long_the_outage(failures: int) -> None:
    backoff = Backoff(first=0.5, cap=8.0)
    backoff.failures = failures
    ceiling = 8.0 if failures >= 4 else 0.5 * 2**failures
    assert ceiling / 2 <= backoff.next_wait() <= ceiling


@pytest.mark.parametrize(("first", "cap"), [(0, 1), (-1, 1), (2, 1)])
def test_backoff_refuses_settings_without_a_wait(first: float, cap: float) -> None:
    with pytest.raises(ValueError, match="first"):
        Backoff(first=first, cap=cap)
