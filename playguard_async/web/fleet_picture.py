"""One picture of the whole fleet per replica, for every browser that watches it.

The web view must cost Redis the same whether one browser or a hundred are open, so no request
reads Redis for the fleet: this picture does, once, and every page and stream is served from it.
(The fleet page's strips read the histories of the rows a page shows, once per Marquee and last
cycle, however many browsers show them: ``recent_cycles``.)
It is read whole at start and every ``interval`` seconds, and a Marquee is read again alone as
soon as a cycle ends on it: this replica's (the engine's cycle listeners, which feed the metrics
too) and every other replica's (the record script publishes the name: ``follow_cycle_ends``). A
whole read also follows each return of that subscription, since Pub/Sub keeps nothing for a
subscriber that was away.

A change bumps ``version`` and wakes the streams, and every open page then fetches itself again
(tens of ms of rendering at 10,000 Marquees): so the picture is published (takes a new version)
at most once per ``publish_interval``. A cycle's end after a quiet interval is read and published
at once; the names that come within the interval after a publication wait for its end, and are
then read (each once) and published together; none is lost. However many cycles end a second, a
page is told of a new version at most once per interval, the pages a publication wakes fetch the
same version (``WebView`` renders each page once per version), and the loop looks over the
desired state once per interval rather than once per cycle end.

A Marquee's page needs more than its row (phases, history, fences): ``story`` reads it once per
version of the picture, however many browsers ask for it at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import structlog
from redis.exceptions import RedisError, ResponseError

from playguard_async.coordination.marquee_reads import (
    MarqueeStatus,
    MarqueeStory,
    read_status,
)
from playguard_async.coordination.records import CycleRecords, follow_cycle_ends
from playguard_async.engine.results import CycleResult, one_line
from playguard_async.phases.rollout_reads import RolloutStanding

log = structlog.get_logger("playguard.web")

READ_BATCH = 200
"""Marquees read at once in a whole read: bounded, so a large fleet does not take every
connection of the pool the cycles need too."""

PENDING_MAX = 10_000
"""Names waiting for a read of their own; past it (a flood on the channel), a whole read."""

UNLOADED_POLL = 0.5
"""Seconds between looks at the engine's desired state while it has none yet."""


@dataclass(frozen=True)
class Listed:
    """A Marquee as the desired state lists it now, what its row needs of it."""

    name: str
    launchable: bool = True
    mode: str = "apply"


@dataclass
class FleetPicture:
    """The fleet as last read from Redis, shared by every request of this replica.

    ``names`` says which Marquees the desired state holds now (the engine's snapshot); ``error``
    is why the last read failed (Redis away), shown as a banner while the rows stay as last read.
    """

    records: CycleRecords
    names: Callable[[], Sequence[Listed]]
    interval: float
    tell_story: Callable[[str], Awaitable[MarqueeStory]]
    """Reads one Marquee's page from Redis (``marquee_reads.read_story`` with what the desired
    state says of its mode and windows)."""
    publish_interval: float
    """Seconds between two publications (new versions) at most (``web_update_interval``)."""
    clock: Callable[[], float] = time.monotonic
    """The clock publications are paced by (a test drives its own)."""
    read_rollouts: Callable[[], Awaitable[list[RolloutStanding]]] | None = None
    """Reads the rollouts not done yet and their healthy counts (``rollout_reads.
    rollouts_standing``), with each whole read; None: the page shows none."""
    statuses: dict[str, MarqueeStatus] = field(default_factory=dict)
    rollouts: list[RolloutStanding] = field(default_factory=list)
    """The rollouts not done yet, as of the last whole read."""
    version: int = 0
    read_at: float | None = None
    """Wall-clock time of the last whole read (for display)."""
    error: str | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _pending: set[str] = field(default_factory=set)
    _whole_due: bool = False
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _stories: dict[str, tuple[int, asyncio.Task[MarqueeStory]]] = field(default_factory=dict)
    _published_at: float = -math.inf

    def rows(self) -> list[MarqueeStatus]:
        """Every Marquee of the desired state, in its order; one not read yet has no lock and no
        last cycle."""
        return [
            self.statuses.get(listed.name)
            or MarqueeStatus(listed.name, listed.launchable, None, None, mode=listed.mode)
            for listed in self.names()
        ]

    def knows(self, name: str) -> bool:
        return any(listed.name == name for listed in self.names())

    async def cycle_ended(self, result: CycleResult) -> None:
        """A cycle listener: read the Marquee again now (not waiting for the whole read)."""
        self._ended(result.marquee)

    def _ended(self, marquee: str) -> None:
        if len(self._pending) < PENDING_MAX:
            self._pending.add(marquee)
        else:
            self._resumed()
        self._wake.set()

    def _resumed(self) -> None:
        self._whole_due = True
        self._wake.set()

    async def changed(self, seen: int, stop: asyncio.Event) -> int:
        """Wait until the version differs from ``seen`` (or ``stop`` is set); the version now.
        The version changes at most once per ``publish_interval``."""
        while self.version == seen and not stop.is_set():
            await _either(self._changed, stop)
        return self.version

    async def story(self, name: str) -> MarqueeStory:
        """``name``'s page as of this version: one read of Redis per version, shared."""
        kept = self._stories.get(name)
        if kept is None or kept[0] != self.version or kept[1].cancelled():
            task = asyncio.ensure_future(self.tell_story(name))
            self._stories[name] = kept = (self.version, task)
        return await asyncio.shield(kept[1])

    async def run(self, stop: asyncio.Event) -> None:
        """Read the whole fleet now and every ``interval`` seconds, and single Marquees as their
        cycles end or first appear in the desired state, until ``stop`` is set."""
        follower = asyncio.ensure_future(
            follow_cycle_ends(self.records.redis, self._ended, self._resumed, stop)
        )
        try:
            await self._follow(stop)
        finally:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower

    async def _follow(self, stop: asyncio.Event) -> None:
        next_whole = 0.0
        while not stop.is_set():
            self._wake.clear()  # a wake while reading below is kept for the wait after it
            held = self._published_at + self.publish_interval - self.clock()
            if held > 0:
                # Published less than publish_interval ago: names (and a whole read falling due)
                # wait for the interval's end, then are read and published at once.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(held):
                        await _either(self._wake, stop)
                continue
            names = list(self.names())
            if names and (self._whole_due or time.monotonic() >= next_whole):
                self._whole_due = False
                await self._read(names)
                await self._read_rollouts()
                self._pending.clear()
                self.read_at = time.time()
                next_whole = time.monotonic() + self.interval
                self._publish()
            else:
                wanted, self._pending = self._pending, set()
                unread = [
                    listed
                    for listed in names
                    if listed.name in wanted or listed.name not in self.statuses
                ]
                if unread:
                    await self._read(unread)
                    self._publish()
            # No desired state yet: look again soon, as the engine loads it without a word.
            wait = UNLOADED_POLL if not names else max(0.0, next_whole - time.monotonic())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await _either(self._wake, stop)
        self._publish()  # wakes the streams: they end

    async def _read(self, marquees: Sequence[Listed]) -> None:
        """Read ``marquees`` batch by batch. One Marquee's read that Redis answers with an error
        is that Marquee's row alone (its ``unreadable``): every other row is still read. A
        Redis that does not answer stops the read; the banner says so."""
        failed: BaseException | None = None
        for start in range(0, len(marquees), READ_BATCH):
            batch = marquees[start : start + READ_BATCH]
            read = await asyncio.gather(
                *(
                    read_status(
                        self.records,
                        listed.name,
                        launchable=listed.launchable,
                        mode=listed.mode,
                    )
                    for listed in batch
                ),
                return_exceptions=True,
            )
            for listed, answer in zip(batch, read, strict=True):
                if isinstance(answer, ResponseError):  # answered: Redis is there
                    status = self._unread(listed, answer)
                elif isinstance(answer, RedisError | TimeoutError | OSError):
                    failed = failed or answer
                    continue
                elif isinstance(answer, BaseException):
                    raise answer
                else:
                    status = answer
                self._note_unreadable(status)
                self.statuses[status.name] = status
            if failed is not None:
                break
        if failed is not None:
            self.error = f"Redis unavailable: {failed or 'no answer'}"
            log.warning("web.read_failed", error=self.error)
        else:
            self.error = None

    async def _read_rollouts(self) -> None:
        """The unfinished rollouts, with each whole read; kept as last read when Redis fails."""
        if self.read_rollouts is None:
            return
        try:
            self.rollouts = await self.read_rollouts()
        except (RedisError, TimeoutError, OSError) as exc:
            log.warning("web.rollouts_unread", error=one_line(exc))

    def _unread(self, listed: Listed, error: ResponseError) -> MarqueeStatus:
        """``listed``'s row as last read, saying why this read of it failed."""
        last = self.statuses.get(listed.name) or MarqueeStatus(
            listed.name, listed.launchable, None, None, mode=listed.mode
        )
        return dataclasses.replace(last, unreadable=(f"not read: {one_line(error)}",))

    def _note_unreadable(self, status: MarqueeStatus) -> None:
        """One log line when a Marquee's unreadable keys change, not one per read."""
        before = self.statuses.get(status.name)
        if status.unreadable and (before is None or before.unreadable != status.unreadable):
            log.warning("web.unreadable", marquee=status.name, keys=list(status.unreadable))

    def _publish(self) -> None:
        self._published_at = self.clock()
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()
        self._stories.clear()


async def _either(first: asyncio.Event, second: asyncio.Event) -> None:
    waiters = [asyncio.ensure_future(first.wait()), asyncio.ensure_future(second.wait())]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
