"""Prometheus metrics of one replica, in a registry of its own.

A registry per ``Metrics`` (not prometheus-client's global one) keeps the exposition to what this
module defines, and lets tests and in-process engines each have theirs. The engine never imports
this module: the daemon hands a ``Metrics`` to it as its ``EngineObserver`` and feeds finished
cycles in through a cycle listener.
"""

from __future__ import annotations

import math
import platform
import typing
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping

from aiohttp.typedefs import Handler
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.aiohttp import make_aiohttp_handler
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from playguard_async import __version__
from playguard_async.coordination.lock import LossReason, ReleaseResult
from playguard_async.cycle_record import RolloutFinding
from playguard_async.desired_state.model import Inventory
from playguard_async.engine.results import CycleResult
from playguard_async.phases.rollout_desk import scope_of
from playguard_async.service.http_connections import REFUSALS
from playguard_async.service.loop_health import LAG_WINDOW
from playguard_async.service.marquee_metrics import MarqueeSeries
from playguard_async.service.rollout_metrics import RolloutSeries

# Every counter and histogram would also carry a ``_created`` series: when this process made it,
# which no alert or graph here reads.
disable_created_metrics()  # type: ignore[no-untyped-call]

PHASE_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
"""Phases range from a cheap "nothing to do" (milliseconds) to image pulls (minutes)."""

TICK_LAG_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0)
"""A healthy tick starts within milliseconds of its grid point; seconds mean a starved loop."""

GONE_PLAYSPEC = "-"
"""The ``playspec`` label of rollbacks of a Playground no longer in the desired state."""

HEADROOM_SHARES = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
"""Lease headroom buckets as shares of the lock's ttl: "how close did a phase come to the lease's
end" reads the same whatever ttl a deployment chose."""


class Metrics:
    """The counters, gauges and histograms of one replica; an ``EngineObserver`` for the engine.

    Known label values (every outcome, loss reason and release result) start at zero, so a rate or
    an alert on them works before the first occurrence.
    """

    def __init__(self, *, outcomes: Iterable[str], lock_ttl: float, marquees_shown: int) -> None:
        outcomes = list(outcomes)
        self.registry = CollectorRegistry(auto_describe=True)
        # Memory growth, open files and restarts (process_start_time_seconds), and the version
        # running: what the custom registry dropped of prometheus-client's defaults.
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        Info(
            "playguard_build", "The playguard version and Python running.", registry=self.registry
        ).info({"version": __version__, "python": platform.python_version()})
        self.cycles = Counter(
            "playguard_cycles",
            "Cycles finished, by outcome (locked: another replica held the Marquee).",
            ["outcome"],
            registry=self.registry,
        )
        self.rollbacks = Counter(
            "playguard_rollbacks",
            "Playgrounds rolled back to their last good state, by Playspec.",
            ["playspec"],
            registry=self.registry,
        )
        self._rolled_back: set[str] = set()
        """The Playspecs ``rollbacks`` has a series of."""
        self._desired: Callable[[], Inventory | None] = lambda: None
        self._desired_names: tuple[Inventory | None, frozenset[str], frozenset[str]] = (
            None, frozenset(), frozenset(),
        )  # fmt: skip
        """The desired state last pruned by, its Playspecs and its rollout scopes."""
        self.rollouts = RolloutSeries(self.registry)
        self.lock_lost = Counter(
            "playguard_lock_lost",
            "Leases lost, by reason: at renewal (expired, stolen, unreachable), or because the "
            "host refused a write (fenced).",
            ["reason"],
            registry=self.registry,
        )
        self.lock_releases = Counter(
            "playguard_lock_releases",
            "Lease releases, by what the release found (released, expired, stolen, unknown).",
            ["result"],
            registry=self.registry,
        )
        self.phase_duration = Histogram(
            "playguard_phase_duration_seconds",
            "Seconds each phase took, failed and deadline-cut phases included.",
            ["phase"],
            buckets=PHASE_BUCKETS,
            registry=self.registry,
        )
        self.tick_lag = Histogram(
            "playguard_tick_lag_seconds",
            "Seconds a tick started after its point on the tick grid.",
            buckets=TICK_LAG_BUCKETS,
            registry=self.registry,
        )
        self.lease_headroom = Histogram(
            "playguard_lease_headroom_seconds",
            "Seconds left on a lease just before it was renewed.",
            buckets=tuple(round(lock_ttl * share, 3) for share in HEADROOM_SHARES),
            registry=self.registry,
        )
        self.cycles_in_flight = Gauge(
            "playguard_cycles_in_flight",
            "Cycles started and not yet finished (waiting for their start offset or a slot, too).",
            registry=self.registry,
        )
        self.replicas = Gauge(
            "playguard_replicas",
            "Live replicas sharing the fleet at the last tick (0: not sharing, Redis unreadable, "
            "so this one attempts every Marquee).",
            registry=self.registry,
        )
        self.marquees_assigned = Gauge(
            "playguard_marquees_assigned",
            "Launchable Marquees this replica attempted at the last tick (its share of the fleet).",
            registry=self.registry,
        )
        self.event_loop_held = Counter(
            "playguard_event_loop_held",
            "Times the event loop was held (woke later than asked) past loop_lag_bound; each is "
            "one loop.held log line naming what held it.",
            registry=self.registry,
        )
        self.http_connections_refused = Counter(
            "playguard_http_connections_refused",
            "Connections to the HTTP server closed as soon as accepted, by the cap they met: "
            "connections_total (http_connections_max) or connections_per_client.",
            ["reason"],
            registry=self.registry,
        )
        self.http_connections = Gauge(
            "playguard_http_connections",
            "Connections the HTTP server holds now.",
            registry=self.registry,
        )
        self.marquee_series = MarqueeSeries(outcomes=outcomes, shown=marquees_shown)
        self.registry.register(self.marquee_series)
        for outcome in outcomes:
            self.cycles.labels(outcome)
        for reason in typing.get_args(LossReason):
            self.lock_lost.labels(reason)
        for result in ReleaseResult:
            self.lock_releases.labels(result.value)
        for reason in REFUSALS:
            self.http_connections_refused.labels(reason)

    def follow_desired_state(self, desired: Callable[[], Inventory | None]) -> None:
        """At every tick, forget the ``playspec`` and ``rollout`` labels the desired state in force
        (``desired``) no longer has: those labels then number at most what it holds."""
        self._desired = desired

    def _forget_what_left(self) -> None:
        inventory = self._desired()
        if inventory is None:
            return
        known, playspecs, scopes = self._desired_names
        if inventory is not known:  # names computed once per desired state read
            playspecs = frozenset(playspec.name for playspec in inventory.playspecs)
            scopes = frozenset(scope_of(playground) for playground in inventory.playgrounds)
            self._desired_names = (inventory, playspecs, scopes)
        for gone in self._rolled_back - playspecs - {GONE_PLAYSPEC}:
            self.rollbacks.remove(gone)
            self._rolled_back.discard(gone)
        self.rollouts.keep_only(scopes)

    def count_in_flight(self, cycles: Callable[[], int]) -> None:
        """Read the gauge of cycles in flight from ``cycles`` at every scrape."""
        self.cycles_in_flight.set_function(cycles)

    def watch_spans_lost(self, dropped: Callable[[], int], unexported: Callable[[], int]) -> None:
        """Gauges read at every scrape: the trace spans lost since start, by why."""
        self.registry.register(
            CountedElsewhere(
                "playguard_trace_spans_lost",
                "Trace spans lost since start: dropped (the export queue was full: the endpoint "
                "down or slow) or unexported (the endpoint refused or never answered their "
                "export).",
                {"dropped": dropped, "unexported": unexported},
                label="reason",
            )
        )

    def watch_redis(self, down: Callable[[], bool]) -> None:
        """A gauge read at every scrape: whether this replica's last call to Redis was answered
        (``coordination.outage``); the one series a Redis outage alert needs, per replica."""
        gauge = Gauge(
            "playguard_redis_up",
            "1 while this replica's last call to Redis was answered, 0 while Redis does not "
            "answer it (every cycle then ends redis_unavailable).",
            registry=self.registry,
        )
        gauge.set_function(lambda: 0.0 if down() else 1.0)

    def watch_event_loop(self, lag: Callable[[], float]) -> None:
        """A gauge read at every scrape: the event loop's lag (``service.loop_health``)."""
        gauge = Gauge(
            "playguard_event_loop_lag_seconds",
            f"The worst lateness of the event loop's wake-ups over the last {LAG_WINDOW:g} s; "
            "above loop_lag_bound, something holds the loop (and /readyz answers 503).",
            registry=self.registry,
        )
        gauge.set_function(lag)

    def watch_desired_state_loaded(self, loaded: Callable[[], bool]) -> None:
        """A gauge read at every scrape: whether the engine has a desired state to cycle on."""
        gauge = Gauge(
            "playguard_desired_state_loaded",
            "1 while a desired state is in force; 0 while none could be read since start (a "
            "database out of reach): no cycles run until one is.",
            registry=self.registry,
        )
        gauge.set_function(lambda: float(loaded()))

    def watch_audit_checkpoints(self, age: Callable[[], float | None]) -> None:
        """A gauge read at every scrape: how old this replica's newest checkpoint of the change
        log is (NaN while it takes none)."""
        gauge = Gauge(
            "playguard_audit_checkpoint_age_seconds",
            "PostgreSQL with audit_checkpoint_file only: seconds since this replica last "
            "checkpointed the change log (since start before its first); NaN without checkpoints.",
            registry=self.registry,
        )
        gauge.set_function(lambda: _gauge_value(age()))

    def watch_desired_state(
        self,
        reachable: Callable[[], bool | None],
        age: Callable[[], float | None],
        write_failures: Callable[[], int],
    ) -> None:
        """Gauges of a desired state behind a network, read at every scrape: whether its last
        read reached it (NaN before the first) and the age of the snapshot in force."""
        reachable_gauge = Gauge(
            "playguard_desired_state_reachable",
            "1 when the last read of the desired state (PostgreSQL) reached it, else 0.",
            registry=self.registry,
        )
        age_gauge = Gauge(
            "playguard_desired_state_snapshot_age_seconds",
            "Seconds since the last good snapshot of the desired state (the one in force).",
            registry=self.registry,
        )
        self.registry.register(
            CountedElsewhere(
                "playguard_observed_state_write_failures",
                "Observed-state writes back to the database that failed since start (never "
                "rises in a healthy replica).",
                {"": write_failures},
            )
        )
        reachable_gauge.set_function(lambda: _gauge_value(reachable()))
        age_gauge.set_function(lambda: _gauge_value(age()))

    def watch_http_connections(self, held: Callable[[], int]) -> None:
        """Read the gauge of HTTP connections held from ``held`` at every scrape."""
        self.http_connections.set_function(held)

    def http_connection_refused(self, reason: str) -> None:
        self.http_connections_refused.labels(reason).inc()

    def event_loop_was_held(self) -> None:
        """The event loop was held past its bound once more (called from the watchdog's
        thread: prometheus-client's counters take their own lock)."""
        self.event_loop_held.inc()

    def rollout_seen(self, scope: str, finding: RolloutFinding) -> None:
        """A cycle took part in ``scope``'s rollout (its reconcile_playgrounds finding)."""
        self.rollouts.seen(scope, finding)

    def rolled_back(self, playspec: str) -> None:
        """A Playground of ``playspec`` was rolled back to its last good state."""
        self.rollbacks.labels(playspec).inc()
        self._rolled_back.add(playspec)

    def cycle_finished(self, outcome: str, durations: Mapping[str, float]) -> None:
        self.cycles.labels(outcome).inc()
        for phase, seconds in durations.items():
            self.phase_duration.labels(phase).observe(seconds)

    def marquee_finished(
        self,
        marquee: str,
        outcome: str,
        health: str | None,
        finished_at: float,
        *,
        mode: str,
        rolled_back: bool,
    ) -> None:
        """A cycle of ``marquee`` ended; ``health`` is what it says of the Marquee (``ok``,
        ``drifted`` (a dry run that found changes: the cycle itself succeeded), ``failing``,
        ``paused``, or None when it says nothing: another replica held it, we stopped)."""
        self.marquee_series.finished(
            marquee, outcome, health, finished_at, mode=mode, rolled_back=rolled_back
        )

    def handler(self) -> Handler:
        """An aiohttp handler serving this registry in the Prometheus text (or OpenMetrics) form."""
        return make_aiohttp_handler(self.registry)

    # -- EngineObserver ----------------------------------------------------------------------

    def tick_started(self, lag: float) -> None:
        self.tick_lag.observe(max(0.0, lag))

    def fleet_shared(self, replicas: int, share: Collection[str]) -> None:
        self.replicas.set(replicas)
        self.marquees_assigned.set(len(share))
        self.marquee_series.keep_only(share)
        self._forget_what_left()

    def cycle_started(self, result: CycleResult) -> None:
        pass  # counted as it ends (``cycle_finished``)

    def lease_renewing(self, headroom: float) -> None:
        self.lease_headroom.observe(headroom)

    def lease_renewal_ended(self, outcome: str) -> None:
        pass  # a loss is counted in ``lease_lost``

    def lease_lost(self, reason: LossReason) -> None:
        self.lock_lost.labels(reason).inc()

    def lease_released(self, result: ReleaseResult) -> None:
        self.lock_releases.labels(result.value).inc()


class CountedElsewhere(Collector):
    """A counter whose count another object keeps (the span exporter, the observed-state
    writer), read at each scrape: exported as the counter it is (``NAME_total``; it only grows,
    so ``rate`` and ``increase`` apply), not as a gauge. ``counts`` maps each value of ``label``
    to its count; with no label, one count under the key ``""``."""

    def __init__(
        self,
        name: str,
        documentation: str,
        counts: Mapping[str, Callable[[], int]],
        *,
        label: str | None = None,
    ) -> None:
        self._name, self._documentation = name, documentation
        self._counts, self._label = dict(counts), label

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            self._name, self._documentation, labels=[self._label] if self._label else None
        )
        for value, count in self._counts.items():
            family.add_metric([value] if self._label else [], float(count()))
        yield family


def _gauge_value(value: bool | float | None) -> float:
    return math.nan if value is None else float(value)
