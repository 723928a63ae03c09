"""The tick grid: no drift, late ticks skipped, never a burst."""

from __future__ import annotations

import pytest

from playguard_async.engine.scheduler import next_tick_after


def test_on_time_tick_moves_one_interval() -> None:
    assert next_tick_after(100.0, 100.4, 1.0) == (101.0, 0)


def test_tick_time_does_not_drift_the_grid() -> None:
    scheduled = 0.0
    for now in (0.3, 1.9, 2.05, 3.99):
        scheduled, _ = next_tick_after(scheduled, now, 1.0)
    assert scheduled == 4.0


@pytest.mark.parametrize(("now", "expected"), [(101.0, (102.0, 1)), (103.5, (104.0, 3))])
def test_late_tick_skips_missed_points(now: float, expected: tuple[float, int]) -> None:
    assert next_tick_after(100.0, now, 1.0) == expected
