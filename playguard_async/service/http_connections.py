"""How many connections the HTTP server holds, and for how long one may wait for its request.

Every connection costs a file, the same files the cycles' SSH sockets, tunnels and Redis pool
need: a client that opens connections and sends nothing must not be able to take them. So:

- **Caps.** The server holds at most ``total`` connections, and at most ``per_client`` from one
  client address (a trusted proxy's address only the total: every client behind it shares it).
  One more is closed as soon as it is accepted, before aiohttp sees it, and counted by reason
  (``connections_total``, ``connections_per_client``) for the metric and the once-a-minute log.
  The daemon sizes ``total`` below the files its cycles may need (``kits.capacity``).
- **Time.** aiohttp closes a connection that has no complete request head within its keep-alive
  timeout, counted from the connection's opening and from the end of each answer; the server is
  given ``http_header_timeout`` as that timeout (``server_arguments``), so a connection that sends
  nothing, or a header line every few seconds, is closed within it, and so is one idle between
  requests. A request being answered (a page's live-update stream) is not cut by it.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections import Counter
from collections.abc import Callable
from typing import Any

import structlog
from aiohttp import web

from playguard_async.kits.capacity import engine_files, http_connection_room, open_files_limit
from playguard_async.settings import Settings

log = structlog.get_logger("playguard.http")

TOTAL = "connections_total"
PER_CLIENT = "connections_per_client"
REFUSALS = (TOTAL, PER_CLIENT)
"""The reasons a connection is refused, the metric's label values."""


def client_address(transport: asyncio.BaseTransport) -> str:
    """The peer's address as text (an IPv4 address mapped into IPv6 as IPv4), ``unknown`` when
    the transport has none."""
    peer = transport.get_extra_info("peername")
    host = peer[0] if isinstance(peer, tuple) and peer else None
    try:
        address = ipaddress.ip_address(host or "")
    except ValueError:
        return "unknown"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


class ConnectionGate:
    """The connections held, in total and by client address; ``admit`` says whether one more may
    be, ``release`` ends one admitted. ``exempt`` addresses count towards the total only."""

    def __init__(
        self,
        total: int,
        per_client: int,
        *,
        exempt: Callable[[str], bool] = lambda _: False,
        on_refused: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.total = total
        self.per_client = per_client
        self.exempt = exempt
        self.on_refused = on_refused
        self.held = 0
        self._by_client: Counter[str] = Counter()

    def admit(self, client: str) -> bool:
        """Whether a connection of ``client`` is held now (then counted until ``release``);
        a refusal is told to ``on_refused`` with its reason."""
        if self.held >= self.total:
            self.on_refused(TOTAL)
            return False
        if self._by_client[client] >= self.per_client and not self.exempt(client):
            self.on_refused(PER_CLIENT)
            return False
        self.held += 1
        self._by_client[client] += 1
        return True

    def release(self, client: str) -> None:
        self.held -= 1
        self._by_client[client] -= 1
        if self._by_client[client] <= 0:
            del self._by_client[client]


class GatedConnection(asyncio.Protocol):
    """One accepted connection: refused by ``gate`` (closed at once, nothing read or written),
    or handed whole to the protocol ``serve`` makes (aiohttp's request handler)."""

    def __init__(self, gate: ConnectionGate, serve: Callable[[], asyncio.Protocol]) -> None:
        self.gate = gate
        self.serve = serve
        self.client = "unknown"
        self.inner: asyncio.Protocol | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.client = client_address(transport)
        if not self.gate.admit(self.client):
            transport.close()  # nothing buffered: the socket is closed on the next turn
            return
        self.inner = self.serve()
        self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.inner is None:
            return
        self.gate.release(self.client)
        self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.inner is not None:
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return None if self.inner is None else self.inner.eof_received()

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()


class GatedSite(web.BaseSite):
    """``web.TCPSite`` with every connection through ``gate`` first."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, gate: ConnectionGate) -> None:
        super().__init__(runner)
        self.host = host
        self.port = port
        self.gate = gate

    @property
    def name(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None, "GatedSite started before runner.setup()"
        self._server = await asyncio.get_running_loop().create_server(
            lambda: GatedConnection(self.gate, server), self.host, self.port, reuse_address=True
        )


def server_arguments(header_timeout: float) -> dict[str, Any]:
    """What ``web.AppRunner`` passes to each connection's request handler: ``header_timeout`` as
    the keep-alive timeout (see the module's docstring)."""
    return {"keepalive_timeout": header_timeout}


def gate_for(
    settings: Settings,
    *,
    exempt: Callable[[str], bool] = lambda _: False,
    on_refused: Callable[[str], None] = lambda _: None,
) -> ConnectionGate:
    """The gate of ``settings``' caps, its total lowered to what the open-files limit leaves
    beside the files the cycles may hold; the figures logged (``http.connection_room``), as a
    warning when the total was lowered."""
    open_files = open_files_limit()
    slots = settings.cycle_slots()
    needs = engine_files(
        slots=slots,
        ssh_pool_size=settings.ssh_pool_size,
        redis_connections=settings.redis_max_connections,
    )
    total = http_connection_room(
        settings.http_connections_max, open_files=open_files, engine_needs=needs
    )
    tell = log.info if total == settings.http_connections_max else log.warning
    tell(
        "http.connection_room",
        open_files=open_files,
        cycle_slots=slots,
        engine_files=needs,
        http_connections_max=total,
        http_connections_wanted=settings.http_connections_max,
        files_left=open_files - needs - total,
    )
    return ConnectionGate(
        total, settings.http_connections_per_client, exempt=exempt, on_refused=on_refused
    )
