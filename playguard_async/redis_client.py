"""One place that builds the Redis client, so every caller gets the same bounded behaviour.

redis-py's default asyncio pool (capped at 100 connections in redis-py 8.1) raises
``MaxConnectionsError`` once its cap is reached instead of waiting: with 10,000 concurrent callers,
9,900 failed. A fleet-sized fan-out would turn that into spurious ``redis_unavailable`` outcomes. A
blocking pool makes callers queue for a connection, and the lock's own per-call timeout still
bounds how long any of them waits.
"""

from __future__ import annotations

from redis.asyncio import BlockingConnectionPool, Redis

from playguard_async.aio import bounded


def connect_redis(
    url: str,
    *,
    socket_timeout: float = 5.0,
    connect_timeout: float = 5.0,
    max_connections: int = 50,
    password: str | None = None,
) -> Redis:
    """A client for ``url`` (redis:// or rediss://) whose calls never wait forever."""
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=connect_timeout,
        socket_timeout=socket_timeout,
        socket_connect_timeout=connect_timeout,
        password=password,
    )
    return Redis.from_pool(pool)


async def redis_answers(redis: Redis, timeout: float) -> bool:
    """Whether Redis answers PING within ``timeout`` seconds; any error or silence is a no.

    The readiness test of /readyz and of systemd's READY=1. It takes a connection from the same
    pool as the locks, so a pool exhausted for longer than ``timeout`` reads as not ready too.
    """
    try:
        return bool(await bounded(timeout, redis.ping()))
    except Exception:
        return False
