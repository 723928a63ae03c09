"""Metrics: names, labels and buckets as documented, in a registry of their own."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY, generate_latest

from playguard_async.coordination.lock import ReleaseResult
from playguard_async.engine.results import Outcome
from playguard_async.service.metrics import Metrics


@pytest.fixture
def metrics() -> Metrics:
    return Metrics(outcomes=[outcome.value for outcome in Outcome], lock_ttl=100.0)


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
    text = generate_latest(Metrics(outcomes=["ok"], lock_ttl=900.0).registry).decode()
    for bound in ("45.0", "90.0", "225.0", "450.0", "675.0", "810.0", "900.0"):
        assert f'playguard_lease_headroom_seconds_bucket{{le="{bound}"}} 0.0' in text


def test_cycles_in_flight_are_read_at_scrape_time(metrics: Metrics) -> None:
    running = {"alpha", "beta"}
    metrics.count_in_flight(lambda: len(running))
    assert value(metrics, "playguard_cycles_in_flight") == 2
    running.clear()
    assert value(metrics, "playguard_cycles_in_flight") == 0


def test_registry_is_its_own_not_the_global_one(metrics: Metrics) -> None:
    metrics.cycle_finished("ok", {})
    assert REGISTRY.get_sample_value("playguard_cycles_total", {"outcome": "ok"}) is None
    second = Metrics(outcomes=["ok"], lock_ttl=1.0)  # a second one in the same process is fine
    assert value(second, "playguard_cycles_total", outcome="ok") == 0


def test_per_marquee_metrics_follow_its_health(metrics: Metrics) -> None:
    for outcome, health, at in [
        ("ok", "ok", 100.0),
        ("phase_failed", "failing", 160.0),
        ("locked", None, 200.0),
        ("deadline", "failing", 220.0),
    ]:
        metrics.marquee_finished("m1", outcome, health, at)
    assert value(metrics, "playguard_marquee_last_success_timestamp_seconds", marquee="m1") == 100
    assert value(metrics, "playguard_marquee_consecutive_failures", marquee="m1") == 2
    last = {"marquee": "m1", "playguard_marquee_last_outcome": "deadline"}
    assert value(metrics, "playguard_marquee_last_outcome", **last) == 1
    metrics.marquee_finished("m1", "ok", "ok", 280.0)
    assert value(metrics, "playguard_marquee_consecutive_failures", marquee="m1") == 0
    assert value(metrics, "playguard_marquee_last_success_timestamp_seconds", marquee="m1") == 280


def test_no_created_series(metrics: Metrics) -> None:
    metrics.cycle_finished("ok", {"sync_git": 0.1})
    assert "_created" not in generate_latest(metrics.registry).decode()
