"""A cycle's walk through the phases under its lease: each phase with its context and the
cycle's remote session (opened on first use), under the lease's deadline, classified as it ends
(deadline, fenced, unreachable, failed), reported, told to the phase listeners, then the renewal.

Apart from the cycle's lease (``engine.cycle_lease``) and ending (``engine.cycle_ending``): this
is the one place the engine calls a phase.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Mapping
from typing import Any

import structlog

from playguard_async.coordination.fence import FenceRefused
from playguard_async.coordination.lock import Lease
from playguard_async.coordination.pause import HeldByPause
from playguard_async.cycle_record import read_through
from playguard_async.desired_state.model import Inventory, Marquee
from playguard_async.engine.cycle_lease import LeaseWatch, pause_from_host, paused, renew_after
from playguard_async.engine.results import CycleResult, Outcome
from playguard_async.engine.services import CycleServices
from playguard_async.phases.protocol import (
    PartialFailure,
    Phase,
    PhaseContext,
    PhaseReport,
    RemoteView,
)
from playguard_async.remote.reach import Unreachable

log = structlog.get_logger("playguard.engine")


class _CycleRemote:
    """The cycle's remote session, opened on first use so phases that need none cost nothing.
    In the first cycle of the Marquee in this process, the pauses its host keeps a copy of are
    read as it opens, before any phase can change the host (``cycle_lease.pause_from_host``):
    one that holds ends the cycle ``paused`` (``HeldByPause``)."""

    def __init__(
        self,
        services: CycleServices,
        marquee: Marquee,
        lease: Lease,
        stack: contextlib.AsyncExitStack,
        result: CycleResult,
    ) -> None:
        self._services = services
        self._opener = services.open_session
        self._marquee = marquee
        self._lease = lease
        self._stack = stack
        self._result = result
        self._session: RemoteView | None = None

    async def __call__(self) -> RemoteView:
        if self._session is None:
            if self._opener is None:
                raise RuntimeError("no remote layer is configured for this engine")
            self._session = await self._stack.enter_async_context(
                self._opener(
                    self._marquee,
                    self._lease,
                    self._result.dry_run,
                    self._result.cycle_id,
                    read_through(self._result.desired),
                )
            )
            if self._services.pauses.host_read_due(self._marquee.name):
                await pause_from_host(self._services, self._marquee, self._result, self._session)
        return self._session

    @property
    def host_fence(self) -> int | None:
        return None if self._session is None else self._session.host_fence

    def recorded(self) -> int:
        """How many actions the session has recorded so far (none before it is opened)."""
        return 0 if self._session is None else len(self._session.actions)

    def recorded_since(self, mark: int) -> list[str]:
        """The actions the session recorded after ``mark`` (an earlier ``recorded()``)."""
        return [] if self._session is None else list(self._session.actions[mark:])


class PhaseWalk:
    """The phases of one cycle of ``marquee`` against ``inventory`` under ``lease``, walked once
    (``run``); what they did and how they ended goes into ``result``."""

    def __init__(
        self,
        services: CycleServices,
        marquee: Marquee,
        inventory: Inventory,
        result: CycleResult,
        lease: Lease,
    ) -> None:
        self.services = services
        self.marquee = marquee
        self.inventory = inventory
        self.result = result
        self.lease = lease
        self._unhealthy: tuple[str, str] | None = None
        """The first phase that reported something unhealthy, and why."""

    async def run(self) -> None:
        # Bound with tokens and restored once (bench/README.md: the engine's log context). The
        # fence stays bound while the session closes; each phase's name only while phases run.
        result, lease, services = self.result, self.lease, self.services
        walk = structlog.contextvars.bind_contextvars(fence=lease.fence)
        try:
            async with contextlib.AsyncExitStack() as stack:
                remote = _CycleRemote(services, self.marquee, lease, stack, result)
                watch = LeaseWatch(lease)
                before_phases: Mapping[str, contextvars.Token[Any]] | None = None
                try:
                    for phase in services.phases:
                        if services.stopping.is_set():
                            result.outcome = Outcome.INTERRUPTED
                            return
                        ctx: PhaseContext[RemoteView] = PhaseContext(
                            marquee=self.marquee,
                            inventory=self.inventory,
                            log=log.bind(phase=phase.name),
                            dry_run=result.dry_run,
                            lease=lease,
                            remote=remote,
                            rollout_default=services.settings.rollout,
                            windows_default=services.settings.windows,
                            versions_mixed=services.fleet_versions.mixed,
                            tells=services.tells,
                        )
                        bound = structlog.contextvars.bind_contextvars(phase=phase.name)
                        before_phases = bound if before_phases is None else before_phases
                        if not await self._run_phase(phase, ctx, remote, watch):
                            return
                    if self._unhealthy is not None:
                        result.outcome = Outcome.UNHEALTHY
                        result.phase, result.reason = self._unhealthy
                finally:
                    watch.close()
                    if before_phases is not None:
                        structlog.contextvars.reset_contextvars(**before_phases)
                    result.host_fence = remote.host_fence
        finally:
            structlog.contextvars.reset_contextvars(**walk)

    async def _run_phase(
        self,
        phase: Phase[Any],
        ctx: PhaseContext[RemoteView],
        remote: _CycleRemote,
        watch: LeaseWatch,
    ) -> bool:
        """One phase under the lease's deadline, then the renewal; False ends the cycle."""
        lease, result = ctx.lease, self.result
        started = time.monotonic()
        mark = remote.recorded()
        report = await self._before_deadline(watch, lease, phase.name, phase(ctx))
        result.durations[phase.name] = round(time.monotonic() - started, 4)
        if report is not None:
            self._record_report(phase.name, report, remote.recorded_since(mark))
            if report.unhealthy is not None and self._unhealthy is None:
                self._unhealthy = (phase.name, report.unhealthy)
        self._phase_ended(phase.name)
        if result.outcome is not Outcome.OK:
            return False
        last = phase is self.services.phases[-1]
        return await renew_after(self.services, self.marquee, result, lease, phase.name, last=last)

    def _record_report(self, phase: str, report: PhaseReport, session_actions: list[str]) -> None:
        """What the phase did (its session's actions, then any it reports itself), found and
        asks an operator to look at."""
        result = self.result
        if taken := [*session_actions, *report.actions]:
            result.actions[phase] = taken
        if report.findings:
            result.findings[phase] = dict(report.findings)
        if report.notices:
            result.notices[phase] = [notice.to_json() for notice in report.notices]

    def _phase_ended(self, phase: str) -> None:
        for listener in self.services.phase_listeners:
            try:
                listener(self.result, phase)
            except Exception:
                log.exception("phase.listener_failed")

    async def _before_deadline(self, watch: LeaseWatch, lease: Lease, step: str, work: Any) -> Any:
        """Await ``work`` but no later than the lease's deadline (``watch``); classify how it
        ended."""
        result = self.result
        if lease.remaining() <= 0:
            # A lapsed lease (the process stalled after Redis answered): awaiting would still run
            # the work's first steps, up to its first await, before the watch could cancel it.
            if asyncio.iscoroutine(work):
                work.close()
            result.outcome, result.phase = Outcome.DEADLINE, step
            log.error("phase.deadline", headroom=round(lease.remaining(), 3), started=False)
            return None
        watch.phase_started()
        try:
            return await work
        except asyncio.CancelledError:
            if not watch.phase_ended():
                raise
            result.outcome, result.phase = Outcome.DEADLINE, step
            log.error("phase.deadline", headroom=round(lease.remaining(), 3))
        except FenceRefused as exc:
            # The host itself refused the write: it accepted a newer lease. Not ours any more.
            self.services.observer.lease_lost("fenced")
            result.outcome, result.phase, result.reason = Outcome.LOCK_LOST, step, "fenced"
            result.host_fence = exc.host_fence
            log.error("lock.fenced", fence=exc.fence, host_fence=exc.host_fence, why=exc.why)
        except HeldByPause as exc:
            # Before the phase could change the host: the cycle ends as at its start.
            paused(result, exc.pause)
        except Unreachable as exc:
            # The host, not the phase that happened to open the connection: no phase is blamed.
            result.outcome, result.reason = Outcome.UNREACHABLE, exc.reason
        except Exception as exc:
            result.outcome, result.phase, result.reason = Outcome.PHASE_FAILED, step, repr(exc)
            log.exception("phase.failed")
            if isinstance(exc, PartialFailure):
                return exc.report
        finally:
            watch.phase_ended()  # a phase that swallowed the cancel: withdrawn all the same
        return None
