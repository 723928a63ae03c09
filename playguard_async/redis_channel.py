"""One connection that carries the lock's commands of every task, pipelined automatically.

The lock's cycle is three short scripts, and a replica runs hundreds of cycles at once. Through
redis-py's pool each command checks a connection out, writes, reads and checks it back in, with
redis-py's per-command bookkeeping around it: that, not Redis, bounded how many cycles a replica
could run. A ``CommandChannel`` instead queues commands while the previous batch is on the wire and
sends the next batch in one write, reading its answers in one pass: one syscall and one wake-up
for many callers.

What callers can rely on:

- A command handed to ``send`` goes out exactly once and in order, whatever its caller does
  meanwhile: cancelling the caller abandons the answer, never the command. So a clean-up queued
  after a command cannot overtake it, and a release needs no task of its own to survive a cancel.
- Each batch is bounded by ``timeout`` (connecting included). A batch that fails (connection lost,
  timeout, a Sentinel primary turned replica) fails every command of it not yet answered, with
  that error; the connection is dropped and the next batch connects anew (through the pool's
  connection class, so a Sentinel client asks the sentinels again).
- An error answer (``ResponseError``) fails only its own command.

Answers are RESP values as read (bytes, int, None, lists), without redis-py's response callbacks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError, NoScriptError, ResponseError

DEFAULT_TIMEOUT = 5.0
"""Bound on one batch's round trip when the pool names no socket timeout, in seconds."""

MAX_BATCH = 1024
"""Commands in one write at most, so one burst cannot hold every other caller behind it."""

_T = TypeVar("_T")
_U = TypeVar("_U")

_Command = tuple[Any, ...]


class CommandChannel:
    """Auto-pipelining sender over one connection made by ``pool`` (see the module's doc)."""

    def __init__(self, pool: ConnectionPool, timeout: float | None = None) -> None:
        self._pool = pool
        configured = pool.connection_kwargs.get("socket_timeout")
        self.timeout: float = timeout or configured or DEFAULT_TIMEOUT
        self._queue: list[tuple[_Command, asyncio.Future[Any]]] = []
        self._connection: AbstractConnection | None = None
        self._sender: asyncio.Task[None] | None = None
        self._closed = False
        self.batches = 0
        """Batches written so far: what benchmarks divide commands by."""

    def send(self, *command: Any) -> asyncio.Future[Any]:
        """Queue ``command``; the future holds its answer or its error. Never blocks."""
        if self._closed:
            raise ConnectionError("Redis command channel is closed")
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Any] = loop.create_future()
        self._queue.append((command, answer))
        if self._sender is None:
            self._sender = loop.create_task(self._send_queued(), name="redis-channel")
        return answer

    async def aclose(self) -> None:
        """Refuse new commands, let the queued ones go out, then close the connection."""
        self._closed = True
        if self._sender is not None:
            await asyncio.wait([self._sender])
        if self._connection is not None:
            await self._connection.disconnect()
            self._connection = None

    async def _send_queued(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
                await self._exchange(batch)
        finally:
            # No await between the empty queue and this: a send() now starts a new sender.
            self._sender = None

    async def _exchange(self, batch: list[tuple[_Command, asyncio.Future[Any]]]) -> None:
        answered = 0
        try:
            async with asyncio.timeout(self.timeout):
                connection = await self._connected()
                packed = connection.pack_commands([command for command, _ in batch])
                await connection.send_packed_command(packed, check_health=False)
                self.batches += 1
                for _, answer in batch:
                    try:
                        value = await connection.read_response()
                    except ResponseError as error:  # read whole: the stream stays in step
                        _settle(answer, error=error)
                    else:
                        _settle(answer, value=value)
                    answered += 1
        except BaseException as error:
            # The connection's state is unknown (half a batch read, a primary demoted): drop it.
            broken, self._connection = self._connection, None
            if broken is not None:
                await asyncio.shield(broken.disconnect(nowait=True))
            failure = error if isinstance(error, Exception) else ConnectionError(repr(error))
            for _, answer in batch[answered:]:
                _settle(answer, error=failure)
            if not isinstance(error, Exception):
                raise

    async def _connected(self) -> AbstractConnection:
        """The channel's connection, made anew when it is closed or holds bytes nobody asked
        for: the check redis-py's pool makes before each use, without a syscall. A server that
        went away between batches (killed, failed over) is seen here, before a batch is lost."""
        connection = self._connection
        if connection is not None:
            try:
                stale = await connection.can_read()
            except (ConnectionError, TimeoutError, OSError):
                stale = True
            if not stale:
                return connection
            self._connection = None
            await connection.disconnect(nowait=True)
        return await self._connect()

    async def _connect(self) -> AbstractConnection:
        # The pool's connection class (SentinelManagedConnection asks the sentinels for the
        # primary in connect()); made, not checked out, so it holds no slot of the pool.
        connection: AbstractConnection = self._pool.make_connection()  # type: ignore[no-untyped-call]
        await connection.connect()  # type: ignore[no-untyped-call]
        self._connection = connection
        return connection


def _settle(
    answer: asyncio.Future[Any], *, value: Any = None, error: Exception | None = None
) -> None:
    if answer.done():
        return
    if error is not None:
        answer.set_exception(error)
    else:
        answer.set_result(value)


def then(source: asyncio.Future[_T], transform: Callable[[_T], _U]) -> asyncio.Future[_U]:
    """A future of ``transform(source's result)``, or of its error; cancelling it leaves
    ``source`` alone."""
    result: asyncio.Future[_U] = source.get_loop().create_future()

    def forward(done: asyncio.Future[_T]) -> None:
        if result.done():
            done.cancelled() or done.exception()  # retrieved: its caller has gone
            return
        if done.cancelled():
            result.cancel()
        elif (error := done.exception()) is not None:
            result.set_exception(error)
        else:
            result.set_result(transform(done.result()))

    source.add_done_callback(forward)
    return result


def run_script(
    channel: CommandChannel, script: AsyncScript, keys: Sequence[Any], args: Sequence[Any]
) -> asyncio.Future[Any]:
    """``script``'s answer by EVALSHA, sent whole by EVAL when Redis lost it (a restart, a new
    primary): NOSCRIPT means the script did not run, so sending it again is safe. Both go out
    whatever the caller does: the future resolves without the caller's task."""
    arguments = (len(keys), *keys, *args)
    result: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def forward(done: asyncio.Future[Any]) -> None:
        error = done.exception()
        if isinstance(error, NoScriptError) and not retried:
            retried.append(True)
            try:
                channel.send("EVAL", script.script, *arguments).add_done_callback(forward)
                return
            except ConnectionError as closed:
                error = closed
        if result.done():
            return
        if error is not None:
            result.set_exception(error)
        else:
            result.set_result(done.result())

    retried: list[bool] = []
    channel.send("EVALSHA", script.sha, *arguments).add_done_callback(forward)
    return result


class ChannelledRedis(Redis):
    """A single-server (or Sentinel primary) client whose lock commands share one
    ``CommandChannel``; every other command uses the pool as redis-py does."""

    _channel: CommandChannel | None = None

    @property
    def channel(self) -> CommandChannel:
        if self._channel is None:
            self._channel = CommandChannel(self.connection_pool)
        return self._channel

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        if self._channel is not None:
            await self._channel.aclose()
        await super().aclose(close_connection_pool)


__all__ = ["ChannelledRedis", "CommandChannel", "run_script", "then"]
