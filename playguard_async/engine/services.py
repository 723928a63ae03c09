"""What the cycles of one replica share, fixed when the replica is built: one frozen object.

Settings, Redis and what a cycle does with it (the lease's outage watch, the ending's round trip,
the fleet's pause watch, the cycle records), the phases and the remote session opener, the
listeners told as cycles and phases end, the observer, the stop request, the concurrency slots and
the wall clock of maintenance windows. Built once (``CycleServices.build``, by
``service.wiring.build_engine`` and the test support), handed to the ``Engine`` and from it to each
``Cycle``: whatever a cycle may use is given at construction, so nothing set on an engine
afterwards can half reach its cycles, and a cycle runs without an engine around it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.cycle_end import CycleEnd
from playguard_async.coordination.identity import RedisIdentity
from playguard_async.coordination.lock import Lease
from playguard_async.coordination.outage import RedisOutage
from playguard_async.coordination.pause import FleetPauseWatch, Pause, PauseMemory
from playguard_async.coordination.records import CycleRecords
from playguard_async.coordination.replicas import FleetVersions
from playguard_async.desired_state.model import Marquee
from playguard_async.engine.observer import EngineObserver, Unobserved
from playguard_async.engine.results import CycleListener, PhaseListener
from playguard_async.kits.aio import StopSignal
from playguard_async.phases.protocol import Phase, RemoteView
from playguard_async.settings import Settings


class SessionOpener(Protocol):
    """Opens the remote session of one cycle under its lease (whose fence goes with every write);
    entered on a phase's first ``ctx.remote()`` call. ``dry_run`` is the cycle's own (the
    settings', the Marquee's mode, a plan): the session records its changes instead of making
    them. ``cycle_id`` names the cycle in the host's journal line of each write, and
    ``read_through`` how far it read the change log (``cycle_record.read_through``: None for a
    YAML file). The phases it serves take the session's own type; the engine reads only its
    ``RemoteView``."""

    def __call__(
        self, marquee: Marquee, lease: Lease, dry_run: bool, cycle_id: str,
        read_through: int | None,
    ) -> AbstractAsyncContextManager[RemoteView]: ...  # fmt: skip


KeptPauses = Callable[[Any, str], Awaitable[Sequence[Pause]]]
"""Reads the pauses a Marquee's host keeps a copy of and that still hold (the cycle's session,
the Marquee's name): ``phases.pause_copies.kept_pauses``, handed in by the wiring (the engine
imports no phase)."""


@dataclass(frozen=True, kw_only=True, eq=False)
class CycleServices:
    """The services every cycle of one replica uses; see the module's docstring."""

    settings: Settings
    redis: RedisClient
    phases: tuple[Phase[Any], ...]
    open_session: SessionOpener | None
    """None: no remote layer; a phase that asks for a session fails."""
    listeners: tuple[CycleListener, ...]
    """Told each finished cycle, in order."""
    phase_listeners: tuple[PhaseListener, ...]
    """Told each finished phase."""
    observer: EngineObserver
    records: CycleRecords | None
    clock: Callable[[], float]
    """Wall-clock time (Unix seconds) for maintenance windows; a test gives a fixed one."""
    stopping: StopSignal
    slots: int
    free_slots: asyncio.Semaphore
    """``slots`` of them: a cycle takes one before its lease."""
    redis_outage: RedisOutage
    ending: CycleEnd
    fleet_pause: FleetPauseWatch
    pauses: PauseMemory
    """The pauses this replica's cycles met, written back if Redis forgets them."""
    kept_pauses: KeptPauses | None
    """None: the hosts' pause copies are not read (no remote layer)."""
    fleet_versions: FleetVersions
    """Whether replicas of different versions share the fleet (the roster's to say): a
    rollout starts no new wave while they do."""
    redis_identity: RedisIdentity
    """Read once per tick: when Redis changed (a failover, a restart), its listeners make the
    next cycles read the hosts' copies of the decisions again."""
    tells: bool = False
    """Whether its cycles' notices are told (``PhaseContext.tells``): the daemon's, whose
    change notifier sends them; not a plan's or a one-off cycle's."""

    @classmethod
    def build(
        cls,
        settings: Settings,
        redis: RedisClient,
        phases: Sequence[Phase[Any]],
        *,
        open_session: SessionOpener | None = None,
        listeners: Sequence[CycleListener] = (),
        phase_listeners: Sequence[PhaseListener] = (),
        observer: EngineObserver | None = None,
        records: CycleRecords | None = None,
        clock: Callable[[], float] = time.time,
        tells: bool = False,
        on_redis_changed: Sequence[Callable[[], None]] = (),
        kept_pauses: KeptPauses | None = None,
    ) -> CycleServices:
        """The services of a replica with ``settings`` on ``redis``; the rest as given
        (``on_redis_changed``: what ``redis_identity`` tells, as it tells the pauses' memory
        to read the hosts' copies again)."""
        slots = settings.cycle_slots()
        pauses = PauseMemory()
        return cls(
            settings=settings,
            redis=redis,
            phases=tuple(phases),
            open_session=open_session,
            listeners=tuple(listeners),
            phase_listeners=tuple(phase_listeners),
            observer=observer or Unobserved(),
            records=records,
            clock=clock,
            stopping=StopSignal(),
            slots=slots,
            free_slots=asyncio.Semaphore(slots),
            redis_outage=RedisOutage(
                settings.redis_url_for_display(), remind_every=settings.redis_down_log_interval
            ),
            ending=CycleEnd(redis, records, settings.redis_socket_timeout),
            fleet_pause=FleetPauseWatch(
                redis,
                every=settings.fleet_pause_read_interval,
                timeout=settings.redis_socket_timeout,
            ),
            pauses=pauses,
            kept_pauses=kept_pauses,
            fleet_versions=FleetVersions(),
            redis_identity=RedisIdentity(
                redis, settings.redis_socket_timeout, [*on_redis_changed, pauses.forget_hosts]
            ),
            tells=tells,
        )
