"""The engine's reads of the desired state: one at a time, for this replica's share where the
source reads narrow; the last good state kept (and each bad one told once) when a read fails; a
tick's read never holding up the tick; a wake-up's narrow read remembered for its Marquees until a
whole read ends after it.

Apart from the tick loop (``engine.scheduler``) because what the engine believes the desired
state is, and how fresh, is its own question: the tick, the wake-ups and the follow-ups all ask it
here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection

import structlog

from playguard_async.coordination.replicas import ReplicaRoster, Share
from playguard_async.desired_state.model import (
    DesiredStateUnavailable,
    Inventory,
    InventoryError,
    Marquee,
)
from playguard_async.desired_state.source import DesiredState, as_narrow
from playguard_async.engine.results import one_line
from playguard_async.kits.collector import settle_new_desired_state
from playguard_async.settings import Settings

log = structlog.get_logger("playguard.engine")


TICK_READ_WAIT = 0.05
"""Seconds a tick waits for the desired-state read it starts before it goes on with the state in
force: no read may hold up the tick (or the loop) longer than this."""


class DesiredStateReads:
    """What the engine holds of ``source`` (``inventory``), read for the share ``roster`` says."""

    def __init__(self, source: DesiredState, roster: ReplicaRoster, settings: Settings) -> None:
        self.source = source
        self.roster = roster
        self.settings = settings
        self.inventory: Inventory | None = None
        self.waiting_for_desired_state: str | None = None
        """Why the engine has no desired state yet (its source unavailable since start), while it
        runs no cycles; None once it has one, or before the first read."""
        self._reading = asyncio.Lock()
        """One read of the desired state at a time: a tick's, a wake-up's, ``load``'s."""
        self.background_read: asyncio.Task[None] | None = None
        self._read_for: Share | None = None
        """The share the last good read was made for; None when it holds every Marquee (a whole
        read, or a source that reads whole), which covers any share."""
        self._invalid_reported: str | None = None
        """The last ``inventory.invalid`` logged, until a read succeeds: each bad state once."""
        self.woken: dict[str, tuple[float, Inventory]] = {}
        """Marquee -> when a wake-up's narrow read of it ended, and what it read: newer for it
        than ``inventory`` until a whole snapshot ends after it (``newest``)."""

    async def load(self) -> Inventory:
        """Read the desired state now; keep the last good one (and say why) when the new one is bad.

        Reads are one at a time: this waits for a read already running, then reads afresh. Raises
        when there is none to keep (``DesiredStateUnavailable`` while the source is out of reach);
        the tick loop uses ``desired``, which waits that out instead."""
        async with self._reading:
            source = self.source
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
                    exc = InventoryError(f"{self.source.describe()}: {one_line(exc)}")
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
                source=self.source.describe(),
                error=error.summary(),
                problems=error.count,
                keeping="last good desired state",
            )

    async def desired(self) -> Inventory | None:
        """``load``, or None while the source has never been available (a database out of reach
        since start): no cycle runs without a desired state, and the next tick asks again. The
        source logs the outage once per change, not here per tick."""
        try:
            return await self.load()
        except DesiredStateUnavailable:
            return None

    async def for_tick(self) -> Inventory | None:
        """The desired state a tick starts cycles from, without letting a read hold up the tick.

        Starts a read in the background (unless one still runs) and waits for it at most
        ``TICK_READ_WAIT``: an unchanged or small inventory is read by then and a tick uses the
        edit it follows; a slow read (a huge or hostile document, a database that lags) goes on
        in the background while this tick, and the next ones, use the last good state, so the
        ticks keep their cadence. With no desired state yet there is nothing to keep: the read
        is waited for."""
        if self.inventory is None:
            return await self.desired()
        if self.background_read is None or self.background_read.done():
            self.background_read = asyncio.create_task(
                self._read_in_background(), name="desired-state:read"
            )
        wait = TICK_READ_WAIT
        if self._read_for is not None and self.roster.share != self._read_for:
            # The state in force holds another share's rows (a replica died or left since, say):
            # the Marquees handed over wait for this read, up to the start offsets' spread,
            # rather than for the next tick's.
            wait = max(wait, self.settings.tick_jitter * self.settings.tick_interval)
        await asyncio.wait([self.background_read], timeout=wait)
        return self.inventory

    async def _read_in_background(self) -> None:
        """``load`` with a state in force: it keeps it and logs, never raises."""
        await self.desired()

    def newest(self, name: str, inventory: Inventory) -> tuple[Marquee | None, Inventory]:
        """``name``'s Marquee (None: gone, or its rows refused) and the inventory to cycle it
        from: the wake-up's read of it, which is newer than any whole snapshot the engine holds
        (``_forget_superseded``), else ``inventory``."""
        woken = self.woken.get(name)
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
        source = as_narrow(self.source)
        if not self.woken or source is None:
            return
        age = source.snapshot_age()
        if age is not None:
            whole_at = time.monotonic() - age
            self.woken = {name: read for name, read in self.woken.items() if read[0] >= whole_at}

    async def for_wake(self, names: Collection[str]) -> Inventory | None:
        """What a wake-up starts cycles from: a narrow read of ``names`` where the source can,
        remembered for them (``newest``); else a whole read."""
        source = as_narrow(self.source)
        if self.inventory is not None and source is not None:
            async with self._reading:
                narrow = await source.load_marquees(names)
                read_at = time.monotonic()
            if narrow is not None:
                narrow.cohorts_from(self.inventory)  # a rollout's waves are the whole fleet's
                self.woken.update((name, (read_at, narrow)) for name in names)
                return narrow
        return await self.desired()
