"""The liveness test behind /healthz and systemd's watchdog, as a function of the clock."""

from __future__ import annotations

import pytest

from playguard_async.service.liveness import Liveness, loop_alive


@pytest.mark.parametrize(
    ("now", "alive"),
    [(100.0, True), (160.0, True), (220.0, True), (220.001, False), (1000.0, False)],
)
def test_loop_is_alive_while_the_last_tick_is_at_most_two_intervals_old(
    now: float, alive: bool
) -> None:
    assert loop_alive(now, last_tick=100.0, interval=60.0) is alive


def liveness(last_tick: float | None, *, draining: bool = False) -> Liveness:
    return Liveness(
        interval=10.0, last_tick=lambda: last_tick, draining=lambda: draining, since=1000.0
    )


def test_before_the_first_tick_age_counts_from_the_start() -> None:
    assert liveness(None).check(now=1015.0).alive
    stalled = liveness(None).check(now=1021.0)
    assert (stalled.alive, stalled.age) == (False, 21.0)


def test_a_stalled_loop_says_how_old_its_last_tick_is() -> None:
    pulse = liveness(1100.0).check(now=1130.5)
    assert not pulse.alive
    assert pulse.describe() == "tick loop stalled, last tick 30.5 s ago (limit 20 s)"
    assert liveness(1100.0).check(now=1101.0).describe() == (
        "ticking, last tick 1.0 s ago (limit 20 s)"
    )


def test_a_draining_engine_stopped_ticking_on_purpose_and_counts_as_alive() -> None:
    pulse = liveness(1100.0, draining=True).check(now=1500.0)
    assert pulse.alive
    assert pulse.describe().startswith("draining")
