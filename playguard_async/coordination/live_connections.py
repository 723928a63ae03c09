"""Pooled Redis connections that are never reused once the event loop has closed them.

When the kernel ends an idle pooled connection (TCP keepalive or TCP_USER_TIMEOUT after a black
hole: ETIMEDOUT), the event loop closes its transport and hands the error to its stream. redis-py
8.1 still takes it for a live connection: its check before reuse (``can_read``) looks for bytes
or EOF in the stream, and there is neither, only the error. The next command is written to the
closed transport, and under uvloop that raises ``RuntimeError`` ("the handler is closed"), which
no caller takes for a Redis error: the web view's fleet picture died of it after a 5 s black hole
(issue 48, ``tests/integration/test_redis_readers.py``). The classes here report such a
connection as stale, so the pool, the Pub/Sub subscriptions it serves and the command channel
(``channel.CommandChannel``) connect anew, as they do after any other broken connection.
"""

from __future__ import annotations

from redis.asyncio.connection import (
    AbstractConnection,
    Connection,
    ConnectionPool,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.asyncio.sentinel import SentinelManagedConnection, SentinelManagedSSLConnection
from redis.exceptions import ConnectionError


class _ClosedTransportIsStale(AbstractConnection):
    """The check that makes a connection whose transport is closed read as stale."""

    async def can_read(self) -> bool:
        writer = self._writer
        if writer is not None and writer.transport.is_closing():
            await self.disconnect(nowait=True)
            raise ConnectionError("the connection's transport was closed under it")
        return await super().can_read()


class LiveConnection(_ClosedTransportIsStale, Connection):
    """``redis://``."""


class LiveSSLConnection(_ClosedTransportIsStale, SSLConnection):
    """``rediss://``."""


class LiveUnixConnection(_ClosedTransportIsStale, UnixDomainSocketConnection):
    """``unix://``."""


class LiveSentinelConnection(_ClosedTransportIsStale, SentinelManagedConnection):
    """Sentinel's primary."""


class LiveSentinelSSLConnection(_ClosedTransportIsStale, SentinelManagedSSLConnection):
    """Sentinel's primary over TLS."""


_LIVE: dict[type[AbstractConnection], type[AbstractConnection]] = {
    Connection: LiveConnection,
    SSLConnection: LiveSSLConnection,
    UnixDomainSocketConnection: LiveUnixConnection,
    SentinelManagedConnection: LiveSentinelConnection,
    SentinelManagedSSLConnection: LiveSentinelSSLConnection,
}


def with_live_connections(pool: ConnectionPool) -> ConnectionPool:
    """``pool``, making its connections (it makes them as they are first needed) of the class
    here that matches the one redis-py chose for its URL; a class of its own is left as it is."""
    pool.connection_class = _LIVE.get(pool.connection_class, pool.connection_class)
    return pool
