"""A script and then WAIT, on the one connection that made the write: what ``lock_min_replicas``
needs (``client.AcknowledgedSender``), and what stamps a script with Redis's own clock on a pool
(TIME read on the same connection, ``client.PoolSender``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis, RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.connection import Connection
from redis.commands.core import AsyncScript
from redis.crc import key_slot
from redis.exceptions import AskError, MovedError, NoScriptError, ResponseError

from playguard_async.coordination.channel import ServerClock

_REDIRECTS = 3
"""MOVED/ASK answers followed by one acknowledged write before it gives up (a resharding)."""


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


async def run_acknowledged(
    redis: Redis | RedisCluster, call: AcknowledgedCall, in_flight: asyncio.Semaphore | None = None
) -> tuple[Any, int | None]:
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
        async with in_flight or contextlib.nullcontext():
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
