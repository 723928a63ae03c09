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
- Commands sent one after another without a ``fallback`` and with the same ``timeout`` are
  settled in the order they were queued (one stream, read in order; a failed batch fails its
  unanswered rest at once; their deadlines follow the order of sending), so once the last of
  them is settled, all are.
- A command sent with a ``timeout`` has its answer within that many seconds of ``send`` or a
  ``TimeoutError``, however long it waited behind other batches; the channel keeps one timer for
  all such commands, not one per caller (bench/README.md: what a scope per call cost). The late
  answer is still read, and dropped: the stream stays in step.
- A command sent with ``not_after`` (a moment on the monotonic clock, the loop's) carries that
  moment as its last argument, on the server's clock in microseconds, converted when its batch is
  packed from a TIME read on the very connection that carries it (``ServerClock``,
  ``CLOCK_REFRESH``), never later than the truth. A script that compares it with its own TIME can
  so refuse to run when TCP delivers it late (a retransmission after a network blip), after its
  caller, failed with ``TimeoutError`` at that same moment, may have cleaned up; see
  ``lock_scripts.ACQUIRE_SCRIPT``.

Answers are RESP values as read (bytes, int, None, lists), without redis-py's response callbacks.
The batch packs with hiredis and reads without a timeout per answer (the batch has one), at a
fraction of what redis-py's Python packer and a scope per answer cost (bench/README.md).
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hiredis import pack_command
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError, NoScriptError, ResponseError

DEFAULT_TIMEOUT = 5.0
"""Bound on one batch's round trip when the pool names no socket timeout, in seconds."""

MAX_BATCH = 1024
"""Commands in one write at most, so one burst cannot hold every other caller behind it."""

Command = tuple[Any, ...]
"""One command as ``queue`` takes it: the name, then its arguments."""

CLOCK_REFRESH = 0.5
"""Seconds after which a batch with a stamped command also carries a TIME, ahead of its commands,
whose answer serves the batches after it: no round trip of its own while the channel is busy."""

CLOCK_MAX_AGE = 2.0
"""Seconds after which a ``ServerClock`` no longer stamps: TIME is read, in a round trip of its
own, before the batch goes. With ``CLOCK_RATE_MARGIN`` it bounds what clock-rate drift can do."""

CLOCK_RATE_MARGIN = 0.001
"""Share of the time elapsed since TIME was read that a stamp gives up, should our clock run
faster than the server's: 0.1 %, twice the most ntpd slews a clock by."""

_TIME = pack_command(("TIME",))


@dataclass(frozen=True, slots=True)
class ServerClock:
    """What a Redis server's TIME said, and the moment (``time.monotonic()``) its answer was in.

    The server read its clock between our send and that moment, so ``stamp`` maps a moment of ours
    to one on the server's clock that is never later than the true one (it is early by at most the
    round trip): a deadline stamped this way passes on the server no later than it does here. Only
    the server's own clock is compared with a stamp, by the server; ours never is with its.
    ``time.monotonic()``, not the loop's clock: uvloop's is the one cached at the start of the
    loop's turn, which would date the answer too early and so stamp too late. A deadline on the
    loop's clock is fine (it passes no earlier there than on ``time.monotonic()``).
    """

    server_us: int
    read_at: float

    @classmethod
    def from_answer(cls, answer: Any, read_at: float) -> ServerClock:
        """From TIME's answer (seconds and microseconds as bulk strings), in at ``read_at``."""
        seconds, micros = answer
        return cls(int(seconds) * 1_000_000 + int(micros), read_at)

    def stamp(self, moment: float) -> int:
        """``moment`` (monotonic) on the server's clock, in whole microseconds, rounded down
        and less ``CLOCK_RATE_MARGIN`` of the time since the read."""
        elapsed = (moment - self.read_at) * (1 - CLOCK_RATE_MARGIN)
        return self.server_us + math.floor(elapsed * 1_000_000)


@dataclass(slots=True)
class _Queued:
    command: Command
    answer: asyncio.Future[Any]
    fallback: Command | None = None
    """Sent instead, with the same ``answer``, when Redis answers NOSCRIPT (see ``run_script``)."""
    deadline: float | None = None
    """On the loop's clock: ``answer`` fails with ``TimeoutError`` if still unsettled by then."""
    stamped: bool = False
    """Whether ``deadline`` goes out as the command's last argument, on the server's clock."""

    def stamped_command(self, clock: ServerClock | None) -> Command:
        """The command with its deadline on the server's clock appended; ``clock`` is its
        connection's (``_clock_of`` reads one for every batch that holds a stamped command)."""
        if clock is None or self.deadline is None:
            return self.command  # cannot happen; the script then fails on its missing ARGV
        return (*self.command, clock.stamp(self.deadline))


class CommandChannel:
    """Auto-pipelining sender over one connection made by ``pool`` (see the module's doc)."""

    def __init__(self, pool: ConnectionPool, timeout: float | None = None) -> None:
        self._pool = pool
        configured = pool.connection_kwargs.get("socket_timeout")
        self.timeout: float = timeout or configured or DEFAULT_TIMEOUT
        self._queue: list[_Queued] = []
        self._in_flight: list[_Queued] = []
        self._watch: asyncio.TimerHandle | None = None
        self._watch_at = 0.0
        self._connection: AbstractConnection | None = None
        self._clock: ServerClock | None = None
        """TIME as read on ``_connection``; None until a stamped command needs it."""
        self._sender: asyncio.Task[None] | None = None
        self._idle: asyncio.Future[None] | None = None
        self._closed = False
        self.batches = 0
        """Batches written so far: what benchmarks divide commands by."""

    def send(
        self,
        *command: Any,
        fallback: Command | None = None,
        timeout: float | None = None,
        not_after: float | None = None,
    ) -> asyncio.Future[Any]:
        """Queue ``command``; the future holds its answer or its error, a ``TimeoutError`` when
        ``timeout`` seconds pass without an answer, or once ``not_after`` (loop clock) passes;
        with ``not_after`` the command also carries that moment as its last argument, on the
        server's clock (see the module's doc). Never blocks.

        A caller that stops waiting may cancel the future: the command goes out all the same,
        but its ``fallback`` (if any) does not, since nobody wants its answer."""
        return self.queue(command, fallback, timeout, not_after=not_after)

    def queue(
        self,
        command: Command,
        fallback: Command | None = None,
        timeout: float | None = None,
        *,
        not_after: float | None = None,
    ) -> asyncio.Future[Any]:
        """``send`` for a command already in a tuple, with no copy of it made."""
        if self._closed:
            raise ConnectionError("Redis command channel is closed")
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Any] = loop.create_future()
        queued = _Queued(command, answer, fallback)
        if not_after is not None:
            queued.deadline, queued.stamped = not_after, True
        elif timeout is not None:
            queued.deadline = loop.time() + timeout
        if queued.deadline is not None:
            self._watch_until(loop, queued.deadline)
        self._queue.append(queued)
        if self._sender is None:
            self._sender = loop.create_task(self._send_queued(), name="redis-channel")
        elif self._idle is not None and not self._idle.done():
            self._idle.set_result(None)
        return answer

    async def aclose(self) -> None:
        """Refuse new commands, let the queued ones go out, then close the connection."""
        self._closed = True
        if self._sender is not None:
            if self._idle is not None and not self._idle.done():
                self._idle.set_result(None)
            await asyncio.wait([self._sender])
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        if self._connection is not None:
            await self._connection.disconnect()
            self._connection = None

    async def _send_queued(self) -> None:
        """The one sender: a batch whenever commands wait, else idle until ``send`` wakes it
        (cheaper than a task per batch when callers come one at a time)."""
        loop = asyncio.get_running_loop()
        try:
            while self._queue or not self._closed:
                if not self._queue:
                    self._idle = loop.create_future()
                    await self._idle
                    continue
                batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
                self._in_flight = batch
                await self._exchange(batch)
                self._in_flight = []
        finally:
            self._sender = self._idle = None
            self._in_flight = []

    def _watch_until(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        """Have ``_expire`` run by ``deadline``: one timer, at the earliest deadline pending."""
        if self._watch is not None:
            if self._watch_at <= deadline:
                return
            self._watch.cancel()
        self._watch, self._watch_at = loop.call_at(deadline, self._expire), deadline

    def _expire(self) -> None:
        """Fail the answers whose deadline passed, in flight or queued; watch for the next."""
        self._watch = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        upcoming: float | None = None
        for queued in itertools.chain(self._in_flight, self._queue):
            if queued.deadline is None or queued.answer.done():
                continue
            if queued.deadline <= now:
                queued.answer.set_exception(TimeoutError("Redis did not answer in time"))
            elif upcoming is None or queued.deadline < upcoming:
                upcoming = queued.deadline
        if upcoming is not None:
            self._watch_until(loop, upcoming)

    async def _exchange(self, batch: list[_Queued]) -> None:
        answered = 0
        retries: list[_Queued] = []
        try:
            async with asyncio.timeout(self.timeout):
                connection = await self._connected()
                clock, refresh = await self._clock_of(connection, batch)
                # Inline, not a method per command: this line runs for every command sent.
                packed = b"".join(
                    [
                        pack_command(q.stamped_command(clock) if q.stamped else q.command)
                        for q in batch
                    ]
                )
                await connection.send_packed_command(
                    _TIME + packed if refresh else packed, check_health=False
                )
                self.batches += 1
                if refresh:
                    await self._read_clock(connection)
                for queued in batch:
                    try:
                        value = await connection.read_response()
                    except NoScriptError as error:  # the script did not run: safe to resend
                        if queued.fallback is not None and not queued.answer.done():
                            retry = _Queued(
                                queued.fallback, queued.answer, None, queued.deadline,
                                queued.stamped,
                            )  # fmt: skip
                            retries.append(retry)
                        else:
                            _settle(queued.answer, error=error)
                    except ResponseError as error:  # read whole: the stream stays in step
                        _settle(queued.answer, error=error)
                    else:
                        _settle(queued.answer, value=value)
                    answered += 1
        except BaseException as error:
            # The connection's state is unknown (half a batch read, a primary demoted): drop it.
            broken, self._connection = self._connection, None
            if broken is not None:
                await asyncio.shield(broken.disconnect(nowait=True))
            failure = error if isinstance(error, Exception) else ConnectionError(repr(error))
            for queued in [*retries, *batch[answered:]]:
                _settle(queued.answer, error=failure)
            if not isinstance(error, Exception):
                raise
        else:
            # Ahead of what was queued meanwhile: a clean-up sent after a command whose
            # script was missing must still follow it.
            self._queue[:0] = retries

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

    async def _clock_of(
        self, connection: AbstractConnection, batch: list[_Queued]
    ) -> tuple[ServerClock | None, bool]:
        """The connection's ``ServerClock`` when ``batch`` holds a stamped command (TIME is read
        on it first when it has none, or one older than ``CLOCK_MAX_AGE``), and whether the
        batch should carry a TIME to refresh it (``CLOCK_REFRESH``)."""
        for queued in batch:
            if queued.stamped:
                break
        else:
            return None, False
        clock = self._clock
        if clock is None or time.monotonic() - clock.read_at > CLOCK_MAX_AGE:
            await connection.send_packed_command(_TIME, check_health=False)
            return await self._read_clock(connection), False
        return clock, time.monotonic() - clock.read_at > CLOCK_REFRESH

    async def _read_clock(self, connection: AbstractConnection) -> ServerClock:
        """Read the answer of a TIME sent on ``connection``, as its ``ServerClock`` from now."""
        answer = await connection.read_response()
        self._clock = ServerClock.from_answer(answer, time.monotonic())
        return self._clock

    async def _connect(self) -> AbstractConnection:
        # The pool's connection class (SentinelManagedConnection asks the sentinels for the
        # primary in connect()); made, not checked out, so it holds no slot of the pool.
        connection: AbstractConnection = self._pool.make_connection()  # type: ignore[no-untyped-call]
        connection.socket_timeout = None  # each batch is bounded whole by ``_exchange``
        await connection.connect()  # type: ignore[no-untyped-call]
        self._connection, self._clock = connection, None
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


def script_command(
    script: AsyncScript, keys: Sequence[Any], args: Sequence[Any]
) -> tuple[Command, Command]:
    """A call of ``script`` as ``queue`` takes it: EVALSHA, and the EVAL sent instead when Redis
    lost the script (a restart, a new primary). NOSCRIPT means the script did not run, so
    sending it again whole is safe."""
    arguments = (len(keys), *keys, *args)
    return ("EVALSHA", script.sha, *arguments), ("EVAL", script.script, *arguments)


def run_script(
    channel: CommandChannel,
    script: AsyncScript,
    keys: Sequence[Any],
    args: Sequence[Any],
    *,
    timeout: float | None = None,
    not_after: float | None = None,
) -> asyncio.Future[Any]:
    """``script``'s answer (see ``script_command``); ``timeout`` or ``not_after`` bound the
    EVALSHA and its EVAL together, as ``send``'s, and ``not_after`` goes out as the last ARGV."""
    return channel.queue(*script_command(script, keys, args), timeout, not_after=not_after)


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


__all__ = [
    "ChannelledRedis",
    "Command",
    "CommandChannel",
    "ServerClock",
    "run_script",
    "script_command",
]
