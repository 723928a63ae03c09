"""Wiring of one replica's life: settings to Redis, desired state, phases and engine; signals; loop;
and around the engine what operators watch: metrics, the HTTP endpoints, systemd's notifications.

arq's habit: signal handlers only set a flag (``Engine.request_stop``) and work drains on its own;
a second signal cancels at once. The same code runs under systemd, as PID 1 in a container and in a
terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
from collections.abc import AsyncIterator, Callable, Sequence

import structlog
from redis.asyncio import Redis

from playguard_async.aio import background
from playguard_async.endpoints import application, serving
from playguard_async.engine import CycleListener, CycleResult, Engine, EngineObserver, Outcome
from playguard_async.inventory import YamlInventorySource
from playguard_async.metrics import Metrics
from playguard_async.observe import CycleRecords, Liveness
from playguard_async.phase import resolve_phases
from playguard_async.phases import BUILTIN_PHASES
from playguard_async.redis_client import connect_redis, redis_answers
from playguard_async.remote.ssh import RemoteOptions, open_session
from playguard_async.settings import Settings
from playguard_async.systemd import Notifier, report_to_systemd, watchdog_interval

log = structlog.get_logger("playguard.daemon")


def remote_options(settings: Settings) -> RemoteOptions:
    return RemoteOptions(
        connect_timeout=settings.ssh_connect_timeout,
        keepalive_interval=settings.ssh_keepalive_interval,
        command_timeout=settings.remote_command_timeout,
        output_limit=settings.remote_output_limit,
        docker_timeout=settings.docker_api_timeout,
        compose_command=settings.compose_command,
        stuck_after=settings.stuck_after,
        orphan_grace=settings.orphan_grace,
        agent_chat_network=settings.agent_chat_network,
    )


def inventory_source(settings: Settings) -> YamlInventorySource:
    """The desired state the settings name, read within their size and time bounds."""
    return YamlInventorySource(
        settings.inventory,
        max_bytes=settings.inventory_max_bytes,
        timeout=settings.inventory_read_timeout,
    )


def redis_for(settings: Settings) -> Redis:
    return connect_redis(
        settings.redis_url,
        socket_timeout=settings.redis_socket_timeout,
        connect_timeout=settings.redis_connect_timeout,
        max_connections=settings.redis_max_connections,
        password=settings.redis_password.get_secret_value() if settings.redis_password else None,
    )


def build_engine(
    settings: Settings,
    *,
    listeners: Sequence[CycleListener] = (),
    observer: EngineObserver | None = None,
) -> Engine:
    """An engine for ``settings``; raises on an unknown phase before anything connects.

    Finished cycles are recorded in Redis, then told to ``listeners``.
    """
    phases = resolve_phases(settings.phases, BUILTIN_PHASES)
    redis = redis_for(settings)
    records = CycleRecords(
        redis, history_length=settings.history_length, timeout=settings.redis_socket_timeout
    )

    async def record(result: CycleResult) -> None:
        # A cycle that found the Marquee locked did nothing there; the holder's record stands.
        if result.outcome is not Outcome.LOCKED:
            await records.record(result.marquee, result.to_record())

    return Engine(
        settings,
        inventory_source(settings),
        redis,
        phases,
        open_session=functools.partial(
            open_session, options=remote_options(settings), dry_run=settings.dry_run
        ),
        listeners=[record, *listeners],
        observer=observer,
    )


async def serve(settings: Settings, *, stop_after: float | None = None) -> None:
    """Run the daemon until SIGTERM or SIGINT (or ``stop_after`` seconds), then drain and return."""
    metrics = Metrics(outcomes=[outcome.value for outcome in Outcome], lock_ttl=settings.lock_ttl)

    async def count(result: CycleResult) -> None:
        metrics.cycle_finished(result.outcome.value, result.durations)

    engine = build_engine(settings, listeners=[count], observer=metrics)
    metrics.count_in_flight(lambda: len(engine.cycles))
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, _on_signal(engine, signum))
    if stop_after is not None:
        loop.call_later(stop_after, engine.request_stop)
    try:
        async with watched(engine, metrics):
            await engine.run()
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        await engine.redis.aclose()


@contextlib.asynccontextmanager
async def watched(engine: Engine, metrics: Metrics) -> AsyncIterator[None]:
    """What operators watch of a running ``engine``, for as long as the block lasts: the HTTP
    endpoints when ``http_address`` is set, systemd notifications when ``$NOTIFY_SOCKET`` is.

    Both share one liveness test (the tick loop turns) and one readiness test (Redis answers PING),
    and both end after the block, so they still answer while the engine drains.
    """
    settings = engine.settings
    liveness = Liveness(
        interval=settings.tick_interval,
        last_tick=lambda: engine.last_tick,
        draining=engine.stopping.is_set,
    )
    ready = functools.partial(redis_answers, engine.redis, settings.redis_socket_timeout)

    def status_text() -> str:
        return f"{len(engine.cycles)} cycles in flight; {liveness.check().describe()}"

    async with contextlib.AsyncExitStack() as around:
        bind = settings.http_bind()
        if bind is not None:
            app = application(
                liveness=liveness,
                ready=ready,
                ready_timeout=settings.redis_socket_timeout,
                metrics=metrics.handler(),
            )
            await around.enter_async_context(serving(app, *bind))
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


def _on_signal(engine: Engine, signum: signal.Signals) -> Callable[[], None]:
    def handle() -> None:
        log.info("signal.received", signal=signum.name)
        engine.request_stop()

    return handle


def run(settings: Settings, *, stop_after: float | None = None) -> None:
    """Run ``serve`` on the event loop the settings choose."""
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    if settings.event_loop == "uvloop":
        import uvloop  # noqa: PLC0415 - optional at import time, chosen by settings

        loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(serve(settings, stop_after=stop_after))
