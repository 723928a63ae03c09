"""The HTTP endpoints operators and orchestrators probe: /healthz, /readyz and /metrics, and
beside them the web view (``web.view``) when it is on.

/healthz is liveness (does the tick loop still turn?) and /readyz is readiness (does Redis
answer, does the event loop wake on time?): a Redis outage makes a replica unready but not dead,
so a supervisor that restarts on /healthz does not restart every replica at once because Redis
blinked. Bodies are one plain-text line saying why, for a person with curl. Every request passes
``web.http_guard`` first (the Host check, the credential, the security headers).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler

from playguard_async.service.http_connections import ConnectionGate, GatedSite, server_arguments
from playguard_async.service.liveness import Liveness
from playguard_async.web.http_guard import HttpGuard, guard_unrouted, runner_arguments
from playguard_async.web.view import WebView

log = structlog.get_logger("playguard.http")

SHUTDOWN_TIMEOUT = 5.0
"""Seconds a request in flight at shutdown may take to finish (a readiness probe is bounded by the
Redis timeout, a scrape takes milliseconds)."""


def application(
    *,
    liveness: Liveness,
    ready: Callable[[], Awaitable[bool]],
    ready_timeout: float,
    metrics: Handler,
    guard: HttpGuard,
    not_ready_because: Callable[[], str | None] = lambda: None,
    web_view: WebView | None = None,
) -> web.Application:
    """The endpoints as an aiohttp application; ``ready`` answers within ``ready_timeout``;
    ``not_ready_because`` names another reason to be unready (the event loop lagging, the
    desired state out of reach); ``guard`` sees every request first."""

    async def healthz(request: web.Request) -> web.Response:
        pulse = liveness.check()
        return web.Response(status=200 if pulse.alive else 503, text=pulse.describe() + "\n")

    async def readyz(request: web.Request) -> web.Response:
        reason = not_ready_because()
        if reason is not None:
            return web.Response(status=503, text=f"not ready: {reason}\n")
        if await ready():
            return web.Response(text="ready: Redis answers\n")
        return web.Response(
            status=503, text=f"not ready: Redis does not answer PING within {ready_timeout:g} s\n"
        )

    app = web.Application()
    guard.install(app)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    if web_view is not None:
        web_view.add_routes(app)
    return app


@asynccontextmanager
async def serving(
    app: web.Application, host: str, port: int, *, gate: ConnectionGate, header_timeout: float
) -> AsyncIterator[list[str]]:
    """Serve ``app`` on ``host``:``port`` while the block runs, every connection through ``gate``
    and closed when its request's head takes longer than ``header_timeout``
    (``service.http_connections``); yields the bound addresses (port 0 is resolved to the one the
    kernel chose). A port that cannot be bound raises OSError."""
    runner = web.AppRunner(
        app,
        access_log=None,
        shutdown_timeout=SHUTDOWN_TIMEOUT,
        **runner_arguments(app),
        **server_arguments(header_timeout),
    )
    await runner.setup()
    guard_unrouted(runner)
    try:
        await GatedSite(runner, host, port, gate).start()
        addresses = [_display(address) for address in runner.addresses]
        log.info("http.serving", addresses=addresses)
        yield addresses
    finally:
        await runner.cleanup()


def _display(sockname: Sequence[Any]) -> str:
    host, port = sockname[0], sockname[1]  # IPv6 socknames carry flow info and scope id too
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
