"""A cycle's lease: taken unless a pause holds the Marquee back, renewed at each phase boundary
(the one place a pause stops a cycle), its deadline watched while a phase runs, and Redis's fence
counter lifted when a host proves it went back.

Apart from the phase walk (``engine.phase_walk``) and the ending (``engine.cycle_ending``) so that
what a lease promises, and the pauses read in its round trips, is read in one place.
"""

from __future__ import annotations

import asyncio

import structlog
from redis.exceptions import RedisError

from playguard_async.coordination.keys import marquee_lock_name, pause_key
from playguard_async.coordination.lock import (
    Lease,
    LockHeld,
    LockLost,
    LockUnavailable,
    TokenLock,
)
from playguard_async.coordination.pause import FLEET, HeldByPause, Pause, restore_pause
from playguard_async.desired_state.model import Marquee
from playguard_async.engine.results import CycleResult, Outcome, one_line
from playguard_async.engine.services import CycleServices
from playguard_async.phases.protocol import RemoteView

log = structlog.get_logger("playguard.engine")


async def take_lease(
    services: CycleServices, marquee: Marquee, result: CycleResult
) -> Lease | None:
    """The Marquee's lease (``_acquire``) unless a pause holds it back: its own pause is read
    by the acquisition's script, which then takes nothing; the fleet's comes from the
    replica's ``FleetPauseWatch``, whose read, when one is due, goes out in the acquisition's
    batch. Either way checking costs a cycle no round trip of its own. Paused, the outcome is
    ``paused`` and no phase runs: a lease taken meanwhile is released by the ending like any
    other, and the cycle is not recorded (``left_alone``)."""
    fleet = services.fleet_pause
    reading = fleet.refresh()
    if reading is None and fleet.pause is not None:
        paused(result, fleet.pause)
        return None
    lease = await _acquire(services, marquee, result)
    pause = fleet.pause if reading is None else await fleet.settled(reading)
    if pause is not None:
        services.pauses.met(pause)
    elif lease is not None and result.outcome is Outcome.OK:
        pause = fleet.pause = await _forgotten(services, FLEET, result)
    if pause is not None:
        paused(result, pause)
    return lease


def paused(result: CycleResult, pause: Pause, phase: str | None = None) -> None:
    """End the cycle ``paused``: at its start, or after ``phase``."""
    result.outcome, result.reason = Outcome.PAUSED, pause.describe()
    result.phase = phase
    log.info("marquee.paused", scope=pause.scope, by=pause.by, until=pause.until)


async def _acquire(services: CycleServices, marquee: Marquee, result: CycleResult) -> Lease | None:
    """The Marquee's lease, or None with the outcome that says why not."""
    settings = services.settings
    lock = TokenLock(
        services.redis,
        marquee_lock_name(marquee.name),
        ttl=settings.lock_ttl,
        timeout=settings.redis_socket_timeout,
        replica=settings.replica_id,
        min_replicas=settings.lock_min_replicas,
        replica_timeout=settings.lock_replica_timeout,
        hold_key=pause_key(marquee.name),
    )
    try:
        lease = await lock.acquire()
    except LockHeld as exc:
        services.redis_outage.answered()
        pause = Pause.from_held(marquee.name, exc)
        services.pauses.met(pause)
        paused(result, pause)
        return None
    except LockUnavailable as exc:
        result.outcome = Outcome.REDIS_UNAVAILABLE
        result.reason = one_line(exc.__cause__ or exc)
        services.redis_outage.failed(result.reason)
        return None
    services.redis_outage.answered()
    if lease is None:
        log.info("marquee.locked")
        result.outcome = Outcome.LOCKED
        return None
    forgotten = await _forgotten(services, marquee.name, result)
    if forgotten is not None:
        paused(result, forgotten)
    return lease


async def _forgotten(services: CycleServices, scope: str, result: CycleResult) -> Pause | None:
    """The pause of ``scope`` this replica met and Redis forgot, written back
    (``PauseMemory``); when Redis does not say whether it was lifted, the cycle takes no step."""
    try:
        return await services.pauses.forgotten(
            services.redis, scope, services.settings.redis_socket_timeout
        )
    except RedisError as exc:
        log.warning("pause.unconfirmed", scope=scope, error=one_line(exc))
        result.outcome, result.reason = Outcome.REDIS_UNAVAILABLE, one_line(exc)
        return None


async def pause_from_host(
    services: CycleServices, marquee: Marquee, result: CycleResult, session: RemoteView
) -> None:
    """In the first cycle of ``marquee`` in this process, as its session opens (before any
    phase can change the host): the pauses its host keeps a copy of (``phases.pause_copies``),
    so a pause Redis forgot while every replica restarted still holds. Redis held neither the
    Marquee's pause nor the fleet's at the lease step, so a copy that still holds and was not
    lifted in Redis since is written back until its end (``restore_pause``; not in a dry run)
    and the cycle ends ``paused`` (``HeldByPause``). When Redis does not answer, the phase fails
    and takes no step. Any later cycle reads no copy: an in-sync cycle costs no host read and no
    Redis command more."""
    read = services.kept_pauses
    if read is not None:
        timeout = services.settings.redis_socket_timeout
        for pause in await read(session, marquee.name):
            if await restore_pause(services.redis, pause, timeout, write=not result.dry_run):
                services.pauses.met(pause)
                if pause.scope == FLEET and not result.dry_run:
                    services.fleet_pause.pause = pause
                if not result.dry_run:  # not written back: read again next cycle
                    services.pauses.host_read(marquee.name)
                raise HeldByPause(pause)
    services.pauses.host_read(marquee.name)


async def renew_after(
    services: CycleServices, marquee: Marquee, result: CycleResult, lease: Lease, phase: str,
    *, last: bool,
) -> bool:  # fmt: skip
    """Renew ``lease`` after ``phase`` (the ``last`` one or not); False ends the cycle.

    The boundary between two phases is the one place a cycle stops for a pause, never in the
    middle of a write: the Marquee's is read by the renewal's script, the fleet's comes from the
    replica's watch (its read, when due, in the renewal's batch). After the last phase there is
    nothing left to stop."""
    services.observer.lease_renewing(lease.remaining())
    fleet = services.fleet_pause
    reading = None if last else fleet.refresh()
    try:
        await lease.renew()
    except LockHeld as exc:  # renewed: the ending releases it
        services.observer.lease_renewal_ended("paused")
        if last:
            return True
        paused(result, Pause.from_held(marquee.name, exc), phase)
        return False
    except LockLost as exc:
        services.observer.lease_lost(exc.reason)
        services.observer.lease_renewal_ended("lost")
        result.outcome, result.phase = Outcome.LOCK_LOST, phase
        result.reason = exc.reason
        return False
    services.observer.lease_renewal_ended("renewed")
    if last:
        return True
    # No read on its way: the last answer stands, without a wait to create.
    pause = fleet.pause if reading is None else await fleet.settled(reading)
    if pause is not None:
        paused(result, pause, phase)
        return False
    return True


async def catch_up_fence(lock: TokenLock, accepted: int) -> None:
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


class LeaseWatch:
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
