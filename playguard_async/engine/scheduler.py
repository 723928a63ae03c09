"""The reactor: tick, fan out one cycle per Marquee, walk its phases under its lease, drain on stop.

The engine knows phases only through ``playguard_async.phases.protocol``. Its promises:

- a cycle takes a concurrency slot before it takes a lock, so no lease ticks away in a queue;
- a phase runs under a deadline at its lease's deadline, so it never outlives the lease;
- after every phase the lease is renewed, and any doubt about it ends the cycle;
- the lease is released on every way out, cancellation included;
- a stop request lets each cycle finish its current phase, then records the Marquees it interrupted
  so that the next start of any replica reconciles them first.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import enum
import functools
import logging
import math
import random
import secrets
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.cycle_end import CycleEnd, Ending, Resume
from playguard_async.coordination.fence import FenceRefused
from playguard_async.coordination.keys import RESUME_KEY, marquee_lock_name
from playguard_async.coordination.lock import (
    Lease,
    LockLost,
    LockUnavailable,
    LossReason,
    ReleaseResult,
    TokenLock,
)
from playguard_async.coordination.outage import RedisOutage
from playguard_async.coordination.records import CycleRecords
from playguard_async.coordination.replicas import ReplicaRoster
from playguard_async.desired_state.inventory import (
    DesiredState,
    DesiredStateUnavailable,
    Inventory,
    InventoryError,
    Marquee,
)
from playguard_async.kits.aio import bounded, detached, wait_or_stop
from playguard_async.kits.collector import settle_new_desired_state
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

SessionOpener = Callable[[Marquee, Lease], AbstractAsyncContextManager[RemoteView]]
"""Opens the remote session of one cycle under its lease (whose fence goes with every write);
entered on a phase's first ``ctx.remote()`` call. The phases it serves take the session's own
type; the engine reads only its ``RemoteView``."""


class CycleCancelled(Exception):
    """A second stop request cancelled a cycle run by ``Engine.run_one`` in the middle of a phase;
    its lease was released all the same and the Marquee is recorded for resume."""

    def __init__(self, marquee: str) -> None:
        super().__init__(
            f"cycle of {marquee} cancelled in the middle of a phase by a second signal; "
            "its lease was released and it is recorded as interrupted"
        )
        self.marquee = marquee


class Outcome(enum.Enum):
    OK = "ok"
    LOCKED = "locked"
    LOCK_LOST = "lock_lost"
    PHASE_FAILED = "phase_failed"
    DEADLINE = "deadline"
    INTERRUPTED = "interrupted"
    REDIS_UNAVAILABLE = "redis_unavailable"
    UNREACHABLE = "unreachable"
    """The Marquee could not be reached or used over SSH; ``reason`` says why, in words."""
    ERROR = "error"
    """Something outside any phase failed unexpectedly; logged with its traceback."""


FINISHED_LEVELS: dict[Outcome, int] = {
    Outcome.OK: logging.INFO,
    Outcome.LOCKED: logging.DEBUG,  # the loser's `marquee.locked` line already said so
    Outcome.INTERRUPTED: logging.WARNING,
    Outcome.PHASE_FAILED: logging.WARNING,
    Outcome.UNREACHABLE: logging.WARNING,
    Outcome.REDIS_UNAVAILABLE: logging.DEBUG,  # told once per outage: `outage.RedisOutage`
    Outcome.DEADLINE: logging.ERROR,
    Outcome.LOCK_LOST: logging.ERROR,
    Outcome.ERROR: logging.ERROR,
}
"""The level of each outcome's ``cycle.finished`` line: a failed cycle stands out in the log."""


@dataclass
class CycleResult:
    """One cycle's classified ending, as logged in ``cycle.finished`` and handed to listeners."""

    marquee: str
    cycle_id: str
    outcome: Outcome = Outcome.OK
    fence: int | None = None
    host_fence: int | None = None
    """The highest fence the host was seen to hold in this cycle (after a write or a refusal)."""
    phase: str | None = None
    reason: str | None = None
    durations: dict[str, float] = field(default_factory=dict)
    actions: dict[str, list[str]] = field(default_factory=dict)
    """Phase -> what it did, for the phases that did something."""
    findings: dict[str, dict[str, Any]] = field(default_factory=dict)
    notices: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    """Phase -> its ``Notice``s, as JSON objects: what an operator should look at."""
    replica: str = ""
    dry_run: bool = False
    started: float = field(default_factory=time.monotonic)
    """When the cycle began: its task's start, then (once it has a slot) its acquisition's."""
    waited: float = 0.0
    """Seconds between the task's start and the acquisition: its start offset and the wait for a
    slot, kept apart so that ``duration`` is the cycle's own work."""
    finished_at: float = 0.0
    duration: float = 0.0

    def to_record(self) -> dict[str, Any]:
        """The JSON-ready form kept for operators."""
        return {
            "marquee": self.marquee,
            "cycle": self.cycle_id,
            "outcome": self.outcome.value,
            "fence": self.fence,
            "host_fence": self.host_fence,
            "phase": self.phase,
            "reason": self.reason,
            "durations": self.durations,
            "actions": self.actions,
            "findings": self.findings,
            "notices": self.notices,
            "replica": self.replica,
            "dry_run": self.dry_run,
            "finished_at": self.finished_at,
            "waited": self.waited,
            "duration": self.duration,
        }


CycleListener = Callable[[CycleResult], Awaitable[None]]
"""Told of every finished cycle (status records, metrics); its failure never stops the engine."""


class EngineObserver(Protocol):
    """Told of the moments inside a tick or a cycle that no ``CycleResult`` carries (metrics).

    Calls are synchronous, on the event loop, in the engine's path: an observer must be cheap and
    must not raise. The engine knows observers only by this protocol, so it imports no metrics
    library.
    """

    def tick_started(self, lag: float) -> None:
        """A tick starts ``lag`` seconds after its point on the tick grid."""

    def fleet_shared(self, replicas: int, assigned: int) -> None:
        """A tick found ``replicas`` live replicas (0: not sharing, attempting every Marquee) and
        this one's share of the launchable Marquees to be ``assigned``."""

    def lease_renewing(self, headroom: float) -> None:
        """A lease is about to be renewed with ``headroom`` seconds left before its deadline."""

    def lease_lost(self, reason: LossReason) -> None:
        """A renewal failed; no further phase of the cycle runs."""

    def lease_released(self, result: ReleaseResult) -> None:
        """A cycle's lease was released, cancelled cycles included."""


class _Unobserved:
    """The observer of an engine nobody watches."""

    def tick_started(self, lag: float) -> None:
        pass

    def fleet_shared(self, replicas: int, assigned: int) -> None:
        pass

    def lease_renewing(self, headroom: float) -> None:
        pass

    def lease_lost(self, reason: LossReason) -> None:
        pass

    def lease_released(self, result: ReleaseResult) -> None:
        pass


PhaseListener = Callable[[CycleResult, str], None]
"""Told at once as each phase of a cycle ends, with the cycle so far and the phase's name: its
duration, actions and findings are in the result, and so is the outcome if the phase ended the
cycle. For live progress (``playguard cycle``); called synchronously, so it must not block, and
its failure never stops the cycle."""


class _CycleRemote:
    """The cycle's remote session, opened on first use so phases that need none cost nothing."""

    def __init__(
        self,
        opener: SessionOpener | None,
        marquee: Marquee,
        lease: Lease,
        stack: contextlib.AsyncExitStack,
    ) -> None:
        self._opener = opener
        self._marquee = marquee
        self._lease = lease
        self._stack = stack
        self._session: RemoteView | None = None

    async def __call__(self) -> RemoteView:
        if self._session is None:
            if self._opener is None:
                raise RuntimeError("no remote layer is configured for this engine")
            self._session = await self._stack.enter_async_context(
                self._opener(self._marquee, self._lease)
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

    One timer per cycle, not a timeout scope per phase (those were a sixth of an in-sync cycle's
    CPU). A phase arms the timer at the lease's deadline if none is armed. A renewal only moves
    the deadline later, so a timer that fires before it re-arms at the new one; a timer that fires
    between phases (during a renewal, which has a bound of its own) disarms, and the next phase
    arms it again. Its cancellation is told apart from any other as ``asyncio.timeout`` tells
    it: by the task's count of cancel requests."""

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


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one line, for log fields and outcome reasons."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def next_tick_after(scheduled: float, now: float, interval: float) -> tuple[float, int]:
    """The first point of the tick grid (``scheduled`` + k * ``interval``, k >= 1) after ``now``.

    Also returns how many grid points were skipped: a late tick skips the points it missed rather
    than bursting to catch up, and the grid never drifts with the time ticks take.
    """
    following = scheduled + interval
    if following > now:
        return following, 0
    skipped = math.floor((now - following) / interval) + 1
    return following + skipped * interval, skipped


class Engine:
    """One replica's reconciler: call ``run()``; call ``request_stop()`` from a signal handler."""

    def __init__(
        self,
        settings: Settings,
        desired_state: DesiredState,
        redis: RedisClient,
        phases: Sequence[Phase[Any]],
        *,
        open_session: SessionOpener | None = None,
        listeners: Sequence[CycleListener] = (),
        phase_listeners: Sequence[PhaseListener] = (),
        observer: EngineObserver | None = None,
        records: CycleRecords | None = None,
    ) -> None:
        self.settings = settings
        self.desired_state = desired_state
        self.redis = redis
        self.phases = list(phases)
        self.open_session = open_session
        self.listeners = list(listeners)
        self.phase_listeners = list(phase_listeners)
        self.observer: EngineObserver = observer or _Unobserved()
        self.inventory: Inventory | None = None
        self.waiting_for_desired_state: str | None = None
        """Why the engine has no desired state yet (its source unavailable since start), while it
        runs no cycles; None once it has one, or before the first read."""
        self.cycles: dict[str, asyncio.Task[CycleResult]] = {}
        self._follow_ups: set[str] = set()
        """Marquees woken while in a cycle here: each gets one more cycle when that one ends."""
        self.stopping = asyncio.Event()
        self.last_tick: float | None = None
        self.slots = settings.cycle_slots()
        self._slots = asyncio.Semaphore(self.slots)
        self.roster = ReplicaRoster(
            redis,
            settings.replica_id,
            ttl=settings.tick_interval,
            timeout=settings.redis_socket_timeout,
        )
        self.redis_outage = RedisOutage(
            settings.redis_url_for_display(), remind_every=settings.redis_down_log_interval
        )
        self.records = records
        self._ending = CycleEnd(redis, records, settings.redis_socket_timeout)
        self._cancel_now = False

    # -- life --------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """First call: stop ticking and drain at phase boundaries. Second call: cancel at once."""
        if self.stopping.is_set():
            log.warning("engine.stop_now", cycles=len(self.cycles))
            self._cancel_now = True
            for task in self.cycles.values():
                task.cancel()
            return
        log.info("engine.stopping", cycles=len(self.cycles), grace=self.settings.shutdown_grace)
        self.stopping.set()

    async def load_inventory(self) -> Inventory:
        """Read the desired state; keep the last good one (and say why) when the new one is bad.

        Raises when there is none to keep (``DesiredStateUnavailable`` while the source is out of
        reach); the tick loop uses ``_desired_inventory``, which waits that out instead."""
        try:
            inventory = await self.desired_state.load()
        except DesiredStateUnavailable as exc:
            if self.inventory is None:
                self.waiting_for_desired_state = str(exc)
                raise
            return self.inventory  # the source logs its outage itself, once per change
        except Exception as exc:
            # Whatever the source raises is a bad desired state, never the end of the daemon.
            if not isinstance(exc, InventoryError):
                exc = InventoryError(f"{self.desired_state.describe()}: {one_line(exc)}")
            if self.inventory is None:
                raise exc from None
            log.error("inventory.invalid", source=self.desired_state.describe(), error=str(exc))
            return self.inventory
        if inventory is not self.inventory:
            self.inventory = inventory
            self.waiting_for_desired_state = None
            settle_new_desired_state()
        return inventory

    async def _desired_inventory(self) -> Inventory | None:
        """``load_inventory``, or None while the source has never been available (a database out
        of reach since start): no cycle runs without a desired state, and the next tick asks
        again. The source logs the outage once per change, not here per tick."""
        try:
            return await self.load_inventory()
        except DesiredStateUnavailable:
            return None

    async def run(self) -> None:
        """Tick until asked to stop, then drain. The first tick runs at once, after this
        replica has announced itself; a stop request hands its Marquees to the others at once.

        A desired state that cannot be read at start raises (a configuration error), except one
        out of reach for now (``DesiredStateUnavailable``): then the ticks run no cycles and ask
        again each time, until one is read."""
        await self._desired_inventory()
        await self.roster.announce()
        announcing = asyncio.create_task(
            self.roster.keep_announcing(self.stopping), name="replicas:announce"
        )
        interval = self.settings.tick_interval
        next_tick = time.monotonic()
        log.info(
            "engine.started",
            replica=self.settings.replica_id,
            phases=self.phase_names,
            slots=self.slots,
            waiting_for_desired_state=self.waiting_for_desired_state,
        )
        try:
            while not self.stopping.is_set():
                self.observer.tick_started(time.monotonic() - next_tick)
                await self.tick()
                now = time.monotonic()
                next_tick, skipped = next_tick_after(next_tick, now, interval)
                if skipped:
                    log.warning("engine.ticks_skipped", skipped=skipped)
                await wait_or_stop(self.stopping, next_tick - now)
            await self.drain()
        finally:
            self.stopping.set()
            await detached(announcing)

    @property
    def phase_names(self) -> list[str]:
        return [phase.name for phase in self.phases]

    async def tick(self) -> list[asyncio.Task[CycleResult]]:
        """Start a cycle for every launchable Marquee of this replica's share (``replicas``) not
        already in a cycle here."""
        self.last_tick = time.monotonic()
        inventory = await self._desired_inventory()
        if inventory is None:
            log.debug("engine.tick", started=[], waiting_for=self.desired_state.describe())
            return []
        resume_first = await self._resume_order()
        marquees = sorted(
            (m for m in inventory.launchable_marquees() if self.roster.owns(m.name)),
            key=lambda m: (m.name not in resume_first, m.name),
        )
        sharing_with = len(self.roster.live) if self.roster.sharing else 0
        self.observer.fleet_shared(sharing_with, len(marquees))
        # A random start offset spreads the share's starts over the tick (and lets replicas that
        # briefly disagree about who is live both win some). Resumed Marquees start at once.
        spread = self.settings.tick_jitter * self.settings.tick_interval
        started = []
        for marquee in marquees:
            if marquee.name in self.cycles:
                continue
            delay = 0.0 if marquee.name in resume_first else random.uniform(0.0, spread)
            started.append(self._start_cycle(marquee, inventory, delay=delay))
        log.debug("engine.tick", started=[t.get_name() for t in started], running=len(self.cycles))
        return started

    async def wake(self, names: Collection[str]) -> list[asyncio.Task[CycleResult]]:
        """Start cycles now for the named Marquees, whose desired state changed (a database's
        notification), from a freshly read inventory: those of this replica's share, as a tick
        would. Its lock still decides.

        A Marquee already in a cycle here may have read its desired state before the change: it
        gets one follow-up cycle when that cycle ends (however many wake-ups came meanwhile, and
        never two cycles of one Marquee at once in one replica)."""
        if self.stopping.is_set():
            return []
        inventory = await self._desired_inventory()
        if inventory is None:
            return []
        started, following = [], []
        for name in sorted(names):
            try:
                marquee = inventory.marquee(name)
            except KeyError:  # gone, or left out of the snapshot: nothing to start
                continue
            if not (marquee.launchable and self.roster.owns(name)):
                continue
            if name in self.cycles:
                self._follow_ups.add(name)
                following.append(name)
            else:
                started.append(self._start_cycle(marquee, inventory))
        log.info(
            "engine.woken",
            started=[t.get_name() for t in started],
            after_running=following,
            asked=len(names),
        )
        return started

    async def resync(self) -> None:
        """A full tick now, off the tick grid: notifications may have been lost."""
        if not self.stopping.is_set():
            await self.tick()

    async def run_one(self, marquee: Marquee, inventory: Inventory) -> CycleResult:
        """One cycle of ``marquee`` now, started as a tick starts one (without a start offset), for
        ``playguard cycle``.

        ``request_stop`` reaches it as it reaches the daemon's cycles: the first call lets the
        running phase finish and starts no other (outcome ``interrupted``); the second cancels the
        phase, and this raises ``CycleCancelled`` (a cancellation of the caller itself still
        propagates as ``CancelledError``).
        """
        task = self._start_cycle(marquee, inventory)
        try:
            return await task
        except asyncio.CancelledError:
            caller = asyncio.current_task()
            if caller is not None and caller.cancelling():
                raise
            raise CycleCancelled(marquee.name) from None

    def _start_cycle(
        self, marquee: Marquee, inventory: Inventory, *, delay: float = 0.0
    ) -> asyncio.Task[CycleResult]:
        task = asyncio.create_task(
            self.cycle(marquee, inventory, delay=delay), name=f"cycle:{marquee.name}"
        )
        self.cycles[marquee.name] = task
        task.add_done_callback(self._cycle_ended)
        return task

    def _cycle_ended(self, task: asyncio.Task[CycleResult]) -> None:
        """Forget the cycle; log at once one that raised instead of ending in a classified outcome
        (a bug), since nobody awaits a tick's cycles before the drain."""
        name = task.get_name().removeprefix("cycle:")
        if self.cycles.get(name) is task:
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
        inventory = self.inventory
        if self.stopping.is_set() or inventory is None:
            return
        try:
            marquee = inventory.marquee(name)
        except KeyError:
            return
        if marquee.launchable and self.roster.owns(name):
            log.info("engine.follow_up", marquee=name)
            self._start_cycle(marquee, inventory)

    async def drain(self) -> None:
        """Let running cycles reach a phase boundary within the grace, then cancel the rest."""
        running = list(self.cycles.values())
        if running:
            _, late = await asyncio.wait(running, timeout=self.settings.shutdown_grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
        log.info("engine.stopped", drained=len(running))

    # -- one cycle ---------------------------------------------------------------------------

    async def cycle(
        self, marquee: Marquee, inventory: Inventory, *, delay: float = 0.0
    ) -> CycleResult:
        """Wait ``delay`` (unless stopping), then lock, walk the phases, end; always ends in
        exactly one classified outcome."""
        result = CycleResult(
            marquee=marquee.name,
            cycle_id=secrets.token_hex(6),
            replica=self.settings.replica_id,
            dry_run=self.settings.dry_run,
        )
        # Tokens, not bound_contextvars, which reads the whole context to restore it.
        bound = structlog.contextvars.bind_contextvars(
            marquee=marquee.name, cycle=result.cycle_id, replica=self.settings.replica_id
        )
        try:
            try:
                if delay > 0:
                    await wait_or_stop(self.stopping, delay)
                await self._slots.acquire()
                now = time.monotonic()
                result.waited, result.started = round(now - result.started, 4), now
            except asyncio.CancelledError:
                result.outcome = Outcome.INTERRUPTED
                await self._end(result, None)
                raise
            try:
                await self._locked_cycle(marquee, inventory, result)
            finally:
                self._slots.release()
        finally:
            structlog.contextvars.reset_contextvars(**bound)
        return result

    async def _locked_cycle(
        self, marquee: Marquee, inventory: Inventory, result: CycleResult
    ) -> None:
        """Take the lease, walk the phases, end the cycle (the lease's release included) on
        every way out, cancellation too."""
        lease: Lease | None = None
        try:
            if self.stopping.is_set():
                result.outcome = Outcome.INTERRUPTED
            else:
                lease = await self._acquire(marquee, result)
            if lease is not None:
                result.fence = lease.fence
                await self._walk_phases(marquee, inventory, lease, result)
        except asyncio.CancelledError:
            result.outcome = Outcome.INTERRUPTED
            await self._end(result, lease)
            raise
        except Exception as exc:
            # A task's exception nobody retrieves is lost; the cycle's ending never is.
            result.outcome, result.reason = Outcome.ERROR, one_line(exc)
            log.exception("cycle.error")
        await self._end(result, lease)
        if (
            lease is not None
            and result.reason == "fenced"
            and (result.host_fence or 0) >= lease.fence
        ):
            await self._catch_up_fence(lease.lock, result.host_fence or 0)

    async def _acquire(self, marquee: Marquee, result: CycleResult) -> Lease | None:
        """The Marquee's lease, or None with the outcome that says why not."""
        lock = TokenLock(
            self.redis,
            marquee_lock_name(marquee.name),
            ttl=self.settings.lock_ttl,
            timeout=self.settings.redis_socket_timeout,
            replica=self.settings.replica_id,
            min_replicas=self.settings.lock_min_replicas,
            replica_timeout=self.settings.lock_replica_timeout,
        )
        try:
            lease = await lock.acquire()
        except LockUnavailable as exc:
            result.outcome = Outcome.REDIS_UNAVAILABLE
            result.reason = one_line(exc.__cause__ or exc)
            self.redis_outage.failed(result.reason)
            return None
        self.redis_outage.answered()
        if lease is None:
            log.info("marquee.locked")
            result.outcome = Outcome.LOCKED
        return lease

    async def _catch_up_fence(self, lock: TokenLock, accepted: int) -> None:
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

    async def _walk_phases(
        self, marquee: Marquee, inventory: Inventory, lease: Lease, result: CycleResult
    ) -> None:
        # Bound with tokens and restored once: bound_contextvars per phase read the whole
        # context each time, 12 % of an in-sync cycle. The fence stays bound while the session
        # closes; each phase's name only while phases run.
        walk = structlog.contextvars.bind_contextvars(fence=lease.fence)
        try:
            async with contextlib.AsyncExitStack() as stack:
                remote = _CycleRemote(self.open_session, marquee, lease, stack)
                watch = _LeaseWatch(lease)
                before_phases: Mapping[str, contextvars.Token[Any]] | None = None
                try:
                    for phase in self.phases:
                        if self.stopping.is_set():
                            result.outcome = Outcome.INTERRUPTED
                            return
                        ctx: PhaseContext[RemoteView] = PhaseContext(
                            marquee=marquee,
                            inventory=inventory,
                            log=log.bind(phase=phase.name),
                            dry_run=self.settings.dry_run,
                            lease=lease,
                            remote=remote,
                        )
                        bound = structlog.contextvars.bind_contextvars(phase=phase.name)
                        before_phases = bound if before_phases is None else before_phases
                        if not await self._run_phase(phase, ctx, remote, watch, result):
                            return
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
        result: CycleResult,
    ) -> bool:
        """One phase under the lease's deadline, then the renewal; False ends the cycle."""
        lease = ctx.lease
        started = time.monotonic()
        mark = remote.recorded()
        report = await self._before_deadline(watch, lease, result, phase.name, phase(ctx))
        result.durations[phase.name] = round(time.monotonic() - started, 4)
        if report is not None:
            self._record_report(result, phase.name, report, remote.recorded_since(mark))
        self._phase_ended(result, phase.name)
        if result.outcome is not Outcome.OK:
            return False
        self.observer.lease_renewing(lease.remaining())
        try:
            await lease.renew()
        except LockLost as exc:
            self.observer.lease_lost(exc.reason)
            result.outcome, result.phase = Outcome.LOCK_LOST, phase.name
            result.reason = exc.reason
            return False
        return True

    @staticmethod
    def _record_report(
        result: CycleResult, phase: str, report: PhaseReport, session_actions: list[str]
    ) -> None:
        """What the phase did (its session's actions, then any it reports itself), found and
        asks an operator to look at."""
        if taken := [*session_actions, *report.actions]:
            result.actions[phase] = taken
        if report.findings:
            result.findings[phase] = dict(report.findings)
        if report.notices:
            result.notices[phase] = [notice.to_json() for notice in report.notices]

    def _phase_ended(self, result: CycleResult, phase: str) -> None:
        for listener in self.phase_listeners:
            try:
                listener(result, phase)
            except Exception:
                log.exception("phase.listener_failed")

    async def _before_deadline(
        self, watch: _LeaseWatch, lease: Lease, result: CycleResult, step: str, work: Any
    ) -> Any:
        """Await ``work`` but no later than the lease's deadline (``watch``); classify how it
        ended."""
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
            self.observer.lease_lost("fenced")
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

    async def _end(self, result: CycleResult, lease: Lease | None) -> None:
        """Release, record and resume bookkeeping in one round trip (``CycleEnd``), which runs to
        its end even if the cycle is cancelled again meanwhile (then it is told when it is in,
        and the cancellation propagates at once); then ``_finish``."""
        result.duration = round(time.monotonic() - result.started, 4)
        result.finished_at = time.time()
        resume = None
        if lease is not None:
            interrupted = result.outcome is Outcome.INTERRUPTED
            resume = Resume.RECORD if interrupted else Resume.CLEAR
        # A cycle that found the Marquee locked did nothing there; the holder's record stands.
        record = None if result.outcome is Outcome.LOCKED else result.to_record()
        ending = self._ending.write(result.marquee, lease=lease, record=record, resume=resume)
        try:
            self._tell_ending(await asyncio.shield(ending), resume)
        except asyncio.CancelledError:
            ending.add_done_callback(functools.partial(self._tell_ending_late, resume))
            raise
        except Exception as exc:  # the observer's bug, told of the release
            result.outcome, result.reason = Outcome.ERROR, one_line(exc)
            log.exception("cycle.error")
            if self.records is not None:
                await self._record_again(self.records, result)
        await self._finish(result)

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
            self.observer.lease_released(ending.released)

    def _tell_ending_late(self, resume: Resume | None, ending: asyncio.Future[Ending]) -> None:
        """``_tell_ending`` for a cycle cancelled while its ending was out; nobody is left to
        hear a failure but the log."""
        try:
            self._tell_ending(ending.result(), resume)
        except Exception:
            log.exception("cycle.error")

    @staticmethod
    async def _record_again(records: CycleRecords, result: CycleResult) -> None:
        """Record a cycle whose outcome changed after its ending went out (an observer's bug)."""
        try:
            await detached(records.record(result.marquee, result.to_record()))
        except Exception as exc:
            log.error("cycle.record_failed", error=one_line(exc))

    async def _finish(self, result: CycleResult) -> None:
        log.log(
            FINISHED_LEVELS[result.outcome],
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
        for listener in self.listeners:
            try:
                await detached(listener(result))
            except Exception as exc:
                # Expected while Redis is slow or away: one line, no traceback to drown it, and
                # none at all past debug level while an outage is already told.
                log.log(self._unless_redis_down(logging.ERROR), "cycle.listener_failed",
                        error=one_line(exc))  # fmt: skip

    # -- resume records ----------------------------------------------------------------------

    async def _resume_order(self) -> set[str]:
        try:
            names = await bounded(
                self.settings.redis_socket_timeout, self.redis.zrange(RESUME_KEY, 0, -1)
            )
        except Exception as exc:
            self.redis_outage.failed(one_line(exc))
            log.debug("resume.unreadable", error=one_line(exc))
            return set()
        self.redis_outage.answered()
        return {name.decode() if isinstance(name, bytes) else str(name) for name in names}

    def _unless_redis_down(self, level: int) -> int:
        """``level`` for a line about a failed Redis call; debug while an outage is told."""
        return logging.DEBUG if self.redis_outage.down else level
