"""How coordination's commands reach Redis: one sender per client and bounds (``sender_for``),
the one place the way is chosen, used by the lock, the cycle's ending and the pause reads.

Three ways (``RedisSender``): the client's command channel (one server, a Sentinel primary), pool
connections (a Cluster), or pool connections with each replicated write followed by WAIT on the
connection that made it (``lock_min_replicas``: ``run_acknowledged``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.connection import Connection
from redis.commands.core import AsyncScript
from redis.crc import key_slot
from redis.exceptions import AskError, MovedError, NoScriptError, ResponseError

from playguard_async.coordination.channel import (
    ChannelledRedis,
    Command,
    ServerClock,
    script_command,
)
from playguard_async.coordination.client import BoundedCluster, RedisClient
from playguard_async.kits.aio import bounded, kept

_REDIRECTS = 3
"""MOVED/ASK answers followed by one acknowledged write before it gives up (a resharding)."""


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

    __slots__ = ()

    def call(
        self, call: ScriptCall, *, not_after: float | None = None, patient: bool = False
    ) -> asyncio.Future[Any]:
        return kept(bounded(self.timeout, self._run(call, not_after)))

    async def _run(self, call: ScriptCall, not_after: float | None) -> Any:
        if not_after is None:
            return await call.script(keys=list(call.keys), args=list(call.args))
        # The stamp needs TIME on the connection that carries the script.
        stamped = AcknowledgedCall(call.script, call.keys, call.args, 0, 0, not_after)
        value, _ = await run_acknowledged(self.redis, stamped)
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
        value, acknowledged = await run_acknowledged(self.redis, acknowledged_call)
        if acknowledged is None or acknowledged >= self.replicas:
            return value
        return Unreplicated(value, acknowledged)


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


@dataclass(frozen=True, slots=True)
class AcknowledgedCall:
    """A script call to be acknowledged: ``WAIT replicas wait_ms`` follows it (none when
    ``replicas`` is 0). With ``not_after`` (a moment on the loop's clock) the script gets that
    moment as its last ARGV, on the server's clock, from a TIME read on the same connection just
    before (see ``redis_channel.ServerClock``)."""

    script: AsyncScript
    keys: Sequence[str]
    args: Sequence[str | int | bytes]
    replicas: int
    wait_ms: int
    not_after: float | None = None


async def run_acknowledged(redis: RedisClient, call: AcknowledgedCall) -> tuple[Any, int | None]:
    """Run ``call.script`` and then WAIT on the same connection, in one round trip; returns the
    script's answer and how many replicas acknowledged it (None when none were asked for).

    WAIT counts the replicas that have every write of *its own connection* so far, so it must
    follow the write on the connection that made it: a pooled ``redis.wait()`` could land on a
    connection that never wrote and count replicas that have nothing. A script missing from the
    server (a new primary after a failover, a node that took over the slot) is sent whole with
    EVAL. On a Cluster the connection is one of the node that serves the first key's slot, and a
    MOVED or ASK answer (a resharding) is followed, as redis-py follows it for other commands.
    """
    if isinstance(redis, RedisCluster):
        queue = redis.in_flight if isinstance(redis, BoundedCluster) else contextlib.nullcontext()
        async with queue:
            return await _run_acknowledged_on_cluster(redis, call)
    pool = redis.connection_pool
    connection = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        return await _write_then_wait(connection, call)
    except BaseException:
        await connection.disconnect()  # a half-read answer must not reach the next caller
        raise
    finally:
        await pool.release(connection)


async def _run_acknowledged_on_cluster(
    cluster: RedisCluster, call: AcknowledgedCall
) -> tuple[Any, int | None]:
    await cluster.initialize()  # a no-op once the client knows the slots
    key = call.keys[0]
    node = _owner(cluster, key)
    asking = False
    for _ in range(_REDIRECTS):
        connection = node.acquire_connection()
        try:
            return await _write_then_wait(connection, call, asking=asking)
        except AskError as answer:  # MovedError is an AskError too
            redirect = answer
        except BaseException:
            await connection.disconnect()
            raise
        finally:
            node.release(connection)
        if isinstance(redirect, MovedError):
            await cluster.nodes_manager.move_slot(redirect)
            node, asking = _owner(cluster, key), False
            continue
        target = cluster.get_node(host=redirect.host, port=redirect.port)
        if target is None:
            await cluster.nodes_manager.initialize()
            target = cluster.get_node(host=redirect.host, port=redirect.port)
        if target is None:
            raise redirect
        node, asking = target, True
    raise MovedError(f"{key_slot(key.encode())} {node.host}:{node.port}")


def _owner(cluster: RedisCluster, key: str) -> ClusterNode:
    """The primary that serves ``key``'s slot, as far as the client knows."""
    node = cluster.get_node_from_key(key)
    if node is None:
        raise MovedError(f"{key_slot(key.encode())} unknown:0")
    return node


async def _write_then_wait(
    connection: Connection, call: AcknowledgedCall, *, asking: bool = False
) -> tuple[Any, int | None]:
    stamp: tuple[int, ...] = ()
    if call.not_after is not None:  # read on this connection: the server that runs the script
        await connection.send_command("TIME")
        answer = await connection.read_response()
        clock = ServerClock.from_answer(answer, time.monotonic())
        stamp = (clock.stamp(call.not_after),)
    arguments = (len(call.keys), *call.keys, *call.args, *stamp)
    wait = ("WAIT", call.replicas, call.wait_ms) if call.replicas else None
    answer, acknowledged = await _send(
        connection, ("EVALSHA", call.script.sha, *arguments), wait, asking
    )
    if isinstance(answer, NoScriptError):
        answer, acknowledged = await _send(
            connection, ("EVAL", call.script.script, *arguments), wait, asking
        )
    if isinstance(answer, ResponseError):
        raise answer
    if isinstance(acknowledged, ResponseError):
        raise acknowledged
    return answer, None if acknowledged is None else int(acknowledged)


async def _send(
    connection: Connection, command: tuple[Any, ...], wait: tuple[Any, ...] | None, asking: bool
) -> tuple[Any, Any]:
    """Send ``command`` and its WAIT (if any) in one write and read every answer, errors as
    values, so the connection is left with nothing unread whatever the server said; the WAIT's
    answer is None when there is none."""
    commands = [*([("ASKING",)] if asking else []), command, *([wait] if wait else [])]
    await connection.send_packed_command(connection.pack_commands(commands))
    answers: list[Any] = []
    for _ in commands:
        try:
            answers.append(await connection.read_response())
        except ResponseError as error:
            answers.append(error)
    return (answers[-2], answers[-1]) if wait else (answers[-1], None)
