"""One cycle of one Marquee: take a concurrency slot, then its lease; walk the phases, each under
the lease's deadline and followed by a renewal; end in exactly one classified outcome, releasing
the lease on every way out, cancellation included.

A ``Cycle`` owns what is its alone (its Marquee and desired state, its lease, its result, its
remote session and its deadline watch); what all cycles of a replica share (settings, Redis, the
phases, listeners, the observer, the stop request) it reads from its ``CycleCrew``, the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.cycle_end import CycleEnd, Ending, Resume
from playguard_async.coordination.fence import FenceRefused
from playguard_async.coordination.keys import marquee_lock_name, pause_key
from playguard_async.coordination.lock import (
    Lease,
    LockHeld,
    LockLost,
    LockUnavailable,
    TokenLock,
)
from playguard_async.coordination.outage import RedisOutage
from playguard_async.coordination.pause import FleetPauseWatch, Pause
from playguard_async.coordination.records import CycleRecords
from playguard_async.desired_state.model import Inventory, Marquee
from playguard_async.desired_state.windows import verdict
from playguard_async.engine.observer import EngineObserver
from playguard_async.engine.results import (
    CycleListener,
    CycleResult,
    Outcome,
    PhaseListener,
    one_line,
)
from playguard_async.kits.aio import StopSignal, detached
from playguard_async.phases.protocol import (
    PartialFailure,
    Phase,
    PhaseContext,
    PhaseReport,
    RemoteView,
)
from playguard_async.remote.reach import Unreachable
from playguard_async.settings import Settings

log = structlog.get_logger("playguard.engine")


class SessionOpener(Protocol):
    """Opens the remote session of one cycle under its lease (whose fence goes with every write);
    entered on a phase's first ``ctx.remote()`` call. ``dry_run`` is the cycle's own (the
    settings', the Marquee's mode, a plan): the session records its changes instead of making
    them. The phases it serves take the session's own type; the engine reads only its
    ``RemoteView``."""

    def __call__(
        self, marquee: Marquee, lease: Lease, dry_run: bool
    ) -> AbstractAsyncContextManager[RemoteView]: ...


class CycleCrew(Protocol):
    """What the cycles of one replica share: the engine, read at each use, so that a listener or
    a session opener set on the engine reaches the next cycle."""

    @property
    def settings(self) -> Settings: ...

    @property
    def redis(self) -> RedisClient: ...

    @property
    def phases(self) -> Sequence[Phase[Any]]: ...

    @property
    def open_session(self) -> SessionOpener | None: ...

    @property
    def listeners(self) -> Sequence[CycleListener]: ...

    @property
    def phase_listeners(self) -> Sequence[PhaseListener]: ...

    @property
    def observer(self) -> EngineObserver: ...

    @property
    def records(self) -> CycleRecords | None: ...

    @property
    def redis_outage(self) -> RedisOutage: ...

    @property
    def stopping(self) -> StopSignal: ...

    @property
    def free_slots(self) -> asyncio.Semaphore: ...

    @property
    def ending(self) -> CycleEnd: ...

    @property
    def fleet_pause(self) -> FleetPauseWatch: ...

    @property
    def clock(self) -> Callable[[], float]:
        """Wall-clock time (Unix seconds) for maintenance windows; a test injects its own."""
        ...


class _CycleRemote:
    """The cycle's remote session, opened on first use so phases that need none cost nothing."""

    def __init__(
        self,
        opener: SessionOpener | None,
        marquee: Marquee,
        lease: Lease,
        stack: contextlib.AsyncExitStack,
        dry_run: bool,
    ) -> None:
        self._opener = opener
        self._marquee = marquee
        self._lease = lease
        self._stack = stack
        self._dry_run = dry_run
        self._session: RemoteView | None = None

    async def __call__(self) -> RemoteView:
        if self._session is None:
            if self._opener is None:
                raise RuntimeError("no remote layer is configured for this engine")
            self._session = await self._stack.enter_async_context(
                self._opener(self._marquee, self._lease, self._dry_run)
            )
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


class _LeaseWatch:
    """Cancels the cycle's task when a phase is still running at its lease's deadline.

    One timer per cycle, not a timeout scope per phase, which cost more than it guarded
    (bench/README.md: the lease watch). A phase arms the timer at the lease's deadline if none
    is armed. A renewal only moves the deadline later, so a timer that fires before it re-arms
    at the new one; a timer that fires between phases (during a renewal, which has a bound of its
    own) disarms, and the next phase arms it again. Its cancellation is told apart from any
    other as ``asyncio.timeout`` tells it: by the task's count of cancel requests."""

    def __init__(self, lease: Lease) -> None:
        task = asyncio.current_task()
        assert task is not None, "a cycle runs in a task"
        self._task = task
        self._lease = lease
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        self._in_phase = False
        self._cancelled = False
        self._cancelling = 0

    def phase_started(self) -> None:
        self._in_phase = True
        if self._timer is None:
            self._arm()

    def phase_ended(self) -> bool:
        """Whether the deadline cut the phase short, no other cancellation besides: the
        timer's cancel request is then withdrawn. Once per cut; False on later calls."""
        self._in_phase = False
        if not self._cancelled:
            return False
        self._cancelled = False
        return self._task.uncancel() <= self._cancelling

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self) -> None:
        deadline = self._loop.time() + self._lease.remaining()
        self._timer = self._loop.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if not self._in_phase:
            return
        if self._lease.remaining() > 0:  # renewed since the timer was armed
            self._arm()
            return
        self._cancelled, self._cancelling = True, self._task.cancelling()
        self._task.cancel()


class Cycle:
    """One cycle of ``marquee`` against ``inventory``, run once: by ``run``, or in a task of its
    own (``start``)."""

    task: asyncio.Task[CycleResult]
    """The task ``start`` runs it in."""

    def __init__(self, crew: CycleCrew, marquee: Marquee, inventory: Inventory) -> None:
        self.crew = crew
        self.marquee = marquee
        self.inventory = inventory
        self.settings = crew.settings
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
        self._unhealthy: tuple[str, str] | None = None
        """The first phase that reported something unhealthy, and why."""

    def start(self, *, delay: float = 0.0) -> asyncio.Task[CycleResult]:
        """``run`` in a task named after the Marquee (``cycle:<name>``), kept as ``task``."""
        self.task = asyncio.create_task(self.run(delay=delay), name=f"cycle:{self.marquee.name}")
        return self.task

    async def run(self, *, delay: float = 0.0) -> CycleResult:
        """Wait ``delay`` (unless stopping), then lock, walk the phases, end; always ends in
        exactly one classified outcome."""
        result = self.result
        # Tokens, not bound_contextvars, which reads the whole context to restore it.
        bound = structlog.contextvars.bind_contextvars(
            marquee=self.marquee.name, cycle=result.cycle_id, replica=self.settings.replica_id
        )
        try:
            try:
                if delay > 0:
                    self._offset = asyncio.get_running_loop().create_future()
                    await self.crew.stopping.sleep(delay, until=self._offset)
                await self.crew.free_slots.acquire()
                self._begun = True
                now = time.monotonic()
                result.waited, result.started = round(now - result.started, 4), now
            except asyncio.CancelledError:
                result.outcome = Outcome.INTERRUPTED
                await self._end()
                raise
            try:
                await self._locked()
            finally:
                self.crew.free_slots.release()
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
        result = self.result
        try:
            if self.crew.stopping.is_set():
                result.outcome = Outcome.INTERRUPTED
            else:
                result.dry_run = result.dry_run or self._outside_windows()
                self.lease = await self._acquire_unless_paused()
            if self.lease is not None and result.outcome is Outcome.OK:
                result.fence = self.lease.fence
                await self._walk_phases(self.lease)
        except asyncio.CancelledError:
            result.outcome = Outcome.INTERRUPTED
            await self._end()
            raise
        except Exception as exc:
            # A task's exception nobody retrieves is lost; the cycle's ending never is.
            result.outcome, result.reason = Outcome.ERROR, one_line(exc)
            log.exception("cycle.error")
        await self._end()
        lease = self.lease
        if (
            lease is not None
            and result.reason == "fenced"
            and (result.host_fence or 0) >= lease.fence
        ):
            await self._catch_up_fence(lease.lock, result.host_fence or 0)

    async def _acquire_unless_paused(self) -> Lease | None:
        """The Marquee's lease (``_acquire``) unless a pause holds it back: its own pause is read
        by the acquisition's script, which then takes nothing; the fleet's comes from the
        replica's ``FleetPauseWatch``, whose read, when one is due, goes out in the acquisition's
        batch. Either way checking costs a cycle no round trip of its own. Paused, the outcome is
        ``paused`` and no phase runs: a lease taken meanwhile is released by the ending like any
        other, and the cycle is not recorded (``left_alone``)."""
        fleet = self.crew.fleet_pause
        reading = fleet.refresh()
        if reading is None and fleet.pause is not None:
            self._paused(fleet.pause)
            return None
        lease = await self._acquire()
        pause = fleet.pause if reading is None else await fleet.settled(reading)
        if pause is not None:
            self._paused(pause)
        return lease

    def _outside_windows(self) -> bool:
        """Whether the Marquee's maintenance windows (else the fleet's) keep this cycle from
        changing the host now: it then runs as ``detect``. The answer is the window set's kept
        one until it can change (``windows.verdict``); one croniter cannot give is ``detect``
        too, logged, never the cycle's error."""
        own = self.marquee.windows
        windows = self.settings.windows if own is None else own
        if not windows:
            return False
        found = verdict(windows, datetime.fromtimestamp(self.crew.clock(), UTC))
        if found.allowed:
            return False
        if found.error is not None:
            log.error("cycle.windows_unanswered", error=found.error)
        opening = found.opening
        log.info("cycle.outside_windows", opens=None if opening is None else opening.isoformat())
        return True

    def _paused(self, pause: Pause, phase: str | None = None) -> None:
        """End the cycle ``paused``: at its start, or after ``phase``."""
        self.result.outcome, self.result.reason = Outcome.PAUSED, pause.describe()
        self.result.phase = phase
        log.info("marquee.paused", scope=pause.scope, by=pause.by, until=pause.until)

    async def _acquire(self) -> Lease | None:
        """The Marquee's lease, or None with the outcome that says why not."""
        settings, result = self.settings, self.result
        lock = TokenLock(
            self.crew.redis,
            marquee_lock_name(self.marquee.name),
            ttl=settings.lock_ttl,
            timeout=settings.redis_socket_timeout,
            replica=settings.replica_id,
            min_replicas=settings.lock_min_replicas,
            replica_timeout=settings.lock_replica_timeout,
            hold_key=pause_key(self.marquee.name),
        )
        try:
            lease = await lock.acquire()
        except LockHeld as exc:
            self.crew.redis_outage.answered()
            self._paused(Pause.from_held(self.marquee.name, exc))
            return None
        except LockUnavailable as exc:
            result.outcome = Outcome.REDIS_UNAVAILABLE
            result.reason = one_line(exc.__cause__ or exc)
            self.crew.redis_outage.failed(result.reason)
            return None
        self.crew.redis_outage.answered()
        if lease is None:
            log.info("marquee.locked")
            result.outcome = Outcome.LOCKED
        return lease

    @staticmethod
    async def _catch_up_fence(lock: TokenLock, accepted: int) -> None:
        """The host accepted a fence at least as new as the one Redis handed out: Redis's
        counter went back (FLUSHALL, a new Redis, a failover that lost the INCR). Lift it, so the
        next acquisition passes the host's check; until then every lease is refused there, the
        safe side."""
        try:
            counter = await lock.raise_fence(accepted)
        except LockUnavailable:
            log.warning("fence.raise_failed", host_fence=accepted)
            return
        log.warning("fence.raised", host_fence=accepted, counter=counter)

    async def _walk_phases(self, lease: Lease) -> None:
        # Bound with tokens and restored once (bench/README.md: the engine's log context). The
        # fence stays bound while the session closes; each phase's name only while phases run.
        result = self.result
        walk = structlog.contextvars.bind_contextvars(fence=lease.fence)
        try:
            async with contextlib.AsyncExitStack() as stack:
                remote = _CycleRemote(
                    self.crew.open_session, self.marquee, lease, stack, result.dry_run
                )
                watch = _LeaseWatch(lease)
                before_phases: Mapping[str, contextvars.Token[Any]] | None = None
                try:
                    for phase in self.crew.phases:
                        if self.crew.stopping.is_set():
                            result.outcome = Outcome.INTERRUPTED
                            return
                        ctx: PhaseContext[RemoteView] = PhaseContext(
                            marquee=self.marquee,
                            inventory=self.inventory,
                            log=log.bind(phase=phase.name),
                            dry_run=result.dry_run,
                            lease=lease,
                            remote=remote,
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
        watch: _LeaseWatch,
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
        self.crew.observer.lease_renewing(lease.remaining())
        # The boundary between two phases is the one place a cycle stops for a pause, never in
        # the middle of a write: the Marquee's is read by the renewal's script, the fleet's
        # comes from the replica's watch (its read, when due, in the renewal's batch). After the
        # last phase there is nothing left to stop.
        last = phase is self.crew.phases[-1]
        fleet = self.crew.fleet_pause
        reading = None if last else fleet.refresh()
        try:
            await lease.renew()
        except LockHeld as exc:  # renewed: the ending releases it
            if last:
                return True
            self._paused(Pause.from_held(self.marquee.name, exc), phase.name)
            return False
        except LockLost as exc:
            self.crew.observer.lease_lost(exc.reason)
            result.outcome, result.phase = Outcome.LOCK_LOST, phase.name
            result.reason = exc.reason
            return False
        if last:
            return True
        # No read on its way: the last answer stands, without a wait to create.
        pause = fleet.pause if reading is None else await fleet.settled(reading)
        if pause is not None:
            self._paused(pause, phase.name)
            return False
        return True

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
        for listener in self.crew.phase_listeners:
            try:
                listener(self.result, phase)
            except Exception:
                log.exception("phase.listener_failed")

    async def _before_deadline(self, watch: _LeaseWatch, lease: Lease, step: str, work: Any) -> Any:
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
            self.crew.observer.lease_lost("fenced")
            result.outcome, result.phase, result.reason = Outcome.LOCK_LOST, step, "fenced"
            result.host_fence = exc.host_fence
            log.error("lock.fenced", fence=exc.fence, host_fence=exc.host_fence, why=exc.why)
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

    async def _end(self) -> None:
        """Release, record and resume bookkeeping in one round trip (``CycleEnd``), which runs to
        its end even if the cycle is cancelled again meanwhile (then it is told when it is in,
        and the cancellation propagates at once); then ``_finish``."""
        result, lease = self.result, self.lease
        result.duration = round(time.monotonic() - result.started, 4)
        result.finished_at = time.time()
        resume = None
        if lease is not None:
            interrupted = result.outcome is Outcome.INTERRUPTED
            resume = Resume.RECORD if interrupted else Resume.CLEAR
        # A cycle left alone (locked, paused at its start) did nothing there; nothing to record.
        record = None if result.left_alone else result.to_record()
        ending = self.crew.ending.write(result.marquee, lease=lease, record=record, resume=resume)
        try:
            self._tell_ending(await asyncio.shield(ending), resume)
        except asyncio.CancelledError:
            ending.add_done_callback(functools.partial(self._tell_ending_late, resume))
            raise
        except Exception as exc:  # the observer's bug, told of the release
            result.outcome, result.reason = Outcome.ERROR, one_line(exc)
            log.exception("cycle.error")
            if self.crew.records is not None:
                await self._record_again(self.crew.records)
        await self._finish()

    def _tell_ending(self, ending: Ending, resume: Resume | None) -> None:
        # Expected while Redis is slow or away: one line each, none past debug level while an
        # outage is already told.
        if ending.record_error is not None:
            log.log(self._unless_redis_down(logging.ERROR), "cycle.record_failed",
                    error=one_line(ending.record_error))  # fmt: skip
        if ending.resume_error is not None:
            log.log(self._unless_redis_down(logging.WARNING), "resume.write_failed",
                    error=one_line(ending.resume_error))  # fmt: skip
        elif resume is Resume.RECORD:
            log.info("resume.recorded")
        if ending.released is not None:
            self.crew.observer.lease_released(ending.released)

    def _tell_ending_late(self, resume: Resume | None, ending: asyncio.Future[Ending]) -> None:
        """``_tell_ending`` for a cycle cancelled while its ending was out; nobody is left to
        hear a failure but the log."""
        try:
            self._tell_ending(ending.result(), resume)
        except Exception:
            log.exception("cycle.error")

    async def _record_again(self, records: CycleRecords) -> None:
        """Record a cycle whose outcome changed after its ending went out (an observer's bug)."""
        result = self.result
        try:
            await detached(records.record(result.marquee, result.to_record()))
        except Exception as exc:
            log.error("cycle.record_failed", error=one_line(exc))

    async def _finish(self) -> None:
        result = self.result
        log.log(
            result.log_level,
            "cycle.finished",
            outcome=result.outcome.value,
            reason=result.reason,
            failed_phase=result.phase,
            fence=result.fence,
            actions=sum(len(taken) for taken in result.actions.values()),
            durations=result.durations,
            duration=result.duration,
            waited=result.waited,
            dry_run=result.dry_run,
        )
        for listener in self.crew.listeners:
            try:
                await detached(listener(result))
            except Exception as exc:
                # Expected while Redis is slow or away: one line, no traceback to drown it, and
                # none at all past debug level while an outage is already told.
                log.log(self._unless_redis_down(logging.ERROR), "cycle.listener_failed",
                        error=one_line(exc))  # fmt: skip

    def _unless_redis_down(self, level: int) -> int:
        """``level`` for a line about a failed Redis call; debug while an outage is told."""
        return logging.DEBUG if self.crew.redis_outage.down else level
