"""The web view's answer to "why did this change?": a Marquee's timeline, the one ``playguard
why`` prints, on its own page (``/marquee/{name}/why``), linked from the Marquee's page.

Reading it costs an SSH session to the host (its journal) and a query of the change log, so it
is read only when this page is asked for, never by the live updates (the page carries no live
script), and at most once at a time per Marquee: a request that finds a read of the same
question under way shares it, one that finds another question's waits for it to end first
(``TimelineReads``); how many may wait is bounded per Marquee and per asker, and a request whose
client left before its turn reads nothing. Each read is bounded by ``playguard why``'s own
bounds: a window of at most 7 days, the journal's tail, the cycle records Redis keeps, the
session's connect and command timeouts; a host out of reach is said on the page beside what
Redis and PostgreSQL hold. The page lists the newest ``EVENTS_SHOWN`` events.

The timeline is read by the operator layer (``operator.why``), above this one: the daemon is
given a ``TimelineReader`` by whoever starts it rather than importing it. Everything on the page
is outside input: each text arrives cut as the command line cuts it, control characters are
written out (``kits.textclean.clean``) and the template escapes the rest.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import jinja2
from aiohttp import web

from playguard_async.kits.spans import span_seconds
from playguard_async.kits.textclean import clean
from playguard_async.web.auth import still_there
from playguard_async.web.fleet_table import BadQuery
from playguard_async.web.http_guard import principal_of

DEFAULT_SINCE = "24h"
"""The window asked for when the query names none: ``playguard why``'s default."""

PLAYGROUND_LIMIT = 100
"""Characters a ``playground`` parameter may have."""

EVENTS_SHOWN = 500
"""Events the page lists at most, the newest; how many older ones are left out is said."""

PARAMETERS = ("playground", "since")

WAITERS_PER_MARQUEE = 8
"""Requests that may wait for one Marquee's timeline at once (sharing a read or for their turn)."""

WAITERS_PER_ASKER = 4
"""Requests of one user (or one client address) that may wait for timelines at once."""


class TimelineUnavailable(Exception):
    """The timeline could not be read at all (Redis out of reach): the page says so without the
    reason, which may name addresses; the reader logs it."""


class ShownTimeline(Protocol):
    """What the page reads of a timeline (``operator.why.Timeline``)."""

    @property
    def events(self) -> Sequence[object]: ...


class TimelineReader(Protocol):
    """Reads a Marquee's timeline: ``operator.why.marquee_timeline`` with the daemon's
    settings (``operator.why.timeline_reader``); ``TimelineUnavailable`` when nothing could be
    read."""

    def __call__(
        self, name: str, *, playground: str | None, since: float
    ) -> Awaitable[ShownTimeline]: ...


@dataclass(frozen=True)
class TimelineQuery:
    """What the page's query string asks: one Playground (or all) over the last ``seconds``."""

    playground: str | None
    since: str
    seconds: float

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> TimelineQuery:
        """The query of ``params``; a ``BadQuery`` naming the parameter when one is unknown or
        its value is not one the page can honour."""
        unknown = sorted(set(params) - set(PARAMETERS))
        if unknown:
            raise BadQuery(f"unknown parameter '{clean(unknown[0][:PLAYGROUND_LIMIT])}'")
        playground = params.get("playground", "").strip()
        if len(playground) > PLAYGROUND_LIMIT or not playground.isprintable():
            limit = PLAYGROUND_LIMIT
            raise BadQuery(f"playground must be printable and at most {limit} characters")
        since = params.get("since", "").strip() or DEFAULT_SINCE
        try:
            seconds = span_seconds(since)
        except ValueError as exc:
            raise BadQuery(f"since {clean(str(exc))}") from None
        return cls(playground or None, since, seconds)


class TimelineBusy(Exception):
    """A timeline not read for this request: ``busy`` (too many requests already wait for this
    Marquee's, or for this asker's) or ``gone`` (the asker left before its turn came)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


@dataclass(frozen=True)
class Asker:
    """Who asks for a timeline (a user's name, or a client address when nobody logged in), and
    whether they still wait for it (``wanted``: their client is still connected)."""

    key: str = ""
    wanted: Callable[[], bool] = lambda: True

    @classmethod
    def of(cls, request: web.BaseRequest) -> Asker:
        principal = principal_of(request)
        key = (request.remote or "unknown") if principal is None else principal.identity
        return cls(key, still_there(request))


class TimelineReads:
    """The timelines being read, one Marquee's at a time: a request for a question already
    being read shares its answer; a request for another waits until that read ends. A read
    goes on when its asker leaves, so that the others sharing it still get it; one whose asker
    left before its turn is not begun. At most ``WAITERS_PER_MARQUEE`` requests wait on one
    Marquee and ``WAITERS_PER_ASKER`` for one asker (a user, or a client address): one more is
    refused at once (``TimelineBusy``), so a flood of questions queues no host reads."""

    def __init__(self, read: TimelineReader) -> None:
        self.read = read
        self._reading: dict[str, tuple[TimelineQuery, asyncio.Task[ShownTimeline]]] = {}
        self._waiting: Counter[str] = Counter()
        self._asking: Counter[str] = Counter()

    async def timeline(
        self,
        name: str,
        query: TimelineQuery,
        asker: Asker = Asker(),
    ) -> ShownTimeline:
        """``name``'s timeline for ``query``, asked by ``asker``."""
        who = asker.key
        if self._waiting[name] >= WAITERS_PER_MARQUEE or self._asking[who] >= WAITERS_PER_ASKER:
            raise TimelineBusy("busy")
        self._waiting[name] += 1
        self._asking[who] += 1
        try:
            return await self._turn(name, query, asker.wanted)
        finally:
            for counts, key in ((self._waiting, name), (self._asking, who)):
                counts[key] -= 1
                if counts[key] <= 0:
                    del counts[key]

    async def _turn(
        self, name: str, query: TimelineQuery, wanted: Callable[[], bool]
    ) -> ShownTimeline:
        while (under_way := self._reading.get(name)) is not None:
            asked, task = under_way
            if asked == query:
                return await asyncio.shield(task)
            await asyncio.wait([task])
        if not wanted():
            raise TimelineBusy("gone")
        task = asyncio.ensure_future(self._read(name, query))
        self._reading[name] = (query, task)
        task.add_done_callback(lambda done: self._forget(name, done))
        return await asyncio.shield(task)

    async def _read(self, name: str, query: TimelineQuery) -> ShownTimeline:
        since = datetime.now(UTC).timestamp() - query.seconds
        return await self.read(name, playground=query.playground, since=since)

    def _forget(self, name: str, done: asyncio.Task[ShownTimeline]) -> None:
        under_way = self._reading.get(name)
        if under_way is not None and under_way[1] is done:
            del self._reading[name]

    @property
    def under_way(self) -> int:
        """How many Marquees' timelines are being read now."""
        return len(self._reading)


def stamp(at: float) -> str:
    """A time on the timeline, as ``playguard why`` prints it (UTC)."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S")


def add_filters(environment: jinja2.Environment) -> None:
    """The filters the timeline's template uses: ``visible`` (control characters written
    out) and ``stamp``."""
    environment.filters["visible"] = clean
    environment.filters["stamp"] = stamp


def page_values(name: str, query: TimelineQuery, timeline: ShownTimeline) -> dict[str, Any]:
    """What ``timeline.html`` renders: the newest ``EVENTS_SHOWN`` events, and how many older
    ones it leaves out."""
    events = list(timeline.events)
    return {
        "name": name,
        "query": query,
        "timeline": timeline,
        "events": events[-EVENTS_SHOWN:],
        "left_out": max(0, len(events) - EVENTS_SHOWN),
    }
