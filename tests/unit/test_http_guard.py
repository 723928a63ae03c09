"""The HTTP endpoints' guard on a real aiohttp server on loopback, spoken to over raw sockets (so
bytes and Host headers an HTTP client library would refuse to send are sent): the Host check, the
credential, the security headers on every class of answer, and the refusals' one bounded line."""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import AsyncIterator, Callable, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from structlog.testing import capture_logs

from playguard_async.kits.aio import bounded
from playguard_async.service.endpoints import application, serving
from playguard_async.service.http_connections import ConnectionGate
from playguard_async.service.liveness import Liveness
from playguard_async.web.http_guard import (
    REFUSAL_LOG_INTERVAL,
    SECURITY_HEADERS,
    HostRule,
    HttpGuard,
    RefusalLog,
)
from tests.support.web_users import auth_of

CREDENTIAL = "s3cret"
ALLOWED_NAME = "playguard.internal"
OPS_BASIC = b"Authorization: Basic " + base64.b64encode(b"ops:" + CREDENTIAL.encode()) + b"\r\n"


class Clock:
    """A monotonic clock moved by hand: the log's interval without a sleep."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class Server:
    port: int
    clock: Clock

    async def send(self, raw: bytes) -> Answer:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(raw)
            await writer.drain()
            data = await bounded(10, reader.read())
        finally:
            writer.close()
            await writer.wait_closed()
        head, _, body = data.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return Answer(int(status_line.split()[1]), headers, body)

    async def get(
        self, path: str = "/healthz", *, host: bytes | None = None, extra: bytes = b""
    ) -> Answer:
        host_line = b"" if host is None else b"Host: " + host + b"\r\n"
        return await self.send(
            b"GET "
            + path.encode()
            + b" HTTP/1.1\r\n"
            + host_line
            + extra
            + b"Connection: close\r\n\r\n"
        )

    @property
    def host(self) -> bytes:
        return f"127.0.0.1:{self.port}".encode()


async def boom(request: web.Request) -> web.StreamResponse:
    raise RuntimeError("a bug of ours")


async def too_large(request: web.Request) -> web.StreamResponse:
    raise web.HTTPRequestEntityTooLarge(max_size=1, actual_size=2)


async def bad(request: web.Request) -> web.StreamResponse:
    raise web.HTTPBadRequest()


async def page(request: web.Request) -> web.StreamResponse:
    return web.Response(text="page")


@asynccontextmanager
async def guarded_server(bind: str = "127.0.0.1", **guard_fields: Any) -> AsyncIterator[Server]:
    clock = Clock()
    guard = HttpGuard(
        HostRule.bound_to(bind, [ALLOWED_NAME]),
        refusals=RefusalLog(clock=clock),
        **guard_fields,
    )

    async def metrics(request: web.Request) -> web.StreamResponse:
        return web.Response(text="playguard_cycles_total 0\n")

    app = application(
        liveness=Liveness(interval=1.0, last_tick=time.monotonic, draining=lambda: False),
        ready=lambda: asyncio.sleep(0, True),
        ready_timeout=1.0,
        metrics=metrics,
        guard=guard,
    )
    app.router.add_get("/boom", boom)
    app.router.add_get("/too-large", too_large)
    app.router.add_get("/bad", bad)
    app.router.add_get("/page", page)
    async with serving(app, bind, 0, gate=ConnectionGate(64, 64), header_timeout=5.0) as addresses:
        yield Server(int(addresses[0].rpartition(":")[2]), clock)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    auth = auth_of(tmp_path / "users", {"ops": ("viewer", CREDENTIAL)})
    async with guarded_server(auth=auth) as served:
        yield served


def refused_lines(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [line for line in logs if line["event"] == "http.refused"]


def has_security_headers(answer: Answer) -> bool:
    return all(
        answer.headers.get(name.lower()) == value for name, value in SECURITY_HEADERS.items()
    )


HIGH_BYTES = [bytes([value]) for value in range(0x80, 0x100)]
CONTROL_BYTES = [bytes([value]) for value in [*range(0x20), 0x7F] if value != 0x09]
TOKEN_SHAPES: list[Callable[[bytes], bytes]] = [
    lambda b: b"Bearer " + b,
    lambda b: b"Bearer " + b + b"\xfe" + CREDENTIAL.encode(),
    lambda b: b"Basic " + b,
    lambda b: b"Basic " + base64.b64encode(b"user:" + b),
    lambda b: b"Basic " + base64.b64encode(b) + b,
]


async def test_every_byte_in_a_bearer_or_basic_token_is_refused_in_one_line_never_a_500(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    statuses: dict[int, int] = {}
    with capture_logs() as logs, caplog.at_level(logging.DEBUG, logger="aiohttp.server"):
        for byte in HIGH_BYTES + CONTROL_BYTES:
            for shape in TOKEN_SHAPES:
                answer = await server.get(
                    "/page", host=server.host, extra=b"Authorization: " + shape(byte) + b"\r\n"
                )
                statuses[answer.status] = statuses.get(answer.status, 0) + 1
                # A byte aiohttp's parser refuses in any header value (NUL, CR, LF, other
                # controls) is its 400 before any handler runs; every other byte is our 401.
                expected = {401} if byte[0] >= 0x80 else {400, 401}
                assert answer.status in expected, (byte, answer)
                assert has_security_headers(answer), (byte, answer)
                assert b"Traceback" not in answer.body
    assert statuses.get(401, 0) >= len(HIGH_BYTES) * len(TOKEN_SHAPES)
    assert len(refused_lines(logs)) == 1, refused_lines(logs)
    assert not [record for record in caplog.records if record.exc_info], "a traceback was logged"


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        b"",
        b"Bearer",
        b"Bearer ",
        CREDENTIAL.encode(),
        b"Token " + CREDENTIAL.encode(),
        b"Digest " + CREDENTIAL.encode(),
        b"Basic !!!notbase64",
        b"Basic " + base64.b64encode(b"no-colon"),
        b"Basic " + base64.b64encode(b"user:"),
        b"Basic " + base64.b64encode(b"ops:" + CREDENTIAL.encode() + b"x"),
        b"Basic " + base64.b64encode(b"nobody:" + CREDENTIAL.encode()),
        b"Bearer " + CREDENTIAL.encode(),
        b"Basic " + base64.b64encode(b"u:\xff\xfe"),
        b"Basic \xff\xfe\xfd",
        b"Bearer " + b"x" * 8000,
        b"Bearer " + CREDENTIAL.encode() + b"x",
        b"bearer " + CREDENTIAL.upper().encode(),
    ],
    ids=lambda header: "missing" if header is None else repr(header[:30]),
)
async def test_missing_empty_huge_schemeless_wrong_scheme_and_malformed_credentials_get_401(
    server: Server, authorization: bytes | None
) -> None:
    extra = b"" if authorization is None else b"Authorization: " + authorization + b"\r\n"
    answer = await server.get("/page", host=server.host, extra=extra)
    assert answer.status == 401
    assert answer.headers["www-authenticate"].startswith("Basic ")
    assert has_security_headers(answer)


async def test_a_user_is_admitted_by_basic_auth_and_a_bearer_token_no_longer(
    server: Server,
) -> None:
    bearer = b"Authorization: Bearer " + CREDENTIAL.encode() + b"\r\n"
    basic = b"Authorization: Basic " + base64.b64encode(b"ops:" + CREDENTIAL.encode()) + b"\r\n"
    answer = await server.get("/page", host=server.host, extra=basic)
    assert (answer.status, answer.body) == (200, b"page")
    assert (await server.get("/page", host=server.host, extra=bearer)).status == 401


async def test_a_flood_of_refusals_is_one_line_per_interval_with_the_counts(
    server: Server,
) -> None:
    with capture_logs() as logs:
        for _ in range(60):
            await server.get("/page", host=server.host, extra=b"Authorization: Bearer no\r\n")
        for _ in range(30):
            await server.get("/page", host=b"evil.example")
        for _ in range(10):
            await server.send(b"G(T / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert len(refused_lines(logs)) == 1
        server.clock.now += REFUSAL_LOG_INTERVAL - 0.1
        await server.get("/page", host=server.host)
        assert len(refused_lines(logs)) == 1
        server.clock.now += 0.1
        await server.get("/page", host=server.host)
    first, second = refused_lines(logs)
    assert first["refused"] == {"credential": 1}
    assert second["refused"] == {
        "credential": 59,
        "host": 30,
        "malformed_request": 10,
        "no_credential": 2,
    }
    assert second["within"] == REFUSAL_LOG_INTERVAL
    assert CREDENTIAL not in repr(logs)
    assert "evil.example" not in repr(logs)


LOOPBACK_HOSTS = [
    b"127.0.0.1",
    b"127.0.0.1:{port}",
    b"127.0.0.1:8080",  # forwarded: ssh -L 8080:127.0.0.1:PORT
    b"127.0.0.2:{port}",
    b"localhost",
    b"localhost:{port}",
    b"LocalHost:{port}",
    b"[::1]",
    b"[::1]:{port}",
    ALLOWED_NAME.encode(),
    ALLOWED_NAME.encode() + b":443",
]
REFUSED_HOSTS = [
    b"evil.example",
    b"evil.example:{port}",
    b"127.0.0.1.nip.io:{port}",
    b"localhost.",
    b"localhost.evil.example",
    b"sub." + ALLOWED_NAME.encode(),
    b"10.0.0.5:{port}",
    b"127.1:{port}",
    b"",
    b" ",
    b"127.0.0.1 :{port}",
    b"127.0.0.1:{port}@evil.example",
    b"user@127.0.0.1:{port}",
    b"127.0.0.1:0",
    b"127.0.0.1:99999",
    b"127.0.0.1:{port}:1",
    b"127.0.0.1:port",
    b"[::1",
    b"[fe80::1%25lo]:{port}",
    b"[::1]x",
    b"local_host",
    b"\xffvil.example",
    b"lo\xc4\xb1calhost",
    b"x" * 300,
]


@pytest.mark.parametrize("host", LOOPBACK_HOSTS, ids=repr)
async def test_a_loopback_server_answers_its_own_addresses_and_the_allowed_names(
    server: Server, host: bytes
) -> None:
    answer = await server.get("/healthz", host=host.replace(b"{port}", str(server.port).encode()))
    assert answer.status == 200, answer


@pytest.mark.parametrize("path", ["/healthz", "/metrics", "/page", "/nope"])
@pytest.mark.parametrize("host", REFUSED_HOSTS, ids=repr)
async def test_any_other_host_is_refused_with_421_before_anything_else(
    server: Server, host: bytes, path: str
) -> None:
    right = b"Authorization: Bearer " + CREDENTIAL.encode() + b"\r\n"
    answer = await server.get(
        path, host=host.replace(b"{port}", str(server.port).encode()), extra=right
    )
    assert answer.status == 421, answer
    assert has_security_headers(answer)
    assert b"misdirected" in answer.body


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GET /healthz HTTP/1.0\r\n\r\n", 421),
        (b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n", 400),  # aiohttp's parser
        (b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n\r\n", 400),
        (b"GET http://evil.example/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 421),
    ],
    ids=["http-1.0-without-host", "http-1.1-without-host", "two-hosts", "absolute-form-elsewhere"],
)
async def test_a_missing_doubled_or_overridden_host_is_refused(
    server: Server, raw: bytes, status: int
) -> None:
    with capture_logs():
        answer = await server.send(raw.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
    assert answer.status == status
    assert has_security_headers(answer)


async def test_an_absolute_form_target_naming_the_bound_address_is_answered(
    server: Server,
) -> None:
    raw = b"GET http://127.0.0.1/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    assert (await server.send(raw)).status == 200


@pytest.mark.parametrize(
    ("bind", "allowed", "refused"),
    [
        (
            "0.0.0.0",
            ["0.0.0.0:9464", "10.0.0.5:9464", "127.0.0.1", "[::1]", "localhost", ALLOWED_NAME],
            ["evil.example", "playguard.example"],
        ),
        ("::", ["[2001:db8::5]:9464", "192.0.2.7", "localhost"], ["evil.example"]),
        ("::1", ["[::1]:9464", "127.0.0.1", "localhost"], ["10.0.0.5", "evil.example"]),
        ("localhost", ["localhost:9464", "127.0.0.1", "[::1]"], ["10.0.0.5", "evil.example"]),
        ("10.0.0.5", ["10.0.0.5:9464", "10.0.0.5", ALLOWED_NAME], ["127.0.0.1", "localhost"]),
        (
            "ops.example",
            ["ops.example:9464", "OPS.example", ALLOWED_NAME],
            ["127.0.0.1", "localhost", "10.0.0.5", "evil.example"],
        ),
    ],
)
def test_which_hosts_a_bound_address_answers(
    bind: str, allowed: list[str], refused: list[str]
) -> None:
    rule = HostRule.bound_to(bind, [ALLOWED_NAME])
    assert [host for host in allowed if not rule.allows(host)] == []
    assert [host for host in refused if rule.allows(host)] == []


@pytest.mark.parametrize(
    ("metrics_require_credential", "without", "with_it"), [(False, 200, 200), (True, 401, 200)]
)
async def test_metrics_asks_for_the_credential_only_when_told_and_probes_never(
    metrics_require_credential: bool, without: int, with_it: int, tmp_path: Path
) -> None:
    basic = b"Authorization: Basic " + base64.b64encode(b"ops:" + CREDENTIAL.encode()) + b"\r\n"
    async with guarded_server(
        auth=auth_of(tmp_path / "users", {"ops": ("viewer", CREDENTIAL)}),
        metrics_require_credential=metrics_require_credential,
    ) as server:
        assert (await server.get("/metrics", host=server.host)).status == without
        answer = await server.get("/metrics", host=server.host, extra=basic)
        assert (answer.status, answer.body) == (with_it, b"playguard_cycles_total 0\n")
        for probe in ("/healthz", "/readyz"):
            assert (await server.get(probe, host=server.host)).status == 200


async def test_without_a_credential_nothing_asks_for_one_but_the_host_is_still_checked() -> None:
    async with guarded_server() as server:
        assert (await server.get("/page", host=server.host)).status == 200
        assert (await server.get("/page", host=b"evil.example")).status == 421


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /page HTTP/1.1\r\nHost: {host}\r\n{auth}", 200),
        (b"GET /healthz HTTP/1.1\r\nHost: {host}\r\n", 200),
        (b"GET /page HTTP/1.1\r\nHost: {host}\r\n", 401),
        (b"GET /page HTTP/1.1\r\nHost: evil.example\r\n", 421),
        (b"GET /nope HTTP/1.1\r\nHost: {host}\r\n{auth}", 404),
        (b"POST /healthz HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n", 405),
        (b"GET /boom HTTP/1.1\r\nHost: {host}\r\n{auth}", 500),
        (b"GET /too-large HTTP/1.1\r\nHost: {host}\r\n{auth}", 413),
        (b"GET /bad HTTP/1.1\r\nHost: {host}\r\n{auth}", 400),
        (b"GARBAGE\r\n", 400),
        (b"G(T / HTTP/1.1\r\nHost: {host}\r\n", 400),
        (b"GET / HTTP/1.1\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: {host}\r\nX: " + b"a" * 9000 + b"\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: {host}\r\nAuthorization: a\x00b\r\n", 400),
    ],
    ids=[
        "page",
        "probe",
        "401",
        "421",
        "404",
        "405",
        "500",
        "413",
        "400-raised",
        "400-request-line",
        "400-method",
        "400-no-host",
        "400-header-too-long",
        "400-nul-in-header",
    ],
)
async def test_every_class_of_answer_carries_the_security_headers(
    server: Server, request_bytes: bytes, status: int
) -> None:
    with capture_logs():
        answer = await server.send(
            request_bytes.replace(b"{host}", server.host).replace(b"{auth}", OPS_BASIC)
            + b"Connection: close\r\n\r\n"
        )
    assert answer.status == status, answer
    assert has_security_headers(answer), answer.headers
    assert b"Traceback" not in answer.body


async def test_the_parsers_refusals_are_counted_not_logged_with_a_traceback_each(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    with capture_logs() as logs, caplog.at_level(logging.DEBUG, logger="aiohttp.server"):
        for _ in range(20):
            await server.send(b"GET / HTTP/1.1\r\nHost: x\r\nX: \x01\r\n\r\n")
            await server.send(b"GET / HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n")
    assert [record.getMessage() for record in caplog.records] == []
    assert len(refused_lines(logs)) == 1
