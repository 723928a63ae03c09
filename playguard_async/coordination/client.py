"""One place that builds the Redis client and its sender, so every caller gets the same bounded
behaviour and coordination's commands leave one way per client (``sender_for``).

redis-py's default asyncio pool (capped at 100 connections in redis-py 8.1) raises
``MaxConnectionsError`` once its cap is reached instead of waiting: with 10,000 concurrent callers,
9,900 failed. A fleet-sized fan-out would turn that into spurious ``redis_unavailable`` outcomes. A
blocking pool makes callers queue for a connection, and the lock's own per-call timeout still
bounds how long any of them waits. A Sentinel client gets the same blocking pool, pointed at
whichever server the sentinels name as primary; a Cluster client the same queueing in front of
redis-py's per-node pools (``BoundedCluster``).

``redis_url`` says which of the three (see ``redis_address``); callers get a ``RedisClient`` and
need not know. The sender (``RedisSender``) is where that choice shows: the client's command
channel, its pool, or its pool with WAIT (``acknowledged``) for ``lock_min_replicas``; the lock,
the cycle's ending and the pause reads send through it.
"""

from __future__ import annotations

import asyncio
import socket
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

from redis.asyncio import BlockingConnectionPool, Redis, RedisCluster, Sentinel
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.sentinel import SentinelConnectionPool
from redis.commands.core import AsyncScript

from playguard_async.coordination.acknowledged import AcknowledgedCall, run_acknowledged
from playguard_async.coordination.address import RedisAddress, parse_redis_url
from playguard_async.coordination.channel import ChannelledRedis, Command, script_command
from playguard_async.coordination.live_connections import with_live_connections
from playguard_async.kits.aio import bounded, kept

RedisClient: TypeAlias = Redis | RedisCluster
"""What every module holds: a client of one server or Sentinel's primary, or of a Cluster."""

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
    return ChannelledRedis.from_pool(with_live_connections(pool))


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
    with_live_connections(primary.connection_pool)
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


# -- the sender: how coordination's commands leave, chosen once per client and bounds ----------


@dataclass(slots=True)
class ScriptCall:
    """One script call, built once and sent as often as needed (a lease's renewal)."""

    script: AsyncScript
    keys: Sequence[str]
    args: Sequence[str | int | bytes]
    replicated: bool
    """A write that counts only once ``lock_min_replicas`` replicas have it."""
    commands: tuple[Command, Command] | None = None
    """The EVALSHA and its EVAL fallback, packed by the channel on first use."""


@dataclass(frozen=True, slots=True)
class Unreplicated:
    """A write that ran but that fewer replicas than asked for acknowledged: a failover now could
    lose it, so it counts as not made."""

    value: Any
    acknowledged: int | None


def script_value(answer: Any) -> Any:
    """The script's own answer, replicated or not."""
    return answer.value if isinstance(answer, Unreplicated) else answer


class RedisSender:
    """How coordination's commands leave for Redis: one of three ways, chosen once per client and
    bound by ``sender_for``; the lock, the cycle's ending and the pause reads all send through it.

    - ``ChannelSender``: one server or a Sentinel primary. Every command goes on the client's
      command channel (``channel.CommandChannel``), which pipelines the commands of every cycle
      on one connection, bounds each answer itself and sends a command whatever becomes of its
      caller.
    - ``PoolSender``: a Cluster. Each command runs on a pool connection of the node that serves
      its key, in a task kept until it ends, bounded by ``timeout``.
    - ``AcknowledgedSender``: ``lock_min_replicas``. As the pool, and each script call that must
      be replicated is followed by WAIT on the connection that made it; an answer short of the
      replicas asked for comes back as ``Unreplicated``.

    A script call may carry ``not_after`` (a moment on the loop's clock): it then reaches the
    script as its last ARGV on Redis's own clock, stamped from a TIME read on the connection that
    carries it, and the call fails with ``TimeoutError`` at that moment (see
    ``lock_scripts.ACQUIRE_SCRIPT``).
    """

    __slots__ = ("redis", "timeout")

    def __init__(self, redis: RedisClient, timeout: float) -> None:
        self.redis = redis
        self.timeout = timeout

    def prepare(
        self,
        script: AsyncScript,
        keys: Sequence[str],
        args: Sequence[str | int | bytes],
        *,
        replicated: bool = False,
    ) -> ScriptCall:
        return ScriptCall(script, keys, args, replicated)

    def call(
        self, call: ScriptCall, *, not_after: float | None = None, patient: bool = False
    ) -> asyncio.Future[Any]:
        """Start ``call`` now. The future holds the script's answer (``Unreplicated`` when the
        write lacks its replicas) or its error, within ``timeout`` (or by ``not_after``), and
        the call runs to its end whatever becomes of whoever awaits it. ``patient``: on the
        channel the answer is kept for as long as the connection lives (a release's answer is
        worth having late, to log it), and whoever waits bounds its own wait."""
        raise NotImplementedError

    def outlasting(self, started: asyncio.Future[Any]) -> Awaitable[Any]:
        """What to await for ``started`` so that the waiter's cancellation leaves it running."""
        raise NotImplementedError

    def send(self, *command: Any) -> asyncio.Future[Any]:
        """One plain command (a GET), sent when this is called, not when awaited: on the channel
        it goes out in the batch of whatever is queued next, so it costs no round trip of its
        own; on a pool it runs beside it. The future raises what Redis raised, or
        ``TimeoutError`` past ``timeout``."""
        raise NotImplementedError

    def send_all(self, commands: list[Command], then: Callable[[list[Any]], None]) -> None:
        """Send ``commands`` in one round trip (not a transaction: they may span slots) and
        hand ``then`` every answer or error, in order, once all are in, whatever becomes of
        the caller; a round trip that failed as a whole gives its error for each."""
        raise NotImplementedError


class ChannelSender(RedisSender):
    """Commands on the client's command channel, each bounded by the channel's own timer."""

    __slots__ = ("channel",)

    def __init__(self, redis: ChannelledRedis, timeout: float) -> None:
        super().__init__(redis, timeout)
        self.channel = redis.channel

    def call(
        self, call: ScriptCall, *, not_after: float | None = None, patient: bool = False
    ) -> asyncio.Future[Any]:
        commands = call.commands
        if commands is None:  # packed once per prepared call: a lease's renewals reuse it
            commands = call.commands = script_command(call.script, call.keys, call.args)
        command, fallback = commands
        if not_after is not None:
            return self.channel.queue(command, fallback, None, not_after=not_after)
        return self.channel.queue(command, fallback, None if patient else self.timeout)

    def outlasting(self, started: asyncio.Future[Any]) -> Awaitable[Any]:
        return started  # the command goes out anyway; a cancelled waiter only drops the answer

    def send(self, *command: Any) -> asyncio.Future[Any]:
        return self.channel.send(*command, timeout=self.timeout)

    def send_all(self, commands: list[Command], then: Callable[[list[Any]], None]) -> None:
        sent = [self.channel.queue(command, None, self.timeout) for command in commands]
        # Commands without a fallback are settled in the order they were queued (see
        # channel): once the last one is, all are.
        sent[-1].add_done_callback(lambda _: then([_outcome(answer) for answer in sent]))


class PoolSender(RedisSender):
    """Commands on pool connections (a Cluster's node for the key), each in a kept task."""

    __slots__ = ("in_flight",)

    def __init__(self, redis: RedisClient, timeout: float) -> None:
        super().__init__(redis, timeout)
        self.in_flight = redis.in_flight if isinstance(redis, BoundedCluster) else None
        """The Cluster client's queue, which a write on a connection of its own joins too."""

    def call(
        self, call: ScriptCall, *, not_after: float | None = None, patient: bool = False
    ) -> asyncio.Future[Any]:
        return kept(bounded(self.timeout, self._run(call, not_after)))

    async def _run(self, call: ScriptCall, not_after: float | None) -> Any:
        if not_after is None:
            return await call.script(keys=list(call.keys), args=list(call.args))
        # The stamp needs TIME on the connection that carries the script.
        stamped = AcknowledgedCall(call.script, call.keys, call.args, 0, 0, not_after)
        value, _ = await run_acknowledged(self.redis, stamped, self.in_flight)
        return value

    def outlasting(self, started: asyncio.Future[Any]) -> Awaitable[Any]:
        return asyncio.shield(started)

    def send(self, *command: Any) -> asyncio.Future[Any]:
        return asyncio.ensure_future(bounded(self.timeout, self.redis.execute_command(*command)))

    def send_all(self, commands: list[Command], then: Callable[[list[Any]], None]) -> None:
        pipelined = kept(self._pipelined(commands))
        pipelined.add_done_callback(
            lambda done: then(
                answers
                if isinstance(answers := _outcome(done), list)
                else [answers] * len(commands)
            )
        )

    async def _pipelined(self, commands: list[Command]) -> list[Any]:
        """Every command's answer or error, in order, from one pipeline within ``timeout``."""
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                for command in commands:
                    pipe.execute_command(*command)
                return list(await bounded(self.timeout, pipe.execute(raise_on_error=False)))
        except Exception as exc:  # the whole round trip failed: every command is unknown
            return [exc] * len(commands)


class AcknowledgedSender(PoolSender):
    """The pool's commands, with each replicated script call followed by WAIT for ``replicas``
    replicas (at most ``wait_ms`` milliseconds) on the same connection."""

    __slots__ = ("replicas", "wait_ms")

    def __init__(self, redis: RedisClient, timeout: float, replicas: int, wait_ms: int) -> None:
        super().__init__(redis, timeout)
        self.replicas = replicas
        self.wait_ms = wait_ms

    async def _run(self, call: ScriptCall, not_after: float | None) -> Any:
        if not call.replicated:
            return await super()._run(call, not_after)
        acknowledged_call = AcknowledgedCall(
            call.script, call.keys, call.args, self.replicas, self.wait_ms, not_after
        )
        value, acknowledged = await run_acknowledged(self.redis, acknowledged_call, self.in_flight)
        if acknowledged is None or acknowledged >= self.replicas:
            return value
        return Unreplicated(value, acknowledged)


_REGISTERED: weakref.WeakKeyDictionary[RedisClient, dict[str, AsyncScript]] = (
    weakref.WeakKeyDictionary()
)


def registered(redis: RedisClient, source: str) -> AsyncScript:
    """``source`` registered with ``redis``, hashed once per client and script: made per cycle
    (a lock, a rollout reading), hashing each time cost more than the work itself
    (bench/README.md). Weak keys: a closed client's scripts go with it."""
    scripts = _REGISTERED.get(redis)
    if scripts is None:
        scripts = _REGISTERED[redis] = {}
    script = scripts.get(source)
    if script is None:
        script = scripts[source] = redis.register_script(source)
    return script


_SENDERS: weakref.WeakKeyDictionary[RedisClient, dict[tuple[float, int, int], RedisSender]] = (
    weakref.WeakKeyDictionary()
)
"""Every sender made, per client and bounds: a lock is made per cycle, its sender once."""


def sender_for(
    redis: RedisClient, *, timeout: float, min_replicas: int = 0, replica_timeout: float = 0.5
) -> RedisSender:
    """The one place the way to Redis is chosen: WAIT needs the writing connection (the pool), a
    Cluster has no channel, everything else goes on the channel. Built once per client and
    bounds (``timeout``; ``min_replicas`` acknowledged within ``replica_timeout``)."""
    wait_ms = max(1, round(replica_timeout * 1000)) if min_replicas else 0
    made = _SENDERS.get(redis)
    if made is None:
        made = _SENDERS[redis] = {}
    bounds = (timeout, min_replicas, wait_ms)
    sender = made.get(bounds)
    if sender is None:
        if min_replicas:
            sender = AcknowledgedSender(redis, timeout, min_replicas, wait_ms)
        elif isinstance(redis, ChannelledRedis):
            sender = ChannelSender(redis, timeout)
        else:
            sender = PoolSender(redis, timeout)
        made[bounds] = sender
    return sender


def _outcome(answer: asyncio.Future[Any]) -> Any:
    """A settled future's result, or its error as a value."""
    if answer.cancelled():
        return ConnectionError("the command's answer was cancelled")
    return answer.exception() or answer.result()
