"""``ServerClock``: a moment of ours on Redis's clock, never later than the truth."""

from __future__ import annotations

import pytest

from playguard_async.coordination.channel import CLOCK_RATE_MARGIN, ServerClock

SERVER_US = 1_796_457_403_222_621


def test_time_answer_read_as_microseconds() -> None:
    clock = ServerClock.from_answer([b"1796457403", b"222621"], 10.0)
    assert clock == ServerClock(SERVER_US, 10.0)


@pytest.mark.parametrize(
    ("after_read", "expected"),
    [
        (0.0, SERVER_US),
        (1.0, SERVER_US + round(1_000_000 * (1 - CLOCK_RATE_MARGIN))),
        (0.5e-6, SERVER_US),  # rounded down, never up
        (2.5, SERVER_US + 2_497_500),
    ],
    ids=["at-the-read", "a-second-on", "half-a-microsecond-on", "two-and-a-half-seconds-on"],
)
def test_stamp_gives_up_the_drift_margin_and_rounds_down(after_read: float, expected: int) -> None:
    assert ServerClock(SERVER_US, 100.0).stamp(100.0 + after_read) == expected
