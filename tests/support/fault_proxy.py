"""A TCP relay on 127.0.0.1 in front of a real server that makes the link slow, stalled or cut.

The kernel here has no ``netem`` qdisc (``tc qdisc add dev lo root netem delay 1ms`` answers
"Specified qdisc kind is unknown"), so latency, bandwidth limits and connections that stay open
while no byte moves are made in user space: clients connect to ``FaultProxy.port`` and every byte
goes through two pumps per connection, one per direction (``UP``: client to server, ``DOWN``:
server to client). Each direction has a ``Shape`` that can be changed at any time and applies to
every open connection at once, bytes already on their way included:

- ``delay``: each byte is handed on ``delay`` seconds after it arrived (a fixed latency; bytes
  keep their order and pipelining, as on a long link);
- ``rate``: at most that many bytes per second (a throttled link);
- ``stalled``: nothing is handed on, and the connection stays open: the half-open TCP a NAT or a
  firewall leaves behind. The proxy's own kernel still ACKs, so TCP keepalives are answered:
  what a stall proves is an application's own bounded probe or timeout, not a keepalive;
- ``cut``: every connection is closed at once (both ends see a reset), and so is each new one
  while a cut stands: a TCP connection cannot lose one direction without its ends noticing, so
  a cut of either direction ends the whole connection.

Memory is bounded: each direction holds at most ``BUFFER_CHUNKS`` chunks of ``CHUNK`` bytes; past
that the pump stops reading, and TCP's own flow control holds the sender. ``aclose()`` ends
every connection and task it started. ``ThreadedProxy`` runs one in a thread of its own, for the
synchronous tests that drive daemon processes and for ``bench/soak.py``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar

from playguard_async.kits.aio import bounded

CHUNK = 65_536
"""Bytes read at once from either side."""

BUFFER_CHUNKS = 16
"""Chunks one direction holds at most (1 MiB): a stalled or slow direction stops reading then."""

CONNECT_TIMEOUT = 5.0
"""Seconds the proxy waits to reach the server for a new connection."""

THROTTLE_SLICE = 0.05
"""Seconds of bytes a throttled direction hands on at once: small enough for a smooth rate and
for a stall or cut set meanwhile to stop it within this time."""

_T = TypeVar("_T")


class Direction(enum.Enum):
    UP = "up"
    """Client to server."""
    DOWN = "down"
    """Server to client."""


BOTH = (Direction.UP, Direction.DOWN)


@dataclass(frozen=True, slots=True)
class Shape:
    """What one direction does to the bytes it carries; ``Shape()`` passes them as they come."""

    delay: float = 0.0
    rate: float | None = None
    stalled: bool = False
    cut: bool = False

    def __post_init__(self) -> None:
        if self.delay < 0 or (self.rate is not None and self.rate <= 0):
            raise ValueError(f"delay must be >= 0 and rate > 0: {self}")


PASS = Shape()


class ProxyControls:
    """The verbs tests use, each on one direction or both; ``shape`` does the work."""

    def shape(self, shape: Shape, directions: tuple[Direction, ...] = BOTH) -> None:
        raise NotImplementedError

    def delay(self, seconds: float, directions: tuple[Direction, ...] = BOTH) -> None:
        """A fixed latency of ``seconds`` on each of ``directions``, nothing else."""
        self.shape(Shape(delay=seconds), directions)

    def throttle(self, rate: float, directions: tuple[Direction, ...] = BOTH) -> None:
        """At most ``rate`` bytes per second on each of ``directions``."""
        self.shape(Shape(rate=rate), directions)

    def stall(self, directions: tuple[Direction, ...] = BOTH) -> None:
        """No byte moves on ``directions``; connections stay open."""
        self.shape(Shape(stalled=True), directions)

    def cut(self, directions: tuple[Direction, ...] = BOTH) -> None:
        """End the streams of ``directions`` now (both: close every connection)."""
        self.shape(Shape(cut=True), directions)

    def heal(self) -> None:
        """Pass every byte as it comes, both ways; what was held moves on at once."""
        self.shape(PASS, BOTH)


@dataclass
class _Pump:
    """One direction of one connection: a reader that queues chunks, a writer that hands them
    on as the direction's shape allows."""

    proxy: FaultProxy
    direction: Direction
    source: asyncio.StreamReader
    destination: asyncio.StreamWriter

    def __post_init__(self) -> None:
        self.chunks: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(BUFFER_CHUNKS)
        self.held = 0
        """Bytes read and not handed on yet: queued, or being handed on."""

    async def _queue(self, arrived: float, chunk: bytes) -> None:
        await self.chunks.put((arrived, chunk))
        self.held += len(chunk)

    async def read(self) -> None:
        """Queue what the source sends, then an empty chunk for the end of its stream."""
        loop = asyncio.get_running_loop()
        with contextlib.suppress(OSError):
            while chunk := await self.source.read(CHUNK):
                await self._queue(loop.time(), chunk)
        await self._queue(loop.time(), b"")

    async def write(self) -> None:
        """Hand chunks on until the end of the stream, which goes on as a FIN."""
        while True:
            arrived, chunk = await self.chunks.get()
            if not chunk:
                break
            await self._until_moving(arrived)
            await self._hand_on(chunk)
        if self.destination.can_write_eof() and not self.destination.is_closing():
            self.destination.write_eof()

    async def _until_moving(self, arrived: float | None) -> None:
        """Wait while the direction is stalled and, for a chunk that ``arrived`` then, until
        its delay has passed; a change of shape is seen at once."""
        loop = asyncio.get_running_loop()
        while True:
            changed = self.proxy.changed
            shape = self.proxy.shapes[self.direction]
            wait = None
            if not shape.stalled:
                wait = 0.0 if arrived is None else arrived + shape.delay - loop.time()
                if wait <= 0:
                    return
            with contextlib.suppress(TimeoutError):
                await bounded(wait, changed.wait())

    async def _hand_on(self, chunk: bytes) -> None:
        """Write ``chunk``: whole, or in slices at the shape's rate (a stall set meanwhile
        holds the rest)."""
        while chunk:
            await self._until_moving(None)
            rate = self.proxy.shapes[self.direction].rate
            size = len(chunk) if rate is None else max(1, int(rate * THROTTLE_SLICE))
            piece, chunk = chunk[:size], chunk[size:]
            self.destination.write(piece)
            await self.destination.drain()
            self.proxy.moved[self.direction] += len(piece)
            self.held -= len(piece)
            if rate is not None:
                await asyncio.sleep(len(piece) / rate)


@dataclass
class _Connection:
    """One relayed connection: its two ends (the client's, then the server's) and pumps."""

    ends: list[asyncio.StreamWriter]
    pumps: list[_Pump] = field(default_factory=list)
    tasks: list[asyncio.Future[None]] = field(default_factory=list)

    def abort(self) -> None:
        for writer in self.ends:
            writer.transport.abort()

    def end(self) -> None:
        """Abort both ends and cancel the pumps (never the relay's own task: asyncio's stream
        server reports a cancelled handler as an error)."""
        self.abort()
        for task in self.tasks:
            task.cancel()


class FaultProxy(ProxyControls):
    """Listens on 127.0.0.1 (``port``), relays to ``target_host:target_port``; see the module."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.shapes: dict[Direction, Shape] = dict.fromkeys(BOTH, PASS)
        self.changed = asyncio.Event()
        """Set (and replaced) at every change of shape: what waiting pumps wake on."""
        self.moved: dict[Direction, int] = dict.fromkeys(BOTH, 0)
        """Bytes handed on so far, by direction."""
        self.accepted = 0
        """Connections accepted so far."""
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], _Connection] = {}
        self.port = 0

    async def start(self) -> Self:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    def held(self, direction: Direction) -> int:
        """Bytes the open connections have read in ``direction`` and not handed on yet."""
        return sum(
            pump.held
            for connection in self._connections.values()
            for pump in connection.pumps
            if pump.direction is direction
        )

    @property
    def is_cut(self) -> bool:
        return any(shape.cut for shape in self.shapes.values())

    def shape(self, shape: Shape, directions: tuple[Direction, ...] = BOTH) -> None:
        """Set ``directions`` to ``shape``; a cut closes every open connection now."""
        for direction in directions:
            self.shapes[direction] = shape
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()
        if self.is_cut:
            for connection in self._connections.values():
                connection.abort()

    async def aclose(self) -> None:
        """Stop listening and end every connection and pump."""
        if self._server is not None:
            self._server.close()
        for connection in self._connections.values():
            connection.end()
        if self._connections:
            await asyncio.wait(list(self._connections))
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _relay(self, client_in: asyncio.StreamReader, client: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        connection = self._connections[task] = _Connection([client])
        self.accepted += 1
        try:
            if self.is_cut:
                return
            server_in, server = await bounded(
                CONNECT_TIMEOUT, asyncio.open_connection(*self.target)
            )
            connection.ends.append(server)
            connection.pumps = [
                _Pump(self, Direction.UP, client_in, server),
                _Pump(self, Direction.DOWN, server_in, client),
            ]
            readers = [asyncio.ensure_future(pump.read()) for pump in connection.pumps]
            writers = [asyncio.ensure_future(pump.write()) for pump in connection.pumps]
            connection.tasks = [*readers, *writers]
            # Either side going away (an error) or ``end()`` (cancelled) ends the connection.
            await asyncio.gather(*writers, return_exceptions=True)
        except (OSError, TimeoutError):
            pass  # the server is not there: the client sees its connection closed
        finally:
            connection.end()
            await asyncio.gather(*connection.tasks, return_exceptions=True)
            del self._connections[task]


class ThreadedProxy(ProxyControls):
    """A ``FaultProxy`` on an event loop in a thread of its own, driven from synchronous code
    (``with ThreadedProxy(host, port) as proxy: ... proxy.stall()``)."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy")
        self._proxy: FaultProxy | None = None

    @property
    def port(self) -> int:
        return self._running().port

    def __enter__(self) -> Self:
        self._thread.start()
        self._proxy = self._call(FaultProxy(*self.target).start())
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _running(self) -> FaultProxy:
        if self._proxy is None:
            raise RuntimeError("the proxy is not running")
        return self._proxy

    def _call(self, call: Any, timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(call, self._loop).result(timeout)

    def _on_loop(self, function: Callable[[], _T]) -> _T:
        async def run() -> _T:
            return function()

        result: _T = self._call(run())
        return result

    def shape(self, shape: Shape, directions: tuple[Direction, ...] = BOTH) -> None:
        proxy = self._running()
        self._on_loop(lambda: proxy.shape(shape, directions))

    def moved(self) -> dict[Direction, int]:
        proxy = self._running()
        return self._on_loop(lambda: dict(proxy.moved))

    def open_connections(self) -> int:
        proxy = self._running()
        return self._on_loop(lambda: proxy.open_connections)

    def held(self, direction: Direction) -> int:
        proxy = self._running()
        return self._on_loop(lambda: proxy.held(direction))

    def close(self) -> None:
        """End every connection, stop the loop and its thread."""
        if self._proxy is not None:
            with contextlib.suppress(concurrent.futures.TimeoutError):
                self._call(self._proxy.aclose())
            self._proxy = None
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        if not self._loop.is_running():
            self._loop.close()
