"""One place that builds the Redis client, so every caller gets the same bounded behaviour.

redis-py's default asyncio pool (capped at 100 connections in redis-py 8.1) raises
``MaxConnectionsError`` once its cap is reached instead of waiting: with 10,000 concurrent callers,
9,900 failed. A fleet-sized fan-out would turn that into spurious ``redis_unavailable`` outcomes. A
blocking pool makes callers queue for a connection, and the lock's own per-call timeout still
bounds how long any of them waits. A Sentinel client gets the same blocking pool, pointed at
whichever server the sentinels name as primary; a Cluster client the same queueing in front of
redis-py's per-node pools (``BoundedCluster``).

``redis_url`` says which of the three (see ``redis_address``); callers get a ``RedisClient`` and
need not know.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any, TypeAlias

from redis.asyncio import BlockingConnectionPool, Redis, RedisCluster, Sentinel
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterNode, ClusterPipeline
from redis.asyncio.sentinel import SentinelConnectionPool

from playguard_async.coordination.address import RedisAddress, parse_redis_url
from playguard_async.coordination.channel import ChannelledRedis
from playguard_async.kits.aio import bounded

RedisClient: TypeAlias = Redis | RedisCluster
"""What every module holds: a client of one server or Sentinel's primary, or of a Cluster."""

RedisPipeline: TypeAlias = Pipeline | ClusterPipeline
"""``RedisClient.pipeline()`` of either kind."""

KEEPALIVE_PROBES = 3
"""TCP keepalive probes left unanswered before the kernel ends an idle connection."""


class BoundedCluster(RedisCluster):
    """A Cluster client whose callers queue instead of failing: redis-py's per-node pools raise
    ``MaxConnectionsError`` at their cap (as its default single-server pool does), so at most
    ``max_connections`` commands are in flight at once, each node's pool holds twice that (room
    for the pipelines of cycle records, which bypass ``execute_command``), and the lock's own
    timeout still bounds a caller's wait."""

    def __init__(self, *, max_connections: int, **options: Any) -> None:
        super().__init__(max_connections=2 * max_connections, **options)
        self.in_flight = asyncio.Semaphore(max_connections)

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        async with self.in_flight:
            return await super().execute_command(*args, **kwargs)


class _BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """Sentinel's primary discovery with the blocking pool's queueing (see the module's doc)."""


class _SentinelPrimary(ChannelledRedis):
    """The primary's client, which also closes its connections to the sentinels (redis-py's
    closes only the primary's pool and leaves those to the garbage collector)."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        pool = self.connection_pool
        if isinstance(pool, SentinelConnectionPool):
            for sentinel in pool.sentinel_manager.sentinels:
                await sentinel.aclose()


def connect_redis(
    url: str,
    *,
    socket_timeout: float = 5.0,
    connect_timeout: float = 5.0,
    keepalive: float = 0.0,
    max_connections: int = 50,
    password: str | None = None,
    sentinel_password: str | None = None,
    tls_ca_file: Path | None = None,
) -> RedisClient:
    """A client for ``url`` (any form ``redis_address`` reads) whose calls never wait forever.

    ``password`` applies where the URL carries none; ``sentinel_password`` is the sentinels' own.
    ``keepalive`` (seconds, 0: the kernel's defaults) bounds how long a connection to a server
    that vanished without a reset stays open (``keepalive_options``).
    """
    address = parse_redis_url(url)
    options: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": connect_timeout,
        **keepalive_options(keepalive),
        "username": address.username,
        "password": address.password or password,
    }
    tls: dict[str, Any] = {}
    if address.tls:
        tls = {"ssl": True, "ssl_ca_certs": str(tls_ca_file) if tls_ca_file else None}
    if address.mode == "cluster":
        return BoundedCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in address.nodes],
            max_connections=max_connections,
            **options,
            **tls,
        )
    if address.mode == "sentinel":
        return _sentinel_primary(address, options, tls, max_connections, sentinel_password)
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=connect_timeout,
        socket_timeout=socket_timeout,
        socket_connect_timeout=connect_timeout,
        socket_keepalive=options["socket_keepalive"],
        socket_keepalive_options=options["socket_keepalive_options"],
        password=options["password"],
        **({"ssl_ca_certs": tls["ssl_ca_certs"]} if tls else {}),
    )
    return ChannelledRedis.from_pool(pool)


def keepalive_options(seconds: float) -> dict[str, Any]:
    """redis-py's socket options that make the kernel end a dead connection within ``seconds``.

    A black hole (packets dropped, no reset) leaves a TCP connection open for as long as nobody
    sends: an idle pooled connection or the command channel's would look alive until its next
    command timed out. Keepalive probes start after half of ``seconds`` idle and end it after
    ``KEEPALIVE_PROBES`` unanswered probes; TCP_USER_TIMEOUT ends it once sent data has stayed
    unacknowledged for ``seconds``, so a command abandoned in a dead link is dropped by the
    kernel then instead of being retransmitted for minutes and arriving after the link heals.
    0 leaves the kernel's defaults (two hours idle, about fifteen minutes of retransmissions).
    """
    if seconds <= 0:
        return {"socket_keepalive": False, "socket_keepalive_options": None}
    idle = max(1, int(seconds / 2))
    interval = max(1, int(seconds / 2 / KEEPALIVE_PROBES))
    return {
        "socket_keepalive": True,
        "socket_keepalive_options": {
            socket.TCP_KEEPIDLE: idle,
            socket.TCP_KEEPINTVL: interval,
            socket.TCP_KEEPCNT: KEEPALIVE_PROBES,
            socket.TCP_USER_TIMEOUT: int(seconds * 1000),
        },
    }


def _sentinel_primary(
    address: RedisAddress,
    options: dict[str, Any],
    tls: dict[str, Any],
    max_connections: int,
    sentinel_password: str | None,
) -> Redis:
    sentinel_options = {
        "socket_timeout": options["socket_timeout"],
        "socket_connect_timeout": options["socket_connect_timeout"],
        "password": sentinel_password,
        **tls,
    }
    sentinel = Sentinel(list(address.nodes), sentinel_kwargs=sentinel_options)  # type: ignore[no-untyped-call]
    primary: Redis = sentinel.master_for(
        address.service,
        redis_class=_SentinelPrimary,
        connection_pool_class=_BlockingSentinelPool,
        max_connections=max_connections,
        timeout=options["socket_connect_timeout"],
        db=address.db,
        **options,
        **tls,
    )
    return primary


async def redis_answers(redis: RedisClient, timeout: float) -> bool:
    """Whether Redis answers PING within ``timeout`` seconds; any error or silence is a no.

    The readiness test of /readyz and of systemd's READY=1. It takes a connection from the same
    pool as the locks, so a pool exhausted for longer than ``timeout`` reads as not ready too.
    """
    try:
        return bool(await bounded(timeout, redis.ping()))
    except Exception:
        return False
