"""The reactor: tick, fan out one cycle per Marquee (``engine.cycle``), wake, follow up, drain.

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
import math
import random
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

import structlog

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.cycle_end import CycleEnd
from playguard_async.coordination.foreign import is_wrong_type
from playguard_async.coordination.keys import RESUME_KEY
from playguard_async.coordination.outage import RedisOutage
from playguard_async.coordination.pause import FleetPauseWatch
from playguard_async.coordination.records import CycleRecords
from playguard_async.coordination.replicas import ReplicaRoster, Share
from playguard_async.desired_state.model import (
    DesiredStateUnavailable,
    Inventory,
    InventoryError,
    Marquee,
)
from playguard_async.desired_state.source import DesiredState, as_narrow
from playguard_async.engine.cycle import Cycle, SessionOpener
from playguard_async.engine.observer import EngineObserver, Unobserved
from playguard_async.engine.results import CycleListener, CycleResult, PhaseListener, one_line
from playguard_async.kits.aio import StopSignal, bounded, detached
from playguard_async.kits.collector import settle_new_desired_state
from playguard_async.phases.protocol import Phase
from playguard_async.settings import Settings

log = structlog.get_logger("playguard.engine")


TICK_READ_WAIT = 0.05
"""Seconds a tick waits for the desired-state read it starts before it goes on with the state in
force: no read may hold up the tick (or the loop) longer than this."""

TICK_ROSTER_WAIT = 0.05
"""The part of a tick that a tick waits at most for the roster's answer (``_tick_roster``): a Redis
slow or gone holds up the tick's start by a twentieth of it (3 s of the default 60 s)."""


class CycleCancelled(Exception):
    """A second stop request cancelled a cycle run by ``Engine.run_one`` in the middle of a phase;
    its lease was released all the same and the Marquee is recorded for resume."""

    def __init__(self, marquee: str) -> None:
        super().__init__(
            f"cycle of {marquee} cancelled in the middle of a phase by a second signal; "
            "its lease was released and it is recorded as interrupted"
        )
        self.marquee = marquee


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
        self.observer: EngineObserver = observer or Unobserved()
        self.inventory: Inventory | None = None
        self.waiting_for_desired_state: str | None = None
        """Why the engine has no desired state yet (its source unavailable since start), while it
        runs no cycles; None once it has one, or before the first read."""
        self._reading = asyncio.Lock()
        """One read of the desired state at a time: a tick's, a wake-up's, ``load_inventory``'s."""
        self._background_read: asyncio.Task[None] | None = None
        self._tick_announce: asyncio.Task[None] | None = None
        self._read_for: Share | None = None
        """The share the last good read was made for; None when it holds every Marquee (a whole
        read, or a source that reads whole), which covers any share."""
        self._invalid_reported: str | None = None
        """The last ``inventory.invalid`` logged, until a read succeeds: each bad state once."""
        self.cycles: dict[str, Cycle] = {}
        """Marquee -> its cycle running here (in ``Cycle.task``), which a wake-up may start early
        (``wake``)."""
        self._follow_ups: set[str] = set()
        """Marquees woken while in a cycle here: each gets one more cycle when that one ends."""
        self._woken: dict[str, tuple[float, Inventory]] = {}
        """Marquee -> when a wake-up's narrow read of it ended, and what it read: newer for it
        than ``inventory`` until a whole snapshot ends after it (``_newest``)."""
        self.stopping = StopSignal()
        self.last_tick: float | None = None
        self.slots = settings.cycle_slots()
        self.free_slots = asyncio.Semaphore(self.slots)
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
        self.ending = CycleEnd(redis, records, settings.redis_socket_timeout)
        self.fleet_pause = FleetPauseWatch(
            redis, every=settings.fleet_pause_read_interval, timeout=settings.redis_socket_timeout
        )
        self.clock: Callable[[], float] = time.time
        """Wall-clock time for maintenance windows; a test injects a fixed one."""

    # -- life --------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """First call: stop ticking and drain at phase boundaries. Second call: cancel at once."""
        if self.stopping.is_set():
            log.warning("engine.stop_now", cycles=len(self.cycles))
            for running in self.cycles.values():
                running.task.cancel()
            return
        log.info("engine.stopping", cycles=len(self.cycles), grace=self.settings.shutdown_grace)
        self.stopping.set()

    async def load_inventory(self) -> Inventory:
        """Read the desired state now; keep the last good one (and say why) when the new one is bad.

        Reads are one at a time: this waits for a read already running, then reads afresh. Raises
        when there is none to keep (``DesiredStateUnavailable`` while the source is out of reach);
        the tick loop uses ``_desired_inventory``, which waits that out instead."""
        async with self._reading:
            source = self.desired_state
            share = None
            if (narrow := as_narrow(source)) is not None:
                # The share the roster says now: a read for it holds its rows alone. Alone
                # (or not sharing), every Marquee is this replica's: a whole read.
                share = self.roster.share
                narrow.set_share(share)
            try:
                inventory = await source.load()
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
                self._report_invalid(exc)
                return self.inventory
            self._invalid_reported = None
            self._read_for = share
            self._forget_superseded()
            if inventory is not self.inventory:
                self.inventory = inventory
                self.waiting_for_desired_state = None
                settle_new_desired_state()
            return inventory

    def _report_invalid(self, error: InventoryError) -> None:
        """``inventory.invalid`` once per distinct refusal: the same bad file or snapshot, read
        again at every tick, is not news; another error, or the same after a good read, is.
        The line shows the first problems and counts the rest."""
        if str(error) != self._invalid_reported:
            self._invalid_reported = str(error)
            log.error(
                "inventory.invalid",
                source=self.desired_state.describe(),
                error=error.summary(),
                problems=error.count,
                keeping="last good desired state",
            )

    async def _desired_inventory(self) -> Inventory | None:
        """``load_inventory``, or None while the source has never been available (a database out
        of reach since start): no cycle runs without a desired state, and the next tick asks
        again. The source logs the outage once per change, not here per tick."""
        try:
            return await self.load_inventory()
        except DesiredStateUnavailable:
            return None

    async def _tick_inventory(self) -> Inventory | None:
        """The desired state a tick starts cycles from, without letting a read hold up the tick.

        Starts a read in the background (unless one still runs) and waits for it at most
        ``TICK_READ_WAIT``: an unchanged or small inventory is read by then and a tick uses the
        edit it follows; a slow read (a huge or hostile document, a database that lags) goes on
        in the background while this tick, and the next ones, use the last good state, so the
        ticks keep their cadence. With no desired state yet there is nothing to keep: the read
        is waited for."""
        if self.inventory is None:
            return await self._desired_inventory()
        if self._background_read is None or self._background_read.done():
            self._background_read = asyncio.create_task(
                self._read_in_background(), name="desired-state:read"
            )
        wait = TICK_READ_WAIT
        if self._read_for is not None and self.roster.share != self._read_for:
            # The state in force holds another share's rows (a replica died or left since, say):
            # the Marquees handed over wait for this read, up to the start offsets' spread,
            # rather than for the next tick's.
            wait = max(wait, self.settings.tick_jitter * self.settings.tick_interval)
        await asyncio.wait([self._background_read], timeout=wait)
        return self.inventory

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

    async def _read_in_background(self) -> None:
        """``load_inventory`` with a state in force: it keeps it and logs, never raises."""
        await self._desired_inventory()

    async def run(self) -> None:
        """Tick until asked to stop, then drain. The first tick runs at once, after this
        replica has announced itself; a stop request hands its Marquees to the others at once.

        A desired state that cannot be read at start raises (a configuration error), except one
        out of reach for now (``DesiredStateUnavailable``): then the ticks run no cycles and ask
        again each time, until one is read."""
        await self.roster.announce()  # first: the first read is then of this replica's share
        try:
            await self._desired_inventory()
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
            slots=self.slots,
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
            for helper in (self._background_read, self._tick_announce):
                if helper is not None:
                    helper.cancel()
                    await asyncio.wait([helper])
            await detached(announcing)

    @property
    def phase_names(self) -> list[str]:
        return [phase.name for phase in self.phases]

    async def tick(self) -> list[asyncio.Task[CycleResult]]:
        """Start a cycle for every Marquee that runs cycles (launchable, mode not ``off``) of this
        replica's share (``replicas``) not already in a cycle here."""
        self.last_tick = time.monotonic()
        await self._tick_roster()
        inventory = await self._tick_inventory()
        if inventory is None:
            log.debug("engine.tick", started=[], waiting_for=self.desired_state.describe())
            return []
        resume_first = await self._resume_order()
        marquees = sorted(
            self._tick_share(inventory),
            key=lambda pair: (pair[0].name not in resume_first, pair[0].name),
        )
        sharing_with = len(self.roster.live) if self.roster.sharing else 0
        self.observer.fleet_shared(sharing_with, len(marquees))
        # A random start offset spreads the share's starts over the tick (and lets replicas that
        # briefly disagree about who is live both win some). Resumed Marquees start at once.
        spread = self.settings.tick_jitter * self.settings.tick_interval
        started = []
        for marquee, source in marquees:
            if marquee.name in self.cycles:
                continue
            delay = 0.0 if marquee.name in resume_first else random.uniform(0.0, spread)
            started.append(self._start_cycle(marquee, source, delay=delay))
        log.debug("engine.tick", started=[t.get_name() for t in started], running=len(self.cycles))
        return started

    def _tick_share(self, inventory: Inventory) -> list[tuple[Marquee, Inventory]]:
        """This replica's Marquees that run cycles, each with the inventory to cycle it from:
        ``inventory``'s, or for a Marquee a wake-up read since, that read's (its mode or
        launchability may have changed there, it may be new or gone)."""
        if not self._woken:
            return [(m, inventory) for m in inventory.cycled_marquees() if self.roster.owns(m.name)]
        share = []
        for name in {m.name for m in inventory.cycled_marquees()} | set(self._woken):
            marquee, source = self._newest(name, inventory)
            if marquee is not None and marquee.runs_cycles and self.roster.owns(name):
                share.append((marquee, source))
        return share

    def _newest(self, name: str, inventory: Inventory) -> tuple[Marquee | None, Inventory]:
        """``name``'s Marquee (None: gone, or its rows refused) and the inventory to cycle it
        from: the wake-up's read of it, which is newer than any whole snapshot the engine holds
        (``_forget_superseded``), else ``inventory``."""
        woken = self._woken.get(name)
        if woken is not None:
            inventory = woken[1]
        try:
            return inventory.marquee(name), inventory
        except KeyError:
            return None, inventory

    def _forget_superseded(self) -> None:
        """After a whole read: drop the wake-up reads its snapshot ended after (it saw what they
        saw, or newer: reads take ``_reading`` one at a time). A source that answered with its
        last snapshot (out of reach) ended none after them, so they stay."""
        source = as_narrow(self.desired_state)
        if not self._woken or source is None:
            return
        age = source.snapshot_age()
        if age is not None:
            whole_at = time.monotonic() - age
            self._woken = {name: read for name, read in self._woken.items() if read[0] >= whole_at}

    async def _wake_inventory(self, names: Collection[str]) -> Inventory | None:
        """What a wake-up starts cycles from: a narrow read of ``names`` where the source can,
        remembered for them (``_newest``); else a whole read."""
        source = as_narrow(self.desired_state)
        if self.inventory is not None and source is not None:
            async with self._reading:
                narrow = await source.load_marquees(names)
                read_at = time.monotonic()
            if narrow is not None:
                self._woken.update((name, (read_at, narrow)) for name in names)
                return narrow
        return await self._desired_inventory()

    async def wake(self, names: Collection[str]) -> list[asyncio.Task[CycleResult]]:
        """Start cycles now for the named Marquees, whose desired state changed (a database's
        notification), from a fresh read of their desired state (``_wake_inventory``): those of
        this replica's share, as a tick would. Its lock still decides.

        A Marquee whose cycle here has not begun (a tick's, waiting out its start offset or for
        a slot) has it start now, from this read (``Cycle.start_now``). One already in a cycle may
        have read its desired state before the change: it gets one follow-up cycle when that
        cycle ends (however many wake-ups came meanwhile, and never two cycles of one Marquee at
        once in one replica)."""
        if self.stopping.is_set():
            return []
        # Every replica hears every notification; each reads the rows of its own share only.
        mine = sorted(name for name in names if self.roster.owns(name))
        inventory = await self._wake_inventory(mine) if mine else None
        if inventory is None:
            return []
        started, following = [], []
        for name in mine:
            marquee, source = self._newest(name, inventory)
            if marquee is None or not marquee.runs_cycles:
                continue
            running = self.cycles.get(name)
            if running is None:
                started.append(self._start_cycle(marquee, source))
            elif running.start_now(marquee, source):
                started.append(running.task)
            else:
                self._follow_ups.add(name)
                following.append(name)
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
        cycle = Cycle(self, marquee, inventory)
        task = cycle.start(delay=delay)
        self.cycles[marquee.name] = cycle
        task.add_done_callback(self._cycle_ended)
        return task

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
        if self.stopping.is_set() or self.inventory is None:
            return
        marquee, inventory = self._newest(name, self.inventory)
        if marquee is not None and marquee.runs_cycles and self.roster.owns(name):
            log.info("engine.follow_up", marquee=name)
            self._start_cycle(marquee, inventory)

    async def drain(self) -> None:
        """Let running cycles reach a phase boundary within the grace, then cancel the rest."""
        cycles = list(self.cycles.values())
        running = [cycle.task for cycle in cycles]
        if running:
            _, late = await asyncio.wait(running, timeout=self.settings.shutdown_grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
        # Those never begun are not logged one by one (a backlog is thousands): counted here.
        not_begun = sum(cycle.result.interrupted_before_start for cycle in cycles)
        log.info("engine.stopped", drained=len(running), not_begun=not_begun)

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
