"""Wiring of one replica's life: settings to Redis, desired state, phases and engine; signals; loop.

arq's habit: signal handlers only set a flag (``Engine.request_stop``) and work drains on its own;
a second signal cancels at once. The same code runs under systemd, as PID 1 in a container and in a
terminal.
"""

from __future__ import annotations

import asyncio
import functools
import signal
from collections.abc import Callable

import structlog
from redis.asyncio import Redis

from playguard_async.engine import CycleResult, Engine, Outcome
from playguard_async.inventory import YamlInventorySource
from playguard_async.observe import CycleRecords
from playguard_async.phase import resolve_phases
from playguard_async.phases import BUILTIN_PHASES
from playguard_async.redis_client import connect_redis
from playguard_async.remote.ssh import RemoteOptions, open_session
from playguard_async.settings import Settings

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


def redis_for(settings: Settings) -> Redis:
    return connect_redis(
        settings.redis_url,
        socket_timeout=settings.redis_socket_timeout,
        connect_timeout=settings.redis_connect_timeout,
        max_connections=settings.redis_max_connections,
        password=settings.redis_password.get_secret_value() if settings.redis_password else None,
    )


def build_engine(settings: Settings) -> Engine:
    """An engine for ``settings``; raises on an unknown phase before anything connects."""
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
        YamlInventorySource(settings.inventory),
        redis,
        phases,
        open_session=functools.partial(
            open_session, options=remote_options(settings), dry_run=settings.dry_run
        ),
        listeners=[record],
    )


async def serve(settings: Settings, *, stop_after: float | None = None) -> None:
    """Run the daemon until SIGTERM or SIGINT (or ``stop_after`` seconds), then drain and return."""
    engine = build_engine(settings)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, _on_signal(engine, signum))
    if stop_after is not None:
        loop.call_later(stop_after, engine.request_stop)
    try:
        await engine.run()
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        await engine.redis.aclose()


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
