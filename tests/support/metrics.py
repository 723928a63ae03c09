"""A daemon's metrics with every series it can export present: what the rules, the dashboard and
README's metrics table are checked against."""

from __future__ import annotations

from playguard_async.cycle_record import RolloutFinding
from playguard_async.engine.results import Outcome
from playguard_async.service.metrics import Metrics


def with_every_series() -> Metrics:
    """``Metrics`` as the daemon builds them, with the optional PostgreSQL and tracing series
    watched and one of each labelled series that starts empty."""
    metrics = Metrics(
        outcomes=[outcome.value for outcome in Outcome], lock_ttl=300.0, marquees_shown=100
    )
    metrics.count_in_flight(lambda: 0)
    metrics.watch_desired_state_loaded(lambda: True)
    metrics.watch_desired_state(lambda: True, lambda: 1.0, lambda: 0)
    metrics.watch_audit_checkpoints(lambda: 1.0)
    metrics.watch_event_loop(lambda: 0.0)
    metrics.watch_spans_lost(lambda: 0, lambda: 0)
    metrics.watch_redis(lambda: False)
    metrics.cycle_finished("ok", {"sync_git": 0.1})
    metrics.rolled_back("web")
    metrics.marquee_finished("m1", "ok", "ok", 1.0, mode="apply", rolled_back=False)
    metrics.marquee_finished("m1", "phase_failed", "failing", 2.0, mode="apply", rolled_back=False)
    metrics.rollout_seen(
        "web@main",
        RolloutFinding(
            status="halted", wave=1, waves=3, release="r", held=False, failed_here=True,
            halted_here="max_failures",
        ),
    )  # fmt: skip
    return metrics
