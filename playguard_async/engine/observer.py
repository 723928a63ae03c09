"""The engine's observer protocol, which the metrics implement, and the observer of an engine
nobody watches."""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from playguard_async.coordination.lock import LossReason, ReleaseResult
from playguard_async.engine.results import CycleResult


class EngineObserver(Protocol):
    """Told of the moments inside a tick or a cycle that no ``CycleResult`` carries (metrics).

    Calls are synchronous, on the event loop, in the engine's path: an observer must be cheap and
    must not raise. The engine knows observers only by this protocol, so it imports no metrics
    library.
    """

    def tick_started(self, lag: float) -> None:
        """A tick starts ``lag`` seconds after its point on the tick grid."""

    def fleet_shared(self, replicas: int, share: Collection[str]) -> None:
        """A tick found ``replicas`` live replicas (0: not sharing, attempting every Marquee) and
        this one's ``share``: the names of the Marquees it attempts (launchable, mode not
        ``off``), so an observer can forget those that left it."""

    def cycle_started(self, result: CycleResult) -> None:
        """A cycle's task begins, before its start offset and its lease; its log context is
        bound next, so a ``result.trace_id`` set here is on every line the cycle logs and in its
        record. Later calls of the same cycle (renewals, its phase and cycle listeners) run in
        its task's context."""

    def lease_renewing(self, headroom: float) -> None:
        """A lease is about to be renewed with ``headroom`` seconds left before its deadline."""

    def lease_renewal_ended(self, outcome: str) -> None:
        """The renewal ``lease_renewing`` announced has an answer: ``renewed``, ``paused`` (a
        pause held it: renewed, and the cycle stops) or ``lost`` (``lease_lost`` says why)."""

    def lease_lost(self, reason: LossReason) -> None:
        """A renewal failed; no further phase of the cycle runs."""

    def lease_released(self, result: ReleaseResult) -> None:
        """A cycle's lease was released, cancelled cycles included."""


class Unobserved:
    """The observer of an engine nobody watches."""

    def tick_started(self, lag: float) -> None:
        pass

    def fleet_shared(self, replicas: int, share: Collection[str]) -> None:
        pass

    def cycle_started(self, result: CycleResult) -> None:
        pass

    def lease_renewing(self, headroom: float) -> None:
        pass

    def lease_renewal_ended(self, outcome: str) -> None:
        pass

    def lease_lost(self, reason: LossReason) -> None:
        pass

    def lease_released(self, result: ReleaseResult) -> None:
        pass
