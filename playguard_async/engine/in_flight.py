"""The cycles running in one replica: at most one per Marquee, each started in a task of its own;
one woken while in a cycle owed a single follow-up when that cycle ends; all of them drained
within the grace on a stop, or cancelled at once on a second.

Apart from the tick loop (``engine.scheduler``), which decides which Marquees to cycle and when,
because what happens to a cycle once started (its end, what it is owed, its stop) is the same
whoever started it: a tick, a wake-up, a follow-up or ``playguard cycle``.
"""

from __future__ import annotations

import asyncio

import structlog

from playguard_async.coordination.replicas import ReplicaRoster
from playguard_async.desired_state.model import Inventory, Marquee
from playguard_async.engine.cycle import Cycle
from playguard_async.engine.desired_reads import DesiredStateReads
from playguard_async.engine.results import CycleResult
from playguard_async.engine.services import CycleServices

log = structlog.get_logger("playguard.engine")


class CyclesInFlight:
    """The cycles ``services`` runs here; follow-ups from ``reads``' newest state, for Marquees
    ``roster`` still gives this replica."""

    def __init__(
        self, services: CycleServices, reads: DesiredStateReads, roster: ReplicaRoster
    ) -> None:
        self.services = services
        self.reads = reads
        self.roster = roster
        self.cycles: dict[str, Cycle] = {}
        """Marquee -> its cycle running here (in ``Cycle.task``), which a wake-up may start early
        (``wake``)."""
        self._follow_ups: set[str] = set()
        """Marquees woken while in a cycle here: each gets one more cycle when that one ends."""

    def start(
        self, marquee: Marquee, inventory: Inventory, *, delay: float = 0.0
    ) -> asyncio.Task[CycleResult]:
        cycle = Cycle(self.services, marquee, inventory)
        task = cycle.start(delay=delay)
        self.cycles[marquee.name] = cycle
        task.add_done_callback(self._cycle_ended)
        return task

    def wake(self, marquee: Marquee, inventory: Inventory) -> asyncio.Task[CycleResult] | None:
        """A cycle of ``marquee`` from ``inventory`` (a wake-up's read) now: a new one, or the one
        here that has not begun, started early (``Cycle.start_now``); None when one has begun
        here, which may have read the older state: it is owed one follow-up cycle when it ends
        (however many wake-ups come meanwhile)."""
        running = self.cycles.get(marquee.name)
        if running is None:
            return self.start(marquee, inventory)
        if running.start_now(marquee, inventory):
            return running.task
        self._follow_ups.add(marquee.name)
        return None

    def _cycle_ended(self, task: asyncio.Task[CycleResult]) -> None:
        """Forget the cycle; log at once one that raised instead of ending in a classified outcome
        (a bug), since nobody awaits a tick's cycles before the drain."""
        name = task.get_name().removeprefix("cycle:")
        running = self.cycles.get(name)
        if running is not None and running.task is task:
            del self.cycles[name]
            if name in self._follow_ups:
                self._follow_ups.discard(name)
                self._follow_up(name)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("cycle.crashed", marquee=name, error=repr(error), exc_info=error)

    def _follow_up(self, name: str) -> None:
        """The one cycle owed to a Marquee woken during its last one, from the newest desired
        state (read by that wake-up or since); none once stopping, or if the Marquee is no longer
        this replica's to run."""
        if self.services.stopping.is_set() or self.reads.inventory is None:
            return
        marquee, inventory = self.reads.newest(name, self.reads.inventory)
        if marquee is not None and marquee.runs_cycles and self.roster.owns(name):
            log.info("engine.follow_up", marquee=name)
            self.start(marquee, inventory)

    def cancel_all(self) -> None:
        """Cancel every running cycle at once (a second stop request)."""
        for running in self.cycles.values():
            running.task.cancel()

    async def drain(self) -> None:
        """Let running cycles reach a phase boundary within the grace, then cancel the rest."""
        cycles = list(self.cycles.values())
        running = [cycle.task for cycle in cycles]
        if running:
            _, late = await asyncio.wait(running, timeout=self.services.settings.shutdown_grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
        # Those never begun are not logged one by one (a backlog is thousands): counted here.
        not_begun = sum(cycle.result.interrupted_before_start for cycle in cycles)
        log.info("engine.stopped", drained=len(running), not_begun=not_begun)
