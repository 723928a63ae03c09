"""Metrics: names, labels and buckets as documented, in a registry of their own."""

from __future__ import annotations

import platform

import pytest
from prometheus_client import REGISTRY, generate_latest

import playguard_async
from playguard_async.coordination.lock import ReleaseResult
from playguard_async.engine.results import Outcome
from playguard_async.service.metrics import Metrics


@pytest.fixture
def metrics() -> Metrics:
    return Metrics(
        outcomes=[outcome.value for outcome in Outcome], lock_ttl=100.0, marquees_shown=100
    )


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_known_label_values_start_at_zero(metrics: Metrics) -> None:
    for outcome in Outcome:
        assert value(metrics, "playguard_cycles_total", outcome=outcome.value) == 0
    for reason in ("expired", "stolen", "unreachable"):
        assert value(metrics, "playguard_lock_lost_total", reason=reason) == 0
    for result in ReleaseResult:
        assert value(metrics, "playguard_lock_releases_total", result=result.value) == 0


def test_finished_cycle_counts_its_outcome_and_each_phase_duration(metrics: Metrics) -> None:
    metrics.cycle_finished("ok", {"sync_git": 0.2, "pull_images": 42.0})
    metrics.cycle_finished("locked", {})
    assert value(metrics, "playguard_cycles_total", outcome="ok") == 1
    assert value(metrics, "playguard_cycles_total", outcome="locked") == 1
    assert value(metrics, "playguard_phase_duration_seconds_count", phase="sync_git") == 1
    assert value(metrics, "playguard_phase_duration_seconds_sum", phase="pull_images") == 42.0
    assert (
        value(metrics, "playguard_phase_duration_seconds_bucket", phase="pull_images", le="30.0")
        == 0
    )


def test_engine_moments_reach_their_metrics(metrics: Metrics) -> None:
    metrics.tick_started(0.003)
    metrics.lease_renewing(97.5)
    metrics.lease_lost("stolen")
    metrics.lease_released(ReleaseResult.STOLEN)
    assert value(metrics, "playguard_tick_lag_seconds_bucket", le="0.005") == 1
    assert value(metrics, "playguard_lease_headroom_seconds_bucket", le="90.0") == 0
    assert value(metrics, "playguard_lease_headroom_seconds_bucket", le="100.0") == 1
    assert value(metrics, "playguard_lock_lost_total", reason="stolen") == 1
    assert value(metrics, "playguard_lock_releases_total", result="stolen") == 1


def test_headroom_buckets_are_shares_of_the_lock_ttl() -> None:
    text = generate_latest(
        Metrics(outcomes=["ok"], lock_ttl=900.0, marquees_shown=100).registry
    ).decode()
    for bound in ("45.0", "90.0", "225.0", "450.0", "675.0", "810.0", "900.0"):
        assert f'playguard_lease_headroom_seconds_bucket{{le="{bound}"}} 0.0' in text


def test_cycles_in_flight_are_read_at_scrape_time(metrics: Metrics) -> None:
    running = {"alpha", "beta"}
    metrics.count_in_flight(lambda: len(running))
    assert value(metrics, "playguard_cycles_in_flight") == 2
    running.clear()
    assert value(metrics, "playguard_cycles_in_flight") == 0


def test_event_loop_lag_is_read_at_scrape_time_and_holds_are_counted_from_zero(
    metrics: Metrics,
) -> None:
    lag = [0.004]
    metrics.watch_event_loop(lambda: lag[-1])
    assert value(metrics, "playguard_event_loop_lag_seconds") == 0.004
    assert value(metrics, "playguard_event_loop_held_total") == 0
    lag.append(2.5)
    metrics.event_loop_was_held()
    assert value(metrics, "playguard_event_loop_lag_seconds") == 2.5
    assert value(metrics, "playguard_event_loop_held_total") == 1


def test_registry_is_its_own_not_the_global_one(metrics: Metrics) -> None:
    metrics.cycle_finished("ok", {})
    assert REGISTRY.get_sample_value("playguard_cycles_total", {"outcome": "ok"}) is None
    second = Metrics(
        outcomes=["ok"], lock_ttl=1.0, marquees_shown=100
    )  # a second one in the same process is fine
    assert value(second, "playguard_cycles_total", outcome="ok") == 0


Cycle = tuple[str, str | None, bool]
"""One finished cycle of a Marquee: its outcome, the health it says, whether it rolled back."""

OK: Cycle = ("ok", "ok", False)
FAILED: Cycle = ("phase_failed", "failing", False)
LOCKED: Cycle = ("locked", None, False)


def finish(metrics: Metrics, marquee: str, cycles: list[Cycle], *, mode: str = "apply") -> None:
    for at, (outcome, health, rolled_back) in enumerate(cycles, start=1):
        metrics.marquee_finished(
            marquee, outcome, health, float(at), mode=mode, rolled_back=rolled_back
        )


def shown(metrics: Metrics) -> dict[str, dict[str, str]]:
    """Each Marquee that has a series of its own: its labels and the cycles it was not ok."""
    families = {family.name: family for family in metrics.registry.collect()}
    return {
        sample.labels["marquee"]: {**sample.labels, "cycles": str(int(sample.value))}
        for sample in families["playguard_marquee_not_ok"].samples
    }


@pytest.mark.parametrize(
    ("cycles", "expected"),
    [
        pytest.param([OK, OK], None, id="ok: counted only"),
        pytest.param([OK, FAILED], ("failing", "phase_failed", 1), id="fails"),
        pytest.param(
            [FAILED, ("deadline", "failing", False)],
            ("failing", "deadline", 2),
            id="fails twice: the last outcome",
        ),
        pytest.param([FAILED, OK], None, id="ok again: gone"),
        pytest.param(
            [("unhealthy", "failing", False)], ("failing", "unhealthy", 1), id="unhealthy"
        ),
        pytest.param([FAILED, LOCKED], ("failing", "locked", 2), id="locked says nothing new"),
        pytest.param([OK, LOCKED, LOCKED], None, id="locked twice: a hand-over"),
        pytest.param([OK, LOCKED, LOCKED, LOCKED], ("locked", "locked", 1), id="locked too long"),
        pytest.param([LOCKED, LOCKED, LOCKED, OK], None, id="locked, then ok: gone"),
        pytest.param([OK, ("ok", "ok", True)], ("rolled_back", "ok", 1), id="rolled back"),
        pytest.param([("ok", "ok", True), OK], None, id="rolled back, then ok: gone"),
        pytest.param([OK, ("paused", "paused", False)], ("paused", "paused", 1), id="held"),
        pytest.param([("paused", "paused", False), OK], None, id="released: gone"),
        pytest.param([("ok", "drifted", False)], ("drifted", "ok", 1), id="drifted"),
        pytest.param(
            [("ok", "release_pending", False)], ("release_pending", "ok", 1), id="release pending"
        ),
        pytest.param([OK, ("interrupted", None, False)], None, id="interrupted says nothing"),
    ],
)
def test_a_marquee_has_series_only_while_it_is_not_ok(
    metrics: Metrics, cycles: list[Cycle], expected: tuple[str, str, int] | None
) -> None:
    finish(metrics, "fine", [OK])
    finish(metrics, "m1", cycles)
    series = shown(metrics)
    assert "fine" not in series
    if expected is None:
        assert series == {}
        assert (
            value(metrics, "playguard_marquee_last_success_timestamp_seconds", marquee="m1") is None
        )
        return
    reason, outcome, in_a_row = expected
    assert series == {
        "m1": {"marquee": "m1", "reason": reason, "outcome": outcome, "cycles": str(in_a_row)}
    }
    assert value(metrics, "playguard_marquees_not_ok", reason=reason) == 1
    succeeded = [
        at
        for at, cycle in enumerate(cycles, start=1)
        if cycle[1] in ("ok", "drifted", "release_pending")
    ]
    last_success = value(metrics, "playguard_marquee_last_success_timestamp_seconds", marquee="m1")
    assert last_success == (float(succeeded[-1]) if succeeded else None)


def test_fleet_counts_follow_each_marquees_last_cycle(metrics: Metrics) -> None:
    for number in range(998):
        finish(metrics, f"m{number}", [OK])
    finish(metrics, "failing", [OK, FAILED])
    finish(metrics, "held", [("paused", "paused", False)], mode="detect")
    assert value(metrics, "playguard_marquees", outcome="ok") == 998
    assert value(metrics, "playguard_marquees", outcome="phase_failed") == 1
    assert value(metrics, "playguard_marquees", outcome="paused") == 1
    assert value(metrics, "playguard_marquees", outcome="locked") == 0
    assert value(metrics, "playguard_marquees_by_health", health="ok") == 998
    assert value(metrics, "playguard_marquees_by_health", health="failing") == 1
    assert value(metrics, "playguard_marquees_by_health", health="paused") == 1
    assert value(metrics, "playguard_marquees_by_mode", mode="apply") == 999
    assert value(metrics, "playguard_marquees_by_mode", mode="detect") == 1
    assert value(metrics, "playguard_marquees_by_mode", mode="off") == 0
    assert value(metrics, "playguard_marquees_not_ok", reason="failing") == 1
    assert value(metrics, "playguard_marquees_not_ok", reason="paused") == 1
    finish(metrics, "failing", [OK])
    assert value(metrics, "playguard_marquees", outcome="ok") == 999
    assert value(metrics, "playguard_marquees", outcome="phase_failed") == 0
    assert value(metrics, "playguard_marquees_not_ok", reason="failing") == 0


def test_marquees_shown_are_capped_longest_not_ok_first() -> None:
    metrics = Metrics(outcomes=["ok", "phase_failed"], lock_ttl=10.0, marquees_shown=2)
    finish(metrics, "once", [FAILED])
    finish(metrics, "thrice", [FAILED, FAILED, FAILED])
    finish(metrics, "twice-b", [FAILED, FAILED])
    finish(metrics, "twice-a", [FAILED, FAILED])
    assert sorted(shown(metrics)) == ["thrice", "twice-a"]
    assert value(metrics, "playguard_marquees_not_ok_unshown") == 2
    assert value(metrics, "playguard_marquees_not_ok", reason="failing") == 4
    finish(metrics, "thrice", [OK])
    assert sorted(shown(metrics)) == ["twice-a", "twice-b"]
    assert value(metrics, "playguard_marquees_not_ok_unshown") == 1


def test_no_marquee_is_shown_with_a_cap_of_zero() -> None:
    metrics = Metrics(outcomes=["ok", "phase_failed"], lock_ttl=10.0, marquees_shown=0)
    finish(metrics, "m1", [FAILED])
    assert shown(metrics) == {}
    assert value(metrics, "playguard_marquees_not_ok_unshown") == 1


def test_marquees_that_left_the_share_are_forgotten_at_the_next_tick(metrics: Metrics) -> None:
    finish(metrics, "stays", [FAILED])
    finish(metrics, "moved", [FAILED])
    finish(metrics, "gone", [OK], mode="detect")
    metrics.fleet_shared(2, frozenset({"stays", "new"}))
    assert sorted(shown(metrics)) == ["stays"]
    assert value(metrics, "playguard_marquees_assigned") == 2
    assert value(metrics, "playguard_marquees", outcome="phase_failed") == 1
    assert value(metrics, "playguard_marquees", outcome="ok") == 0
    assert value(metrics, "playguard_marquees_by_health", health="failing") == 1
    assert value(metrics, "playguard_marquees_by_mode", mode="detect") == 0
    assert value(metrics, "playguard_marquees_not_ok", reason="failing") == 1
    finish(metrics, "moved", [FAILED])  # back in the share: counted from its first cycle again
    assert shown(metrics)["moved"]["cycles"] == "1"


def test_series_do_not_grow_with_marquees_that_are_ok() -> None:
    def series(fleet: int) -> int:
        metrics = Metrics(outcomes=["ok"], lock_ttl=10.0, marquees_shown=100)
        for number in range(fleet):
            finish(metrics, f"m{number}", [OK])
        return sum(len(family.samples) for family in metrics.registry.collect())

    assert series(10) == series(1000)


def test_no_created_series(metrics: Metrics) -> None:
    metrics.cycle_finished("ok", {"sync_git": 0.1})
    assert "_created" not in generate_latest(metrics.registry).decode()


def test_trace_spans_lost_are_read_at_each_scrape(metrics: Metrics) -> None:
    lost = {"dropped": 0, "unexported": 0}
    metrics.watch_spans_lost(lambda: lost["dropped"], lambda: lost["unexported"])
    assert value(metrics, "playguard_trace_spans_lost_total", reason="dropped") == 0
    lost |= {"dropped": 7, "unexported": 2}
    assert value(metrics, "playguard_trace_spans_lost_total", reason="dropped") == 7
    assert value(metrics, "playguard_trace_spans_lost_total", reason="unexported") == 2


def test_counts_kept_elsewhere_are_counters_ending_in_total(metrics: Metrics) -> None:
    metrics.watch_spans_lost(lambda: 3, lambda: 1)
    metrics.watch_desired_state(lambda: True, lambda: 1.0, lambda: 2)
    kinds = {family.name: family.type for family in metrics.registry.collect()}
    assert kinds["playguard_trace_spans_lost"] == "counter"
    assert kinds["playguard_observed_state_write_failures"] == "counter"
    assert value(metrics, "playguard_observed_state_write_failures_total") == 2
    exposed = generate_latest(metrics.registry).decode()
    assert "# TYPE playguard_trace_spans_lost_total counter" in exposed
    assert "# TYPE playguard_observed_state_write_failures_total counter" in exposed


@pytest.mark.parametrize(("down", "up"), [(False, 1.0), (True, 0.0)])
def test_redis_up_follows_the_outage_watch(metrics: Metrics, down: bool, up: float) -> None:
    metrics.watch_redis(lambda: down)
    assert value(metrics, "playguard_redis_up") == up


def test_build_info_and_the_process_collector_are_exported(metrics: Metrics) -> None:
    assert (
        value(
            metrics,
            "playguard_build_info",
            version=playguard_async.__version__,
            python=platform.python_version(),
        )
        == 1
    )
    assert (value(metrics, "process_start_time_seconds") or 0) > 0
    assert (value(metrics, "process_resident_memory_bytes") or 0) > 0
