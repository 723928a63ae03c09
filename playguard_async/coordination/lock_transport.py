"""How the lock's scripts reach Redis: one interface, three ways, chosen once per lock.

- ``ChannelTransport``: one server or a Sentinel primary. Every call goes on the client's command
  channel (``channel.CommandChannel``), which pipelines the calls of every cycle on one connection,
  bounds each answer itself and sends a call whatever becomes of its caller.
- ``PoolTransport``: a Cluster. Each call runs on a pool connection of the node that serves its
  key, in a task kept until it ends, bounded by the lock's timeout.
- ``AcknowledgedTransport``: ``lock_min_replicas``. As the pool, and each write that must be
  replicated is followed by WAIT on the connection that made it; an answer short of the replicas
  asked for comes back as ``Unreplicated``.

A call may carry ``not_after`` (a moment on the loop's clock): it then reaches the script as its
last ARGV on Redis's own clock, stamped from a TIME read on the connection that carries it, and the
call fails with ``TimeoutError`` at that moment (see ``lock.ACQUIRE_SCRIPT``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from redis.commands.core import AsyncScript

from playguard_async.coordination.channel import ChannelledRedis, Command, script_command
from playguard_async.coordination.client import AcknowledgedCall, RedisClient, run_acknowledged
from playguard_async.kits.aio import bounded, kept


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


class LockTransport(Protocol):
    """Sends the lock's script calls; ``call`` is the one way a lock command leaves."""

    def prepare(
        self,
        script: AsyncScript,
        keys: Sequence[str],
        args: Sequence[str | int | bytes],
        *,
        replicated: bool = False,
    ) -> ScriptCall: ...

    def call(
        self, call: ScriptCall, *, not_after: float | None = None, patient: bool = False
    ) -> asyncio.Future[Any]:
        """Start ``call`` now. The future holds the script's answer (``Unreplicated`` when the
        write lacks its replicas) or its error, within the lock's timeout (or by ``not_after``),
        and the call runs to its end whatever becomes of whoever awaits it. ``patient``: on the
        channel the answer is kept for as long as the connection lives (a release's answer is
        worth having late, to log it), and whoever waits bounds its own wait."""
        ...

    def outlasting(self, started: asyncio.Future[Any]) -> Awaitable[Any]:
        """What to await for ``started`` so that the waiter's cancellation leaves it running."""
        ...


class _Transport:
    """What every transport shares: a call is prepared as its parts; the lock's timeout."""

    __slots__ = ("timeout",)

    def __init__(self, timeout: float) -> None:
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


class ChannelTransport(_Transport):
    """Calls on the client's command channel, each bounded by the channel's own timer."""

    __slots__ = ("channel",)

    def __init__(self, redis: ChannelledRedis, timeout: float) -> None:
        super().__init__(timeout)
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


class PoolTransport(_Transport):
    """Calls on pool connections (a Cluster's node for the key), each in a kept task."""

    __slots__ = ("redis",)

    def __init__(self, redis: RedisClient, timeout: float) -> None:
        super().__init__(timeout)
        self.redis = redis

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


class AcknowledgedTransport(PoolTransport):
    """The pool's calls, with each replicated write followed by WAIT for ``replicas`` replicas
    (at most ``wait_ms`` milliseconds) on the same connection."""

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


def transport_for(
    redis: RedisClient, *, timeout: float, min_replicas: int, replica_timeout: float
) -> LockTransport:
    """The way a lock on ``redis`` sends: WAIT needs the writing connection (the pool), a Cluster
    has no channel, everything else goes on the channel."""
    if min_replicas:
        return AcknowledgedTransport(
            redis, timeout, min_replicas, max(1, round(replica_timeout * 1000))
        )
    if isinstance(redis, ChannelledRedis):
        return ChannelTransport(redis, timeout)
    return PoolTransport(redis, timeout)
