"""SSH connections kept open between the cycles of the same Marquee: a bounded pool.

A new connection costs far more, ours and the host's CPU, than a cycle's commands on an open one
(bench/README.md, "Facts the code relies on"); a cycle every minute per Marquee makes it the
largest share of a converged cycle's cost. The pool keeps a connection after its cycle ends and
hands it to the next cycle of the same Marquee, under rules that keep it no weaker than a fresh
one:

- A connection is keyed on the whole Marquee entry (host, port, user, files, sockets, state
  directory: everything the inventory says of it) and on the bytes of its identity and
  known_hosts files, read again for every cycle. A changed entry or a changed key file, host
  key included, finds no pooled connection: the old one is closed and a new one is made (and
  checked against the new known_hosts), so a connection never outlives what it was made from.
- Each connection serves one cycle at a time: taken out of the pool for the cycle, put back
  after it, unless it closed meanwhile.
- Before reuse it is health-checked with one SSH global request (a round trip, no channel);
  one that does not answer within ``connect_timeout`` is closed and replaced.
- An idle connection is closed after ``idle_timeout`` seconds; at most ``size`` idle
  connections are kept (the least recently used is closed first); ``size`` 0 keeps none, as
  before pooling.
- ``close()`` (daemon shutdown) closes every idle connection and makes the pool keep none of
  those still in use.

Only the connection is shared. Each cycle still gets its own ``RemoteSession`` carrying that
cycle's lease, so every write is fenced with the fence of the cycle that makes it.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncssh
import structlog

from playguard_async.desired_state.model import Marquee
from playguard_async.kits.aio import in_thread
from playguard_async.kits.files import FileRefused, read_limited

log = structlog.get_logger("playguard.remote.pool")

Connector = Callable[[Marquee], Awaitable[asyncssh.SSHClientConnection]]

KEY_FILE_LIMIT = 1 << 20
"""Bytes an identity or known_hosts file may have (as ``ssh.CLIENT_FILE_LIMIT``)."""


@dataclass
class _Idle:
    key: str
    connection: asyncssh.SSHClientConnection
    expiry: asyncio.TimerHandle


def connection_key(marquee: Marquee) -> str:
    """What a pooled connection was made from: the Marquee entry and its key files' bytes. An
    unreadable file gives a key no connection has, so the connect itself reports the file."""
    digest = hashlib.sha256(marquee.model_dump_json().encode())
    for path in (marquee.identity_file, marquee.known_hosts):
        try:
            digest.update(hashlib.sha256(read_limited(path, KEY_FILE_LIMIT).data).digest())
        except FileRefused as exc:
            digest.update(f"unreadable: {exc}".encode())
    return digest.hexdigest()


async def answers(connection: asyncssh.SSHClientConnection, timeout: float) -> bool:
    """Whether the host still answers on ``connection``: one ``keepalive@openssh.com`` global
    request, as asyncssh's own keepalive sends (any reply, success or failure, is an answer).

    The one place that uses asyncssh's private ``_make_global_request`` (the public API sends
    keepalives only on a timer), so a change of it in asyncssh is met here.
    """
    if connection.is_closed():
        return False
    try:
        async with asyncio.timeout(timeout):
            await connection._make_global_request(b"keepalive@openssh.com")
    except (TimeoutError, OSError, asyncssh.Error):
        return False
    return not connection.is_closed()


class ConnectionPool:
    """Idle SSH connections by Marquee; see the module's docstring for the rules."""

    def __init__(
        self, connect: Connector, *, size: int, idle_timeout: float, check_timeout: float
    ) -> None:
        self._connect = connect
        self.size = size
        self.idle_timeout = idle_timeout
        self.check_timeout = check_timeout
        self._idle: OrderedDict[str, _Idle] = OrderedDict()
        """Marquee name -> its idle connection, least recently used first."""
        self._closed = False
        self.connects = 0
        """Connections made (for the benchmarks and the tests)."""

    @asynccontextmanager
    async def connection(self, marquee: Marquee) -> AsyncIterator[asyncssh.SSHClientConnection]:
        """A connection to ``marquee`` for one cycle: a pooled one that still answers, or a new
        one; put back afterwards (or closed, if the pool keeps none)."""
        key = await self._key(marquee)
        connection = None if key is None else await self._take(marquee.name, key)
        if connection is None:
            connection = await self._connect(marquee)
            self.connects += 1
        try:
            yield connection
        finally:
            await self._give_back(marquee.name, key, connection)

    async def _key(self, marquee: Marquee) -> str | None:
        """The connection key, or None (no pooling for this cycle) when the pool keeps nothing
        or the files could not be read in time (the connect then names the file)."""
        if not self.size or self._closed:
            return None
        try:
            return await in_thread(
                functools.partial(connection_key, marquee), self.check_timeout, name="ssh-pool-key"
            )
        except TimeoutError:
            return None

    async def _take(self, name: str, key: str) -> asyncssh.SSHClientConnection | None:
        idle = self._idle.pop(name, None)
        if idle is None:
            return None
        idle.expiry.cancel()
        if idle.key != key:
            log.info("ssh.pool_dropped", marquee=name, reason="marquee entry or key file changed")
            await _close(idle.connection)
            return None
        if not await answers(idle.connection, self.check_timeout):
            log.info("ssh.pool_dropped", marquee=name, reason="no answer to the health check")
            await _close(idle.connection)
            return None
        return idle.connection

    async def _give_back(
        self, name: str, key: str | None, connection: asyncssh.SSHClientConnection
    ) -> None:
        if key is None or self._closed or connection.is_closed():
            await _close(connection)
            return
        previous = self._idle.pop(name, None)  # a cycle run by hand beside the daemon's
        if previous is not None:
            previous.expiry.cancel()
            await _close(previous.connection)
        expiry = asyncio.get_running_loop().call_later(self.idle_timeout, self._expire, name)
        self._idle[name] = _Idle(key, connection, expiry)
        while len(self._idle) > self.size:
            _, evicted = self._idle.popitem(last=False)
            evicted.expiry.cancel()
            await _close(evicted.connection)

    def _expire(self, name: str) -> None:
        idle = self._idle.pop(name, None)
        if idle is not None:
            idle.connection.close()  # wait_closed is not needed: nothing waits on it

    def idle(self) -> int:
        """Idle connections kept now."""
        return len(self._idle)

    async def close(self) -> None:
        """Close every idle connection; those in use are closed when their cycle ends."""
        self._closed = True
        while self._idle:
            _, idle = self._idle.popitem()
            idle.expiry.cancel()
            await _close(idle.connection)


async def _close(connection: asyncssh.SSHClientConnection) -> None:
    connection.close()
    await connection.wait_closed()
