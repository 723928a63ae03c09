"""The web view of the fleet: pages rendered on the server from the replica's ``FleetPicture``,
and a server-sent event stream that tells open pages a new picture is there. Its forms run
actions (``web.actions``) for users whose role allows them; the pages alone only look.

What is on a page comes from outside (Marquee names, reasons, host output, Redis values), so the
templates are rendered with autoescape on and the Content-Security-Policy allows no inline script:
a reason holding ``<script>`` is text. The one script (live updates) is a static file of this
package; nothing is fetched from elsewhere, and every page works without it. No setting and no
secret reaches a page: pages show what the cycle records and locks hold, which carry none.

An open page costs the replica its stream and a fetch of itself at each new version of the
picture, which comes at most once per ``web_update_interval`` (``FleetPicture``); the pages a
version wakes fetch at once, and each distinct page is rendered once per version and role
bucket and served to the rest (``RenderedPages``), each user's own parts put in as it is served
(``WebActions.fill``). Streams are counted per client address and in total, and one past
either cap is refused (429, 503) before it holds anything.

The pages' pictures are SVG drawn here from what the page already holds (``pictures``): the
health bar once per version, each row's strip once per Marquee and last cycle
(``RecentCycles``), the badges once per distinct state; so a page with them costs about what one
without them did (bench/README.md, "Web view pictures").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from importlib import resources
from typing import Any
from urllib.parse import quote

import jinja2
import structlog
from aiohttp import web
from markupsafe import Markup
from redis.exceptions import RedisError

from playguard_async.coordination.marquee_reads import LastCycle
from playguard_async.cycle_record import revision_short
from playguard_async.web import pictures
from playguard_async.web.actions import ROW_ACTIONS, ActionDesk, WebActions
from playguard_async.web.auth import WebAuth
from playguard_async.web.containers import runs_where, started_shown, utc_time
from playguard_async.web.fleet_picture import FleetPicture
from playguard_async.web.fleet_table import (
    NEVER,
    BadQuery,
    FleetQuery,
    FleetRows,
    findings_of,
    fleet_rows,
    select_page,
)
from playguard_async.web.login import WebLogin
from playguard_async.web.recent_cycles import RecentCycles
from playguard_async.web.timeline import (
    Asker,
    TimelineBusy,
    TimelineQuery,
    TimelineReads,
    TimelineUnavailable,
    page_values,
)
from playguard_async.web.timeline import add_filters as add_timeline_filters

log = structlog.get_logger("playguard.web")

HEARTBEAT = 15.0
"""Seconds between comments on an idle stream: a proxy keeps it open."""

GONE_CHECK = 1.0
"""Seconds between looks at whether a stream's client is still connected: one that left frees
its place this soon (aiohttp does not cancel a handler whose client left)."""

REFUSED_RETRY_AFTER = 30
"""Seconds a refused stream is told to wait (``Retry-After``)."""

REFUSED_LOG_INTERVAL = 60.0
"""Seconds between two ``web.stream_refused`` lines at most: a flood of refusals is one line a
minute, with how many there were."""

HISTORY_LISTED = 20
"""Cycles a Marquee's page lists in its history table (its pictures draw ``CYCLES_DRAWN``)."""

PAGES_KEPT = 32
"""Rendered pages kept for the current version at most (distinct URLs: queries, Marquees)."""

RETRY_MS = 1000
"""How soon (ms) a browser reconnects a stream that ended (a replica restarting)."""

COLUMNS = (
    ("name", "Marquee"),
    ("mode", "Mode"),
    ("paused", "Paused"),
    ("", "Lock holder"),
    ("ttl", "TTL left"),
    ("", "Fence"),
    ("outcome", "Last outcome"),
    ("", "Recent cycles"),
    ("", "Reason"),
    ("duration", "Duration"),
    ("actions", "Actions"),
    ("findings", "Findings"),
    ("age", "Age"),
)
"""The fleet table's columns: sort key (empty: not sortable) and heading."""

ROW_BUTTONS = tuple(zip(ROW_ACTIONS, ("Pause", "Resume", "Cycle now", "Plan"), strict=True))
"""A fleet row's buttons for an operator: action and word."""

STATIC = {
    "web_view.js": "text/javascript",
    "web_view.css": "text/css",
    "favicon.svg": "image/svg+xml",
}
"""The package's static files and their types: the page's script, its stylesheet, and its icon
(without one the browser asks for ``/favicon.ico`` and logs the 404 as a console error)."""

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class StreamSlots:
    """The open streams, counted per client address and in total: a client takes a place before
    its stream holds anything, and gives it back however the stream ends. Memory is bounded by
    the total: a refused client leaves nothing behind."""

    def __init__(self, *, per_client: int, total: int) -> None:
        self.per_client = per_client
        self.total = total
        self.open: dict[str, int] = {}
        """Client address -> its open streams (none: not there)."""
        self.in_all = 0
        self.refused = 0
        """Refusals not yet told in a log line."""
        self._told_at = -math.inf

    def take(self, client: str) -> web.Response | None:
        """None when ``client`` may open one more stream (its place taken), else the answer
        that refuses it."""
        held = self.open.get(client, 0)
        if self.in_all >= self.total:
            why = f"{self.in_all} streams open on this replica, its limit (web_streams_total)"
            refusal = _refusal(503, why)
        elif held >= self.per_client:
            why = f"{held} streams open from {client}, its limit (web_streams_per_client)"
            refusal = _refusal(429, why)
        else:
            self.open[client] = held + 1
            self.in_all += 1
            return None
        self.refused += 1
        now = time.monotonic()
        if now >= self._told_at + REFUSED_LOG_INTERVAL:
            log.warning("web.stream_refused", client=client, why=why, refused=self.refused)
            self.refused, self._told_at = 0, now
        return refusal

    def give_back(self, client: str) -> None:
        self.in_all -= 1
        left = self.open[client] - 1
        if left:
            self.open[client] = left
        else:
            del self.open[client]


def _refusal(status: int, why: str) -> web.Response:
    return web.Response(
        status=status,
        text=f"no live updates: {why}; the page works without them (reload it)\n",
        headers={"Retry-After": str(REFUSED_RETRY_AFTER)},
    )


class RenderedPages:
    """Pages rendered from one version of the picture, by URL, each served again for at most
    ``fresh_for`` seconds (so the ages on it stay that fresh): the pages a new version wakes
    cost one render each, however many browsers show them. At most ``PAGES_KEPT`` are kept, and
    none of an older version. The fleet's rows are kept so too: every query of a version sorts
    and cuts the same rows, built once."""

    def __init__(self, fresh_for: float) -> None:
        self.fresh_for = fresh_for
        self.version = -1
        self._pages: dict[str, tuple[float, bytes]] = {}
        self._rows: tuple[int, float, FleetRows] | None = None

    def rows(self, version: int, build: Callable[[], FleetRows]) -> FleetRows:
        """The fleet's rows at ``version``, built by ``build`` unless kept and fresh."""
        kept = self._rows
        if kept is None or kept[0] != version or time.monotonic() >= kept[1] + self.fresh_for:
            kept = self._rows = (version, time.monotonic(), build())
        return kept[2]

    def get(self, url: str, version: int) -> bytes | None:
        kept = self._pages.get(url) if version == self.version else None
        if kept is None or time.monotonic() >= kept[0] + self.fresh_for:
            return None
        return kept[1]

    def keep(self, url: str, version: int, page: bytes) -> None:
        if version < self.version:  # rendered from a story read before the newest version
            return
        if version > self.version:
            self._pages.clear()
            self.version = version
        self._pages.pop(url, None)
        if len(self._pages) >= PAGES_KEPT:
            del self._pages[next(iter(self._pages))]  # the oldest
        self._pages[url] = (time.monotonic(), page)


def _gone(request: web.Request) -> bool:
    """Whether ``request``'s client has disconnected."""
    transport = request.transport
    return transport is None or transport.is_closing()


def _secs(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f} s" if value < 120 else f"{value / 60:.0f} min"


def templates() -> jinja2.Environment:
    """The package's templates, autoescaped whatever their name, undefined names an error."""
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("playguard_async.web", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    environment.filters["secs"] = _secs
    environment.filters["revision"] = revision_short
    environment.filters["path_part"] = lambda text: quote(str(text), safe="")
    environment.filters["utc_time"] = utc_time
    environment.filters["started"] = started_shown
    environment.globals.update(
        cycle_strip=pictures.cycle_strip,
        duration_chart=pictures.duration_chart,
        actions_chart=pictures.actions_chart,
        longest_text=pictures.longest_text,
        actions_text=pictures.actions_text,
        badges_html=pictures.badges_html,
        rollout_progress=pictures.rollout_progress,
        progress_words=pictures.progress_words,
        cycles_drawn=pictures.CYCLES_DRAWN,
        legend=pictures.LEGEND,
        standing_legend=pictures.STANDING_LEGEND,
        history_listed=HISTORY_LISTED,
    )
    add_timeline_filters(environment)
    return environment


class WebView:
    """The pages and the stream of one replica, served from ``picture``. The application's
    ``HttpGuard`` checks the Host and the credential before any of them runs. At most
    ``streams_per_client`` streams are open from one client address at once, and
    ``streams_total`` from all."""

    def __init__(
        self,
        picture: FleetPicture,
        *,
        replica: str,
        outcomes: Sequence[str],
        stop: asyncio.Event,
        streams_per_client: int,
        streams_total: int,
        auth: WebAuth | None = None,
        desk: ActionDesk | None = None,
        timelines: TimelineReads | None = None,
    ) -> None:
        self.picture = picture
        self.replica = replica
        self.outcomes = list(outcomes)
        self.stop = stop
        self.timelines = timelines
        """The Marquees' ``why`` timelines, read on demand; None: not served."""
        self.environment = templates()
        self.streams = StreamSlots(per_client=streams_per_client, total=streams_total)
        self.pages = RenderedPages(fresh_for=picture.publish_interval)
        self.actions = WebActions(desk, auth, self.environment)
        self.login = None if auth is None else WebLogin(auth, self.environment)
        self.recent = RecentCycles(picture.records)
        self._health: tuple[FleetRows, Markup] | None = None
        self._rendering: dict[str, tuple[int, asyncio.Task[bytes]]] = {}
        """Page key (bucket and URL) -> the render of its page under way, and at which
        version."""
        self.static = {
            name: resources.files("playguard_async.web").joinpath("static", name).read_bytes()
            for name in STATIC
        }

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/", self._guarded(self.fleet))
        app.router.add_get("/marquee/{name}", self._guarded(self.marquee))
        app.router.add_get("/marquee/{name}/why", self._guarded(self.why))
        app.router.add_get("/events", self._guarded(self.events))
        app.router.add_get("/static/{file}", self._guarded(self.static_file))
        self.actions.add_routes(app)
        if self.login is not None:
            self.login.add_routes(app)

    def _guarded(self, handler: _Handler) -> _Handler:
        """``handler`` with a bad query answered as a plain 400."""

        async def guarded(request: web.Request) -> web.StreamResponse:
            try:
                return await handler(request)
            except BadQuery as exc:
                return self._text(400, f"bad query: {exc}\n")

        return guarded

    @staticmethod
    def _text(status: int, text: str, headers: Mapping[str, str] | None = None) -> web.Response:
        return web.Response(status=status, text=text, headers=headers)

    def _page_key(self, request: web.Request) -> tuple[str, str]:
        """Which rendering ``request`` gets (its bucket: with which actions) and the key a
        rendered page is kept and shared under: bucket and URL."""
        bucket = self.actions.bucket(request)
        return bucket, f"{bucket} {request.path_qs}"

    def _render(self, bucket: str, key: str, version: int, template: str, **values: Any) -> bytes:
        """``template`` rendered from the picture at ``version`` for ``bucket``, kept for the
        next asker of ``key`` at that version."""
        page = self._page(bucket, version, template, **values)
        self.pages.keep(key, version, page)
        return page

    def _page(self, bucket: str, version: int, template: str, **values: Any) -> bytes:
        """``template`` rendered from the picture at ``version`` for ``bucket``."""
        picture = self.picture
        read_at = picture.read_at
        html = self.environment.get_template(template).render(
            version=version,
            replica=self.replica,
            error=picture.error,
            read_at="never"
            if read_at is None
            else time.strftime("%H:%M:%S", time.localtime(read_at)),
            **self.actions.page_values(bucket),
            **values,
        )
        return html.encode()

    def _html(self, request: web.Request, page: bytes) -> web.Response:
        page = self.actions.fill(request, page)
        return web.Response(body=page, content_type="text/html", charset="utf-8")

    async def fleet(self, request: web.Request) -> web.StreamResponse:
        (bucket, key), version = self._page_key(request), self.picture.version
        kept = self.pages.get(key, version)
        if kept is not None:
            return self._html(request, kept)
        fleet = self.pages.rows(version, lambda: fleet_rows(self.picture.rows(), time.time()))
        # What a record says is outside input, but an outcome on the page must be filterable.
        seen = set(fleet.counts) - {NEVER, *self.outcomes}
        query = FleetQuery.parse(request.query, [*self.outcomes, *sorted(seen)])
        rendering = self._rendering.get(key)
        if rendering is None or rendering[0] != version:
            # The strips may wait on Redis: the askers of this page meanwhile share its render.
            task = asyncio.ensure_future(self._fleet_page(bucket, key, version, fleet, query))
            rendering = self._rendering[key] = (version, task)
            task.add_done_callback(lambda done: self._rendered(key, done))
        return self._html(request, await asyncio.shield(rendering[1]))

    def _rendered(self, key: str, done: asyncio.Task[bytes]) -> None:
        if self._rendering.get(key, (0, None))[1] is done:
            del self._rendering[key]

    async def _fleet_page(
        self, bucket: str, key: str, version: int, fleet: FleetRows, query: FleetQuery
    ) -> bytes:
        page = select_page(fleet, query)
        # What the strips need of a row beyond the table (its last cycle's id) is taken for
        # the page's rows alone, not in every row's build.
        shown = [self.picture.statuses.get(row.name) for row in page.rows]
        lasts = [(status.name, status.last.cycle) for status in shown if status and status.last]
        badges = {
            row.name: pictures.badges_html(row.mode, row.paused is not None, row.held)
            for row in page.rows
        }
        strips = await self.recent.strips(lasts, read=self.picture.error is None)
        return self._render(
            bucket,
            key,
            version,
            "fleet.html",
            page=page,
            query=query,
            columns=COLUMNS,
            row_actions=ROW_BUTTONS,
            outcomes=[*self.outcomes, "never", "unknown"],
            rollouts=self.picture.rollouts,
            health=self._health_bar(fleet),
            strips=strips,
            badges=badges,
        )

    def _health_bar(self, fleet: FleetRows) -> Markup:
        """The fleet's health bar, drawn once per rows built (once per version), whatever the
        query or page."""
        kept = self._health
        if kept is None or kept[0] is not fleet:
            kept = self._health = (fleet, pictures.health_bar(fleet.standing))
        return kept[1]

    async def marquee(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if request.query:
            raise BadQuery("this page takes no parameters")
        (bucket, key), version = self._page_key(request), self.picture.version
        kept = self.pages.get(key, version)
        if kept is not None:
            return self._html(request, kept)
        if not self.picture.knows(name):
            return self._text(404, "no such Marquee in the desired state\n")
        try:
            story = await self.picture.story(name)
        except (RedisError, TimeoutError, OSError):
            return self._text(503, "Redis unavailable: try again shortly\n")
        now = time.time()

        def age(cycle: LastCycle) -> float | None:
            return None if cycle.finished_at is None else max(0.0, now - cycle.finished_at)

        return self._html(
            request,
            self._render(
                bucket,
                key,
                version,
                "marquee.html",
                story=story,
                age=age,
                now=now,
                runs=runs_where(story),
                findings=findings_of,
                windows=story.windows_text(datetime.now(UTC)),
                rollout_scopes={standing.rollout.scope for standing in self.picture.rollouts},
            ),
        )

    async def why(self, request: web.Request) -> web.StreamResponse:
        """The Marquee's timeline (``web.timeline``): read for each request, never kept."""
        name = request.match_info["name"]
        query = TimelineQuery.parse(request.query)
        if self.timelines is None or not self.picture.knows(name):
            return self._text(404, "no such Marquee in the desired state, or no timeline here\n")
        try:
            timeline = await self.timelines.timeline(name, query, Asker.of(request))
        except TimelineUnavailable:
            return self._text(503, "timeline unavailable (Redis): try again shortly\n")
        except TimelineBusy:
            return self._text(503, "too many timelines asked at once: try again shortly\n")
        values = page_values(name, query, timeline)
        page = self._page(self.actions.bucket(request), self.picture.version, "timeline.html",
                          **values)  # fmt: skip
        return self._html(request, page)

    async def static_file(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["file"]
        if name not in STATIC:
            return self._text(404, "no such file\n")
        return web.Response(body=self.static[name], content_type=STATIC[name])

    async def events(self, request: web.Request) -> web.StreamResponse:
        """The stream: the picture's version (and why it may be stale) now and at each change,
        which is at most once per ``web_update_interval``, and a comment every ``HEARTBEAT``
        seconds; it ends when the replica stops or its client leaves. One past the caps is
        refused (``StreamSlots``) before anything is written."""
        client = request.remote or "unknown"
        refusal = self.streams.take(client)
        if refusal is not None:
            return refusal
        try:
            return await self._stream(request)
        finally:
            self.streams.give_back(client)

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(f"retry: {RETRY_MS}\n\n".encode())
        seen = -1
        quiet_until = time.monotonic() + HEARTBEAT
        while not self.stop.is_set() and not _gone(request):
            if seen != self.picture.version:
                seen = self.picture.version
                data = json.dumps({"version": seen, "error": self.picture.error})
                await response.write(f"data: {data}\n\n".encode())
                quiet_until = time.monotonic() + HEARTBEAT
            elif time.monotonic() >= quiet_until:
                await response.write(b": still here\n\n")
                quiet_until = time.monotonic() + HEARTBEAT
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(GONE_CHECK):
                    await self.picture.changed(seen, self.stop)
        return response
