"""The HTTP server's connections are bounded in time and number, on a real aiohttp server on real
loopback sockets: a connection that sends no complete request head is closed within
``http_header_timeout``, one idle after an answer too, one over a cap is closed as it is accepted,
and an answer that takes its time (a live-update stream) is not cut."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from playguard_async.kits.aio import bounded
from playguard_async.service.endpoints import serving
from playguard_async.service.http_connections import (
    PER_CLIENT,
    TOTAL,
    ConnectionGate,
    client_address,
)

HEADER_TIMEOUT = 0.5
GIVEN_UP = 10.0
"""Seconds after which a connection still open is a failure (far past the timeout: no test here
asserts how precisely it is kept)."""

REQUEST = b"GET /page HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
LAST_REQUEST = b"GET /page HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"


async def page(request: web.Request) -> web.StreamResponse:
    return web.Response(text="page")


async def slow_stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    await response.prepare(request)
    for _ in range(4):
        await response.write(b"tick\n")
        await asyncio.sleep(HEADER_TIMEOUT)
    await response.write_eof()
    return response


@asynccontextmanager
async def server(
    gate: ConnectionGate, header_timeout: float = HEADER_TIMEOUT
) -> AsyncIterator[int]:
    app = web.Application()
    app.router.add_get("/page", page)
    app.router.add_get("/stream", slow_stream)
    async with serving(app, "127.0.0.1", 0, gate=gate, header_timeout=header_timeout) as bound:
        yield int(bound[0].rpartition(":")[2])


Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def connect(port: int, source: str = "127.0.0.1") -> Connection:
    """A connection from ``source`` (any 127/8 address is loopback)."""
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def send(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    await writer.drain()


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


async def closed_by_server(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sent until it closed the connection (a reset counts as closed)."""
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := await bounded(GIVEN_UP, reader.read(65536)):
            received += chunk
    return received


async def send_nothing(writer: asyncio.StreamWriter) -> None:
    await asyncio.sleep(GIVEN_UP)


async def trickle_header_lines(writer: asyncio.StreamWriter) -> None:
    await send(writer, b"GET /page HTTP/1.1\r\n")
    for number in range(100):
        await asyncio.sleep(HEADER_TIMEOUT / 4)
        await send(writer, f"X-Slow-{number}: x\r\n".encode())


async def idle_after_one_answer(writer: asyncio.StreamWriter) -> None:
    await send(writer, REQUEST)
    await asyncio.sleep(GIVEN_UP)


@pytest.mark.parametrize(
    ("behaviour", "answered"),
    [(send_nothing, False), (trickle_header_lines, False), (idle_after_one_answer, True)],
    ids=["sends_nothing", "a_header_line_now_and_then", "idle_after_an_answer"],
)
async def test_a_connection_without_a_complete_request_head_is_closed_after_the_header_timeout(
    behaviour: Callable[[asyncio.StreamWriter], Awaitable[None]], answered: bool
) -> None:
    gate = ConnectionGate(16, 16)
    async with server(gate) as port:
        reader, writer = await connect(port)
        talking = asyncio.ensure_future(behaviour(writer))
        try:
            started = time.monotonic()
            received = await closed_by_server(reader)
            assert time.monotonic() - started < GIVEN_UP
            assert received.startswith(b"HTTP/1.1 200") == answered
            assert b"HTTP/1.1 200" in received or not received
        finally:
            talking.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await talking
            await close(writer)
        await wait_until(lambda: gate.held == 0)


async def test_an_answer_longer_than_the_header_timeout_is_not_cut() -> None:
    async with server(ConnectionGate(16, 16)) as port:
        reader, writer = await connect(port)
        try:
            await send(
                writer, b"GET /stream HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
            )
            received = await closed_by_server(reader)
        finally:
            await close(writer)
    assert received.startswith(b"HTTP/1.1 200")
    assert received.count(b"tick\n") == 4


async def wait_until(done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + GIVEN_UP
    while not done():
        assert time.monotonic() < deadline, "not within the deadline"
        await asyncio.sleep(0.02)


async def test_connections_over_a_cap_are_closed_at_once_and_counted_by_reason() -> None:
    refused: list[str] = []
    gate = ConnectionGate(5, 2, exempt="127.0.0.9".__eq__, on_refused=refused.append)
    async with server(gate, header_timeout=GIVEN_UP) as port:
        opened = [await connect(port, "127.0.0.2") for _ in range(4)]
        await wait_until(lambda: len(refused) == 2)
        assert refused == [PER_CLIENT, PER_CLIENT]
        opened += [await connect(port, "127.0.0.9") for _ in range(3)]
        await wait_until(lambda: gate.held == 5)
        opened.append(await connect(port, "127.0.0.3"))
        await wait_until(lambda: len(refused) == 3)
        assert refused[-1] == TOTAL
        answers = []
        for reader, writer in opened:
            with contextlib.suppress(ConnectionError):
                await send(writer, LAST_REQUEST)
            answers.append((await closed_by_server(reader)).startswith(b"HTTP/1.1 200"))
            await close(writer)
        assert answers.count(True) == 5, "the held ones are answered, the refused ones not"
        await wait_until(lambda: gate.held == 0)
        reader, writer = await connect(port, "127.0.0.3")
        await send(writer, LAST_REQUEST)
        assert (await closed_by_server(reader)).startswith(b"HTTP/1.1 200")
        await close(writer)
    assert len(refused) == 3


Event = tuple[str, int]


@given(
    st.lists(st.tuples(st.sampled_from(["open", "close"]), st.integers(0, 3)), max_size=200),
    st.integers(1, 6),
    st.integers(1, 4),
)
def test_the_gate_never_holds_more_than_its_caps_and_forgets_what_ended(
    events: list[Event], total: int, per_client: int
) -> None:
    refused: list[str] = []
    gate = ConnectionGate(total, per_client, exempt=lambda c: c == "c0", on_refused=refused.append)
    held: dict[str, int] = {}
    for kind, number in events:
        client = f"c{number}"
        if kind == "open":
            if gate.admit(client):
                held[client] = held.get(client, 0) + 1
        elif held.get(client):
            gate.release(client)
            held[client] -= 1
        assert gate.held == sum(held.values()) <= total
        assert all(count <= per_client for name, count in held.items() if name != "c0")
    for client, count in held.items():
        for _ in range(count):
            gate.release(client)
    assert gate.held == 0
    assert set(refused) <= {TOTAL, PER_CLIENT}


class Peer(asyncio.BaseTransport):
    def __init__(self, peername: object) -> None:
        super().__init__({"peername": peername})


@pytest.mark.parametrize(
    ("peername", "shown"),
    [
        (("127.0.0.1", 5), "127.0.0.1"),
        (("::ffff:127.0.0.2", 5, 0, 0), "127.0.0.2"),
        (("::1", 5, 0, 0), "::1"),
        (None, "unknown"),
        ("/run/socket", "unknown"),
        (("not an address", 5), "unknown"),
    ],
)
def test_a_connections_client_is_its_peers_address(peername: object, shown: str) -> None:
    assert client_address(Peer(peername)) == shown
