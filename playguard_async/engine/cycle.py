"""One cycle of one Marquee: take a concurrency slot, then its lease; walk the phases, each under
the lease's deadline and followed by a renewal; end in exactly one classified outcome, releasing
the lease on every way out, cancellation included.

A ``Cycle`` owns what is its alone (its Marquee and desired state, its lease, its result) and the
order of its steps; the steps themselves are the lease's (``engine.cycle_lease``), the phase
walk's (``engine.phase_walk``) and the ending's (``engine.cycle_ending``). What all cycles of a
replica share (settings, Redis, the phases, listeners, the observer, the stop request) it reads
from its ``CycleServices``.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from datetime import UTC, datetime

import structlog

from playguard_async.coordination.lock import Lease
from playguard_async.desired_state.model import Inventory, Marquee
from playguard_async.desired_state.windows import verdict
from playguard_async.engine.cycle_ending import end_cycle
from playguard_async.engine.cycle_lease import catch_up_fence, take_lease
from playguard_async.engine.phase_walk import PhaseWalk
from playguard_async.engine.results import CycleResult, Outcome, one_line
from playguard_async.engine.services import CycleServices

log = structlog.get_logger("playguard.engine")


class Cycle:
    """One cycle of ``marquee`` against ``inventory``, run once: by ``run``, or in a task of its
    own (``start``)."""

    task: asyncio.Task[CycleResult]
    """The task ``start`` runs it in."""

    def __init__(self, services: CycleServices, marquee: Marquee, inventory: Inventory) -> None:
        self.services = services
        self.marquee = marquee
        self.inventory = inventory
        self.settings = services.settings
        self.result = CycleResult(
            marquee=marquee.name,
            cycle_id=secrets.token_hex(6),
            replica=self.settings.replica_id,
            dry_run=self._dry_run(marquee),
        )
        self._offset: asyncio.Future[None] | None = None
        """Done when the start offset ends, at its time or early (``start_now``)."""
        self._begun = False
        """Whether the cycle has a slot and goes on to lock and read ``inventory``."""
        self.lease: Lease | None = None

    def start(self, *, delay: float = 0.0) -> asyncio.Task[CycleResult]:
        """``run`` in a task named after the Marquee (``cycle:<name>``), kept as ``task``."""
        self.task = asyncio.create_task(self.run(delay=delay), name=f"cycle:{self.marquee.name}")
        return self.task

    async def run(self, *, delay: float = 0.0) -> CycleResult:
        """Wait ``delay`` (unless stopping), then lock, walk the phases, end; always ends in
        exactly one classified outcome."""
        result, services = self.result, self.services
        services.observer.cycle_started(result)
        # Tokens, not bound_contextvars, which reads the whole context to restore it.
        context = {
            "marquee": self.marquee.name,
            "cycle": result.cycle_id,
            "replica": self.settings.replica_id,
        }
        if result.trace_id is not None:
            context["trace"] = result.trace_id
        bound = structlog.contextvars.bind_contextvars(**context)
        try:
            try:
                if delay > 0:
                    self._offset = asyncio.get_running_loop().create_future()
                    await services.stopping.sleep(delay, until=self._offset)
                await services.free_slots.acquire()
                self._begun = True
                now = time.monotonic()
                result.waited, result.started = round(now - result.started, 4), now
            except asyncio.CancelledError:
                result.outcome = Outcome.INTERRUPTED
                await end_cycle(services, result, self.lease)
                raise
            try:
                await self._locked()
            finally:
                services.free_slots.release()
        finally:
            structlog.contextvars.reset_contextvars(**bound)
        return result

    def _dry_run(self, marquee: Marquee) -> bool:
        return self.settings.dry_run or marquee.mode == "detect"

    def start_now(self, marquee: Marquee, inventory: Inventory) -> bool:
        """Run from ``inventory``, a wake-up's read of ``marquee`` newer than the one the cycle
        was started from, and now if it still waits out its start offset (up to ``tick_jitter``
        of a tick: a change would wait for it, then for this cycle, then for a follow-up).
        Whether the cycle had not begun; one that has may have read the older state, and the
        caller owes it a follow-up."""
        if self._begun:
            return False
        self.marquee, self.inventory = marquee, inventory
        self.result.dry_run = self._dry_run(marquee)
        if self._offset is not None and not self._offset.done():
            self._offset.set_result(None)
        return True

    async def _locked(self) -> None:
        """Take the lease, walk the phases, end the cycle (the lease's release included) on
        every way out, cancellation too."""
        result, services = self.result, self.services
        try:
            if services.stopping.is_set():
                result.outcome = Outcome.INTERRUPTED
            else:
                result.dry_run = result.dry_run or self._outside_windows()
                self.lease = await take_lease(services, self.marquee, result)
            if self.lease is not None and result.outcome is Outcome.OK:
                result.fence = self.lease.fence
                result.desired = self.inventory.version
                await PhaseWalk(services, self.marquee, self.inventory, result, self.lease).run()
        except asyncio.CancelledError:
            result.outcome = Outcome.INTERRUPTED
            await end_cycle(services, result, self.lease)
            raise
        except Exception as exc:
            # A task's exception nobody retrieves is lost; the cycle's ending never is.
            result.outcome, result.reason = Outcome.ERROR, one_line(exc)
            log.exception("cycle.error")
        await end_cycle(services, result, self.lease)
        lease = self.lease
        if (
            lease is not None
            and result.reason == "fenced"
            and (result.host_fence or 0) >= lease.fence
        ):
            await catch_up_fence(lease.lock, result.host_fence or 0)

    def _outside_windows(self) -> bool:
        """Whether the Marquee's maintenance windows (else the fleet's) keep this cycle from
        changing the host now: it then runs as ``detect``. The answer is the window set's kept
        one until it can change (``windows.verdict``); one croniter cannot give is ``detect``
        too, logged, never the cycle's error."""
        own = self.marquee.windows
        windows = self.settings.windows if own is None else own
        if not windows:
            return False
        found = verdict(windows, datetime.fromtimestamp(self.services.clock(), UTC))
        if found.allowed:
            return False
        if found.error is not None:
            log.error("cycle.windows_unanswered", error=found.error)
        opening = found.opening
        log.info("cycle.outside_windows", opens=None if opening is None else opening.isoformat())
        return True
