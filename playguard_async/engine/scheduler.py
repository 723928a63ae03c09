"""The reactor: tick, fan out one cycle per Marquee (``engine.cycle``), wake, drain.

The engine knows phases only through ``playguard_async.phases.protocol``. Its promises:

- a cycle takes a concurrency slot before it takes a lock, so no lease ticks away in a queue;
- a phase runs under a deadline at its lease's deadline, so it never outlives the lease;
- after every phase the lease is renewed, and any doubt about it ends the cycle;
- the lease is released on every way out, cancellation included;
- a stop request lets each cycle finish its current phase, then records the Marquees it interrupted
  so that the next start of any replica reconciles them first.

This module keeps the tick loop: who is live (the roster), which Marquees a tick or a wake-up
cycles and in what order (resumed first). What the desired state is lives in
``engine.desired_reads``, what happens to a cycle once started in ``engine.in_flight``, what
cycles share in ``engine.services``.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Collection

import structlog

from playguard_async import __version__
from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.foreign import is_wrong_type
from playguard_async.coordination.keys import RESUME_KEY
from playguard_async.coordination.outage import RedisOutage
from playguard_async.coordination.replicas import ReplicaRoster
from playguard_async.desired_state.model import Inventory, Marquee
from playguard_async.desired_state.source import DesiredState
from playguard_async.engine.cycle import Cycle
from playguard_async.engine.desired_reads import TICK_READ_WAIT, DesiredStateReads
from playguard_async.engine.in_flight import CyclesInFlight
from playguard_async.engine.observer import EngineObserver
from playguard_async.engine.results import CycleCancelled, CycleResult, one_line
from playguard_async.engine.services import CycleServices
from playguard_async.kits.aio import StopSignal, bounded, detached
from playguard_async.settings import Settings

log = structlog.get_logger("playguard.engine")


TICK_ROSTER_WAIT = 0.05
"""The part of a tick that a tick waits at most for the roster's answer (``_tick_roster``): a Redis
slow or gone holds up the tick's start by a twentieth of it (3 s of the default 60 s)."""


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
    """One replica's reconciler over ``desired_state`` with ``services`` (built by
    ``service.wiring.build_engine``): call ``run()``; call ``request_stop()`` from a signal
    handler."""

    def __init__(self, services: CycleServices, desired_state: DesiredState) -> None:
        self.services = services
        self.desired_state = desired_state
        settings = services.settings
        self.roster = ReplicaRoster(
            services.redis,
            settings.replica_id,
            ttl=settings.tick_interval,
            timeout=settings.redis_socket_timeout,
            version=__version__,
            versions=services.fleet_versions,
        )
        self.reads = DesiredStateReads(desired_state, self.roster, settings)
        self.in_flight = CyclesInFlight(services, self.reads, self.roster)
        self._tick_announce: asyncio.Task[None] | None = None
        self._tick_identity_read: asyncio.Task[bool] | None = None
        self.last_tick: float | None = None

    @property
    def settings(self) -> Settings:
        return self.services.settings

    @property
    def redis(self) -> RedisClient:
        return self.services.redis

    @property
    def observer(self) -> EngineObserver:
        return self.services.observer

    @property
    def stopping(self) -> StopSignal:
        return self.services.stopping

    @property
    def redis_outage(self) -> RedisOutage:
        return self.services.redis_outage

    @property
    def inventory(self) -> Inventory | None:
        """The desired state in force: the last good read (``engine.desired_reads``)."""
        return self.reads.inventory

    @property
    def waiting_for_desired_state(self) -> str | None:
        """Why the engine has no desired state yet (its source unavailable since start), while it
        runs no cycles; None once it has one, or before the first read."""
        return self.reads.waiting_for_desired_state

    @property
    def cycles(self) -> dict[str, Cycle]:
        """Marquee -> its cycle running here."""
        return self.in_flight.cycles

    # -- life --------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """First call: stop ticking and drain at phase boundaries. Second call: cancel at once."""
        if self.stopping.is_set():
            log.warning("engine.stop_now", cycles=len(self.cycles))
            self.in_flight.cancel_all()
            return
        log.info("engine.stopping", cycles=len(self.cycles), grace=self.settings.shutdown_grace)
        self.stopping.set()

    async def load_inventory(self) -> Inventory:
        """Read the desired state now (``DesiredStateReads.load``): the last good one kept when
        the new one is bad; raises when there is none to keep."""
        return await self.reads.load()

    async def _tick_roster(self) -> None:
        """Read who is live (announcing this replica too) as the tick starts, waiting for it at
        most ``TICK_ROSTER_WAIT`` of a tick. A replica dead since is then out of this tick's
        share and of the read it starts, not only after the next heartbeat: its Marquees are
        taken over at the second tick start after its death at the latest (its announcement
        lasts a tick). Redis answers in milliseconds, but not within ``TICK_READ_WAIT`` on a
        loaded machine (8 replicas and PostgreSQL on 2 cores: a third tick start)."""
        if self._tick_announce is None or self._tick_announce.done():
            self._tick_announce = asyncio.create_task(self.roster.announce(), name="replicas:tick")
        wait = max(TICK_READ_WAIT, TICK_ROSTER_WAIT * self.settings.tick_interval)
        await asyncio.wait([self._tick_announce], timeout=wait)

    async def _tick_identity(self) -> None:
        """Whether Redis changed since the last tick (``coordination.identity``: one command),
        before this tick's cycles start, so that they read the hosts' copies again when it did;
        waited for as long as the roster (``_tick_roster``), no longer."""
        if self._tick_identity_read is None or self._tick_identity_read.done():
            self._tick_identity_read = asyncio.create_task(
                self.services.redis_identity.changed(), name="redis-identity:tick"
            )
        wait = max(TICK_READ_WAIT, TICK_ROSTER_WAIT * self.settings.tick_interval)
        await asyncio.wait([self._tick_identity_read], timeout=wait)

    async def run(self) -> None:
        """Tick until asked to stop, then drain. The first tick runs at once, after this
        replica has announced itself; a stop request hands its Marquees to the others at once.

        A desired state that cannot be read at start raises (a configuration error), except one
        out of reach for now (``DesiredStateUnavailable``): then the ticks run no cycles and ask
        again each time, until one is read."""
        await self.roster.announce()  # first: the first read is then of this replica's share
        try:
            await self.reads.desired()
        except BaseException:
            await detached(self.roster.leave())  # no share left unattempted for a ttl
            raise
        announcing = asyncio.create_task(
            self.roster.keep_announcing(self.stopping), name="replicas:announce"
        )
        interval = self.settings.tick_interval
        next_tick = time.monotonic()
        log.info(
            "engine.started",
            replica=self.settings.replica_id,
            phases=self.phase_names,
            slots=self.services.slots,
            live_replicas=len(self.roster.live),
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
                await self.stopping.sleep(next_tick - now)
            await self.drain()
        finally:
            self.stopping.set()
            helpers = (self.reads.background_read, self._tick_announce, self._tick_identity_read)
            for helper in helpers:
                if helper is not None:
                    helper.cancel()
                    await asyncio.wait([helper])
            await detached(announcing)

    @property
    def phase_names(self) -> list[str]:
        return [phase.name for phase in self.services.phases]

    async def tick(self) -> list[asyncio.Task[CycleResult]]:
        """Start a cycle for every Marquee that runs cycles (launchable, mode not ``off``) of this
        replica's share (``replicas``) not already in a cycle here."""
        self.last_tick = time.monotonic()
        await asyncio.gather(self._tick_roster(), self._tick_identity())
        inventory = await self.reads.for_tick()
        if inventory is None:
            log.debug("engine.tick", started=[], waiting_for=self.desired_state.describe())
            return []
        resume_first = await self._resume_order()
        marquees = sorted(
            self._tick_share(inventory),
            key=lambda pair: (pair[0].name not in resume_first, pair[0].name),
        )
        sharing_with = len(self.roster.live) if self.roster.sharing else 0
        self.observer.fleet_shared(sharing_with, frozenset(m.name for m, _ in marquees))
        # A random start offset spreads the share's starts over the tick (and lets replicas that
        # briefly disagree about who is live both win some). Resumed Marquees start at once.
        spread = self.settings.tick_jitter * self.settings.tick_interval
        started = []
        for marquee, source in marquees:
            if marquee.name in self.cycles:
                continue
            delay = 0.0 if marquee.name in resume_first else random.uniform(0.0, spread)
            started.append(self.in_flight.start(marquee, source, delay=delay))
        log.debug("engine.tick", started=[t.get_name() for t in started], running=len(self.cycles))
        return started

    def _tick_share(self, inventory: Inventory) -> list[tuple[Marquee, Inventory]]:
        """This replica's Marquees that run cycles, each with the inventory to cycle it from:
        ``inventory``'s, or for a Marquee a wake-up read since, that read's (its mode or
        launchability may have changed there, it may be new or gone)."""
        if not self.reads.woken:
            return [(m, inventory) for m in inventory.cycled_marquees() if self.roster.owns(m.name)]
        share = []
        for name in {m.name for m in inventory.cycled_marquees()} | set(self.reads.woken):
            marquee, source = self.reads.newest(name, inventory)
            if marquee is not None and marquee.runs_cycles and self.roster.owns(name):
                share.append((marquee, source))
        return share

    async def wake(self, names: Collection[str]) -> list[asyncio.Task[CycleResult]]:
        """Start cycles now for the named Marquees, whose desired state changed (a database's
        notification), from a fresh read of their desired state (``DesiredStateReads.for_wake``):
        those of this replica's share, as a tick would. Its lock still decides.

        A Marquee whose cycle here has not begun (a tick's, waiting out its start offset or for
        a slot) has it start now, from this read (``Cycle.start_now``). One already in a cycle may
        have read its desired state before the change: it gets one follow-up cycle when that
        cycle ends (however many wake-ups came meanwhile, and never two cycles of one Marquee at
        once in one replica)."""
        if self.stopping.is_set():
            return []
        # Every replica hears every notification; each reads the rows of its own share only.
        mine = sorted(name for name in names if self.roster.owns(name))
        inventory = await self.reads.for_wake(mine) if mine else None
        if inventory is None:
            return []
        started, following = [], []
        for name in mine:
            marquee, source = self.reads.newest(name, inventory)
            if marquee is None or not marquee.runs_cycles:
                continue
            task = self.in_flight.wake(marquee, source)
            if task is None:
                following.append(name)
            else:
                started.append(task)
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
        task = self.in_flight.start(marquee, inventory)
        try:
            return await task
        except asyncio.CancelledError:
            caller = asyncio.current_task()
            if caller is not None and caller.cancelling():
                raise
            raise CycleCancelled(marquee.name) from None

    async def drain(self) -> None:
        """Let running cycles reach a phase boundary within the grace, then cancel the rest."""
        await self.in_flight.drain()

    # -- resume records ----------------------------------------------------------------------

    async def _resume_order(self) -> set[str]:
        try:
            names = await bounded(
                self.settings.redis_socket_timeout, self.redis.zrange(RESUME_KEY, 0, -1)
            )
        except Exception as exc:
            if is_wrong_type(exc):  # Redis answered: the key holds another type than ours
                self.redis_outage.answered()
                log.warning("resume.unreadable", key=RESUME_KEY, error=one_line(exc))
                return set()
            self.redis_outage.failed(one_line(exc))
            log.debug("resume.unreadable", error=one_line(exc))
            return set()
        self.redis_outage.answered()
        return {name.decode() if isinstance(name, bytes) else str(name) for name in names}
