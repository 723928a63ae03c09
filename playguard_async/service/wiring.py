"""From settings to working parts: the Redis client, the remote options, the engine with its
phases and cycle records, and the process signals that stop it.

The daemon (``daemon.serve``) and the operator's foreground cycle (``operator.cycle.run_cycle``)
are built here alike, so ``playguard cycle`` runs exactly the daemon's engine without importing
what only the daemon needs around it (HTTP endpoints, systemd notifications, metrics).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
from collections.abc import Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import structlog

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.containers_seen import SEEN_REFRESH
from playguard_async.coordination.lock import Lease
from playguard_async.coordination.records import CycleRecords
from playguard_async.desired_state.model import Marquee
from playguard_async.desired_state.source import as_remote
from playguard_async.engine.observer import EngineObserver, Unobserved
from playguard_async.engine.results import CycleListener, CycleResult, PhaseListener
from playguard_async.engine.scheduler import Engine
from playguard_async.engine.services import CycleServices, SessionOpener
from playguard_async.kits.last_written import LastWritten
from playguard_async.phases.decision_copies import MEMORY
from playguard_async.phases.pause_copies import kept_pauses
from playguard_async.phases.protocol import Phase, resolve_phases
from playguard_async.remote.memo import ComposeMemo
from playguard_async.remote.pool import ConnectionPool
from playguard_async.remote.ssh import RemoteOptions, RemoteSession, connect, open_session
from playguard_async.service.connections import inventory_source, redis_for
from playguard_async.settings import Settings, SettingsError

if TYPE_CHECKING:
    from playguard_async.service.tracing import CycleTracer

log = structlog.get_logger("playguard.wiring")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class RemoteLayer:
    """What the replica keeps of its hosts across cycles: the pool of SSH connections, the
    memo of compose's answers, and that of the container listings it kept in Redis.
    ``close()`` it when the replica stops (the daemon does)."""

    def __init__(self, settings: Settings, *, pooled: bool = True) -> None:
        self.settings = settings
        self.options = remote_options(settings)
        self.pool = ConnectionPool(
            functools.partial(connect, options=self.options),
            size=settings.ssh_pool_size if pooled else 0,
            idle_timeout=settings.ssh_pool_idle_timeout,
            check_timeout=settings.ssh_connect_timeout,
        )
        self.compose_memo = ComposeMemo(settings.compose_memo_size)
        self.seen_memo = LastWritten(SEEN_REFRESH)

    def session_opener(self) -> SessionOpener:
        """Opens a cycle's remote session under its lease, dry or not as the cycle says: a
        session of its own on a pooled connection."""

        def opener(
            marquee: Marquee, lease: Lease, dry_run: bool, cycle_id: str, read_through: int | None
        ) -> AbstractAsyncContextManager[RemoteSession]:
            return open_session(
                marquee,
                self.options,
                lease=lease,
                dry_run=dry_run,
                cycle_id=cycle_id,
                read_through=read_through,
                connections=self.pool.connection,
                compose_memo=self.compose_memo,
                seen_memo=self.seen_memo,
            )

        return opener

    async def close(self) -> None:
        await self.pool.close()


def remote_options(settings: Settings) -> RemoteOptions:
    return RemoteOptions(
        connect_timeout=settings.ssh_connect_timeout,
        keepalive_interval=settings.ssh_keepalive_interval,
        keepalive_count_max=settings.ssh_keepalive_count_max,
        command_timeout=settings.remote_command_timeout,
        output_limit=settings.remote_output_limit,
        docker_timeout=settings.docker_api_timeout,
        compose_command=settings.compose_command,
        stuck_after=settings.stuck_after,
        health_grace=settings.health_grace,
        orphan_grace=settings.orphan_grace,
        agent_chat_network=settings.agent_chat_network,
    )


def build_engine(
    settings: Settings,
    *,
    listeners: Sequence[CycleListener] = (),
    phase_listeners: Sequence[PhaseListener] = (),
    observer: EngineObserver | None = None,
    remote: RemoteLayer | None = None,
    redis: RedisClient | None = None,
    phases: Sequence[Phase[Any]] | None = None,
    tells: bool = False,
) -> Engine:
    """An engine for ``settings``; raises on an unknown phase before anything connects.

    What its cycles share (``CycleServices``) is fixed here, nothing is added later. Finished
    cycles are recorded in Redis (in the round trip that releases their lease), then told to
    ``listeners``; each finished phase to ``phase_listeners``. ``remote`` keeps connections and
    compose's answers across cycles; without it, each cycle connects anew and keeps nothing (a
    one-off cycle has nothing to keep them for). ``redis`` is the client for ``settings`` when the
    caller needed it first (``redis_for``; ``close_engine`` closes it); ``phases`` stand in for
    the settings' (a benchmark's no-op phases). ``tells``: its cycles' notices are sent (the
    daemon's, whose change notifier is among the ``listeners``), so news told once is
    recorded as told by its cycles only (``PhaseContext.tells``).
    """
    phases = resolve_phases(settings.phases) if phases is None else phases
    redis = redis_for(settings) if redis is None else redis
    records = CycleRecords(
        redis,
        history_length=settings.history_length,
        history_max_bytes=settings.history_max_bytes,
        record_max_bytes=settings.record_max_bytes,
        timeout=settings.redis_socket_timeout,
    )

    source = inventory_source(settings)
    write_back: list[CycleListener] = []
    if (remote_source := as_remote(source)) is not None:

        async def write_observed(result: CycleResult) -> None:
            if not result.left_alone:
                remote_source.record_cycle(result.to_record())

        write_back.append(write_observed)
    traced: list[CycleListener] = []
    traced_phases: list[PhaseListener] = []
    if settings.otlp_endpoint:
        try:
            from playguard_async.service.tracing import CycleTracer  # noqa: PLC0415
        except ImportError as exc:  # the image and --runtime installs leave the extra out
            raise SettingsError(
                f"otlp_endpoint is set, but OpenTelemetry cannot be imported ({exc}): install "
                "playguard_async[tracing]"
            ) from None
        tracer = CycleTracer(settings, observer or Unobserved())
        observer = tracer
        traced.append(tracer.cycle_finished)
        traced_phases.append(tracer.phase_ended)
    services = CycleServices.build(
        settings,
        redis,
        phases,
        open_session=(remote or RemoteLayer(settings, pooled=False)).session_opener(),
        listeners=[*write_back, *listeners, *traced],
        phase_listeners=[*phase_listeners, *traced_phases],
        observer=observer,
        records=records,
        tells=tells,
        on_redis_changed=[MEMORY.forget_hosts],
        kept_pauses=kept_pauses,
    )
    return Engine(services, source)


async def close_engine(engine: Engine) -> None:
    """Close what ``build_engine`` opened: its Redis client, then a database source's
    connections, once it has written back the observed state its cycles handed over."""
    await engine.redis.aclose()
    if (tracer := engine_tracer(engine)) is not None:
        await tracer.close()
    if (source := as_remote(engine.desired_state)) is not None:
        await source.close()


def engine_tracer(engine: Engine) -> CycleTracer | None:
    """The tracer ``build_engine`` gave ``engine`` when traces are exported (``otlp_endpoint``);
    else None, and nothing of OpenTelemetry is imported."""
    if not engine.services.settings.otlp_endpoint:
        return None
    from playguard_async.service.tracing import CycleTracer  # noqa: PLC0415

    tracer = engine.observer
    assert isinstance(tracer, CycleTracer), "build_engine traces when otlp_endpoint is set"
    return tracer


@contextlib.contextmanager
def stopping_on_signals(engine: Engine) -> Iterator[None]:
    """While the block runs, SIGTERM and SIGINT ask ``engine`` to stop (arq's habit: the handler
    only sets a flag): the first lets cycles finish their phase, a second cancels them at once.
    Must be entered on the running event loop."""
    loop = asyncio.get_running_loop()

    def on_signal(signum: signal.Signals) -> None:
        log.info("signal.received", signal=signum.name)
        engine.request_stop()

    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        yield
    finally:
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)
