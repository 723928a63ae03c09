"""The fleet's rollouts as this replica's cycles saw them, for Prometheus: the wave each is in,
whether it is halted, and the failures this replica's cycles counted.

Labelled by scope (``playspec@branch``), whose number grows with branches: only the
``ROLLOUTS_SHOWN`` most recently seen are kept, so a scrape stays bounded; a scope dropped comes
back at its next cycle. A scope no Playground of the desired state has any more (its Playspec
deleted, its branch changed) is forgotten at the next tick (``keep_only``): a halted rollout's
gauge goes, and its alert resolves. Every replica exports what its own cycles saw: the wave and
halt of a scope agree across replicas within a tick, and the failures add up across them
(``sum by (rollout)``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection

from prometheus_client import CollectorRegistry, Counter, Gauge

from playguard_async.cycle_record import RolloutFinding

ROLLOUTS_SHOWN = 100
"""Scopes a replica exports at most (the most recently seen)."""


class RolloutSeries:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.wave = Gauge(
            "playguard_rollout_wave",
            "The wave a rollout is in (1-based), as this replica's last cycle of it saw.",
            ["rollout"],
            registry=registry,
        )
        self.halted = Gauge(
            "playguard_rollout_halted",
            "1 while a rollout is halted (its failures passed max_failures), else 0.",
            ["rollout"],
            registry=registry,
        )
        self.failed = Counter(
            "playguard_rollout_failed",
            "Marquees whose release failed in a rollout, counted by this replica's cycles.",
            ["rollout"],
            registry=registry,
        )
        self._seen: OrderedDict[str, None] = OrderedDict()

    def seen(self, scope: str, finding: RolloutFinding) -> None:
        self._seen[scope] = None
        self._seen.move_to_end(scope)
        self.wave.labels(scope).set(finding["wave"])
        self.halted.labels(scope).set(1 if finding["status"] == "halted" else 0)
        failed = self.failed.labels(scope)
        if finding["failed_here"]:
            failed.inc()
        while len(self._seen) > ROLLOUTS_SHOWN:
            dropped, _ = self._seen.popitem(last=False)
            self._forget(dropped)

    def keep_only(self, scopes: Collection[str]) -> None:
        """Forget every scope not in ``scopes`` (those of the desired state in force)."""
        for scope in [scope for scope in self._seen if scope not in scopes]:
            del self._seen[scope]
            self._forget(scope)

    def _forget(self, scope: str) -> None:
        for series in (self.wave, self.halted, self.failed):
            series.remove(scope)
