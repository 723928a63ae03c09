"""One replica's life: the engine ``wiring`` builds, run on the event loop the settings choose,
stopped by SIGTERM or SIGINT, and around it what operators watch: metrics, the HTTP endpoints,
systemd's notifications.

arq's habit: signal handlers only set a flag (``Engine.request_stop``) and work drains on its own;
a second signal cancels at once. The same code runs under systemd, as PID 1 in a container and in a
terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable

from playguard_async.coordination.client import RedisClient, redis_answers
from playguard_async.coordination.marquee_reads import MarqueeStory, read_story
from playguard_async.coordination.records import CycleRecords
from playguard_async.cycle_record import NoticeKind, RolloutFinding
from playguard_async.desired_state.model import Inventory
from playguard_async.desired_state.source import as_remote
from playguard_async.engine.results import CycleResult, Outcome
from playguard_async.engine.scheduler import Engine
from playguard_async.kits.aio import background
from playguard_async.kits.capacity import raise_open_files_limit
from playguard_async.phases.rollout_reads import rollouts_standing
from playguard_async.service.connections import redis_for
from playguard_async.service.endpoints import application, serving
from playguard_async.service.http_connections import gate_for
from playguard_async.service.liveness import Liveness
from playguard_async.service.loop_health import LoopWatch
from playguard_async.service.metrics import GONE_PLAYSPEC, Metrics
from playguard_async.service.notifications import ChangeNotifier, news_of
from playguard_async.service.story import steered_story
from playguard_async.service.systemd import Notifier, report_to_systemd, watchdog_interval
from playguard_async.service.wiring import (
    RemoteLayer,
    build_engine,
    close_engine,
    engine_tracer,
    stopping_on_signals,
)
from playguard_async.settings import Settings
from playguard_async.web.actions import ActionDesk
from playguard_async.web.auth import TrustedProxy, WebAuth
from playguard_async.web.fleet_picture import FleetPicture, Listed
from playguard_async.web.http_guard import HostRule, HttpGuard
from playguard_async.web.pictures import CYCLES_DRAWN
from playguard_async.web.timeline import TimelineReader, TimelineReads
from playguard_async.web.users import UsersFile
from playguard_async.web.view import WebView

READY_WITHIN = 0.75
"""Seconds a readiness test waits for Redis's PING at most (less when ``redis_socket_timeout``
is less): /readyz answers within a second, the probe timeout orchestrators default to, however
long Redis stays silent; a Redis that cannot answer PING that fast is not one to be ready on."""


def rolled_back_playspecs(result: CycleResult, inventory: Inventory | None) -> list[str]:
    """The Playspec of each Playground the cycle rolled back (its ``rolled_back`` notices); one
    the desired state no longer has is counted under ``-``."""
    rolled = [
        notice["subject"]
        for notices in result.notices.values()
        for notice in notices
        if notice["kind"] == NoticeKind.ROLLED_BACK.value
    ]
    if not rolled:
        return []
    playspecs = {
        playground.name: playground.playspec
        for playground in (inventory.playgrounds_on(result.marquee) if inventory else [])
    }
    return [playspecs.get(name, GONE_PLAYSPEC) for name in rolled]


def rollouts_of(result: CycleResult) -> dict[str, RolloutFinding]:
    """The rollouts the cycle took part in (reconcile_playgrounds' ``rollouts`` finding)."""
    found = result.findings.get("reconcile_playgrounds", {}).get("rollouts")
    return found if isinstance(found, dict) else {}


def mode_of(marquee: str, inventory: Inventory | None) -> str:
    """The Marquee's mode in the desired state in force; ``unknown`` for one it no longer has."""
    try:
        return inventory.marquee(marquee).mode if inventory is not None else "unknown"
    except KeyError:
        return "unknown"


async def serve(
    settings: Settings,
    *,
    stop_after: float | None = None,
    desk: ActionDesk | None = None,
    read_timeline: TimelineReader | None = None,
) -> None:
    """Run the daemon until SIGTERM or SIGINT (or ``stop_after`` seconds), then drain and return.
    ``desk`` runs the web view's actions (None: the view only looks); the web view shows a
    Marquee's ``why`` timeline when given ``read_timeline``."""
    # Before the engine sizes its slots from it (``max_concurrent_cycles = "auto"``).
    raise_open_files_limit()
    auth = web_auth(settings)  # a bad users file: refused before anything connects
    metrics = Metrics(
        outcomes=[outcome.value for outcome in Outcome],
        lock_ttl=settings.lock_ttl,
        marquees_shown=settings.metrics_marquees_shown,
    )

    async def count(result: CycleResult) -> None:
        metrics.cycle_finished(result.outcome.value, result.durations)
        rolled_back = rolled_back_playspecs(result, engine.inventory)
        for playspec in rolled_back:
            metrics.rolled_back(playspec)
        for scope, finding in rollouts_of(result).items():
            metrics.rollout_seen(scope, finding)
        health, _ = news_of(result)
        metrics.marquee_finished(
            result.marquee,
            result.outcome.value,
            health,
            result.finished_at,
            mode=mode_of(result.marquee, engine.inventory),
            rolled_back=bool(rolled_back),
        )

    redis = redis_for(settings)
    changes = ChangeNotifier(settings, redis)
    listeners = [count, changes.notify_cycle]
    picture = None
    if settings.http_bind() is not None and settings.web_view:
        picture = fleet_picture(settings, redis, lambda: engine.inventory)
        listeners.append(picture.cycle_ended)
    remote = RemoteLayer(settings)
    engine = build_engine(
        settings, listeners=listeners, observer=metrics, remote=remote, redis=redis, tells=True
    )
    metrics.count_in_flight(lambda: len(engine.cycles))
    if (tracer := engine_tracer(engine)) is not None:
        export = tracer.export
        metrics.watch_spans_lost(lambda: export.dropped, lambda: export.unexported)
    metrics.watch_desired_state_loaded(lambda: engine.inventory is not None)
    metrics.follow_desired_state(lambda: engine.inventory)
    metrics.watch_redis(lambda: engine.redis_outage.down)
    source = as_remote(engine.desired_state)
    if source is not None:
        metrics.watch_desired_state(
            lambda: source.reachable, source.snapshot_age, source.write_failures
        )
        metrics.watch_audit_checkpoints(source.audit_checkpoint_age)
    if stop_after is not None:
        asyncio.get_running_loop().call_later(stop_after, engine.request_stop)
    try:
        with stopping_on_signals(engine):
            async with (
                watched(engine, metrics, auth, picture, desk, read_timeline=read_timeline),
                changes.sending(drain=settings.webhook_timeout),
                listening(engine),
            ):
                await engine.run()
    finally:
        await remote.close()
        await close_engine(engine)


@contextlib.asynccontextmanager
async def listening(engine: Engine) -> AsyncIterator[None]:
    """While the block runs, a desired state that can tell of changes (PostgreSQL's
    LISTEN/NOTIFY) wakes the changed Marquees' cycles early and resyncs after a reconnect."""
    source = as_remote(engine.desired_state)
    if source is None:
        yield
        return
    async with background("desired-state-listener", source.listen(engine.wake, engine.resync)):
        yield


@contextlib.asynccontextmanager
async def watched(
    engine: Engine,
    metrics: Metrics,
    auth: WebAuth | None = None,
    picture: FleetPicture | None = None,
    desk: ActionDesk | None = None,
    *,
    read_timeline: TimelineReader | None = None,
) -> AsyncIterator[None]:
    """What operators watch of a running ``engine``, for as long as the block lasts: the event
    loop's lag and holds (``service.loop_health``, logged and counted whatever else runs), the
    HTTP endpoints when ``http_address`` is set (with the web view of ``picture`` when there is
    one; behind the Host check, and ``auth`` when there is one; its actions run by ``desk``),
    systemd notifications when ``$NOTIFY_SOCKET`` is.

    Both share one liveness test (the tick loop turns) and one readiness test (Redis answers PING,
    the event loop does not lag, the desired state is in reach), and both end after the block, so
    they still answer while the engine drains.
    """
    settings = engine.settings
    liveness = Liveness(
        interval=settings.tick_interval,
        last_tick=lambda: engine.last_tick,
        draining=engine.stopping.is_set,
    )
    ready_within = min(settings.redis_socket_timeout, READY_WITHIN)
    ready = functools.partial(redis_answers, engine.redis, ready_within)
    loop = LoopWatch(bound=settings.loop_lag_bound, on_held=metrics.event_loop_was_held)
    metrics.watch_event_loop(loop.lag)

    def not_ready_because() -> str | None:
        return loop.lagging() or desired_state_missing(engine)

    def status_text() -> str:
        text = f"{len(engine.cycles)} cycles in flight; {liveness.check().describe()}"
        reason = not_ready_because()
        return text if reason is None else f"{text}; {reason}"

    async with contextlib.AsyncExitStack() as around:
        await around.enter_async_context(loop.running())
        bind = settings.http_bind()
        if bind is not None:
            stop = asyncio.Event()
            view = (
                None
                if picture is None
                else web_view(settings, picture, stop, auth, desk, read_timeline=read_timeline)
            )
            guard = HttpGuard(
                HostRule.bound_to(bind[0], settings.http_allowed_hosts),
                auth=auth,
                metrics_require_credential=settings.metrics_require_credential,
            )

            def connection_refused(reason: str) -> None:
                metrics.http_connection_refused(reason)
                guard.refusals.refused(reason)

            gate = gate_for(
                settings,
                exempt=auth.proxy.trusts if auth is not None and auth.proxy else lambda _: False,
                on_refused=connection_refused,
            )
            metrics.watch_http_connections(lambda: gate.held)
            app = application(
                liveness=liveness,
                ready=ready,
                ready_timeout=ready_within,
                metrics=metrics.handler(),
                guard=guard,
                not_ready_because=not_ready_because,
                web_view=view,
            )
            await around.enter_async_context(
                serving(app, *bind, gate=gate, header_timeout=settings.http_header_timeout)
            )
            # Left in this order, the picture stops first, then its streams end (``stop``),
            # so the server's clean-up finds no stream to wait for.
            around.callback(stop.set)
            if view is not None:
                await around.enter_async_context(background("web-view", view.picture.run(stop)))
        notifier = Notifier.from_environment()
        if notifier.enabled:
            report = report_to_systemd(
                notifier,
                ready=ready,
                liveness=liveness,
                status_text=status_text,
                stopping=engine.stopping,
                interval=watchdog_interval() or settings.tick_interval,
            )
            await around.enter_async_context(background("systemd", report))
        yield


def fleet_picture(
    settings: Settings, redis: RedisClient, desired: Callable[[], Inventory | None]
) -> FleetPicture:
    """The picture of the fleet the web view shows: read again as this replica's cycles end (its
    ``cycle_ended``, a cycle listener given to the engine at construction) and whole every
    ``web_refresh_interval``, published to open pages at most once per ``web_update_interval``;
    the Marquees are those of the desired state in force (``desired``)."""

    def names() -> list[Listed]:
        inventory = desired()
        return (
            [Listed(m.name, m.launchable, m.mode) for m in inventory.listed()]
            if inventory is not None
            else []
        )

    records = CycleRecords(
        redis,
        history_length=settings.history_length,
        timeout=settings.redis_socket_timeout,
    )

    async def tell_story(name: str) -> MarqueeStory:
        inventory = desired()
        try:
            marquee = inventory.marquee(name) if inventory is not None else None
        except KeyError:  # gone from the desired state since the page asked
            marquee = None
        if marquee is None:
            return await read_story(records, name, limit=CYCLES_DRAWN)
        return await steered_story(
            records, marquee, settings.windows, limit=CYCLES_DRAWN, inventory=inventory
        )

    return FleetPicture(
        records,
        names,
        interval=settings.web_refresh_interval,
        tell_story=tell_story,
        publish_interval=settings.web_update_interval,
        read_rollouts=lambda: rollouts_standing(redis, settings.redis_socket_timeout),
    )


def web_auth(settings: Settings) -> WebAuth | None:
    """Who may use the HTTP endpoints: the users of ``web_credential_file`` (read now: a bad
    file is a ``SettingsError``) and a trusted proxy's; None when neither is set."""
    users = (
        None if settings.web_credential_file is None else UsersFile(settings.web_credential_file)
    )
    proxy = None
    if settings.web_trusted_proxies:
        proxy = TrustedProxy(settings.web_trusted_proxies, settings.web_proxy_group_roles)
    if users is None and proxy is None:
        return None
    return WebAuth(users, proxy=proxy, secure_cookie=settings.web_cookie_secure)


def web_view(
    settings: Settings,
    picture: FleetPicture,
    stop: asyncio.Event,
    auth: WebAuth | None = None,
    desk: ActionDesk | None = None,
    *,
    read_timeline: TimelineReader | None = None,
) -> WebView:
    """The web view of the fleet ``picture`` shows, its streams ended by ``stop``, who may use
    it told by ``auth``, its actions run by ``desk``; with the Marquees' timelines when there is
    ``read_timeline``."""
    return WebView(
        picture,
        replica=settings.replica_id,
        outcomes=[outcome.value for outcome in Outcome],
        stop=stop,
        streams_per_client=settings.web_streams_per_client,
        streams_total=settings.web_streams_total,
        auth=auth,
        desk=desk,
        timelines=None if read_timeline is None else TimelineReads(read_timeline),
    )


def desired_state_missing(engine: Engine) -> str | None:
    """Why the desired state is out of reach (while the engine runs on its last snapshot), or
    why there is none yet (while the engine runs no cycles); None when neither."""
    source = as_remote(engine.desired_state)
    if source is not None and source.reachable is False:
        reason = f"desired state {source.describe()} unreachable: {source.last_error}"
        return reason if engine.inventory is not None else f"{reason}; no snapshot yet: no cycles"
    if engine.inventory is None and engine.waiting_for_desired_state is not None:
        return f"no desired state yet: no cycles: {engine.waiting_for_desired_state}"
    return None


def run(
    settings: Settings,
    *,
    stop_after: float | None = None,
    desk: ActionDesk | None = None,
    read_timeline: TimelineReader | None = None,
) -> None:
    """Run ``serve`` on the event loop the settings choose."""
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    if settings.event_loop == "uvloop":
        import uvloop  # noqa: PLC0415 - optional at import time, chosen by settings

        loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(serve(settings, stop_after=stop_after, desk=desk, read_timeline=read_timeline))
