"""The notify protocol as systemd reads it: message format, socket addresses, the watchdog's
interval, and what the daemon tells, in order, on a real datagram socket."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from playguard_async.kits.aio import StopSignal
from playguard_async.service.liveness import Liveness
from playguard_async.service.systemd import (
    Notifier,
    message,
    report_to_systemd,
    socket_address,
    status,
    watchdog_interval,
)


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    """A service manager's notify socket in the filesystem: (NOTIFY_SOCKET value, socket)."""
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.settimeout(2)
        yield str(path), sock


def received(sock: socket.socket) -> list[str]:
    """Every datagram waiting on ``sock``."""
    sock.setblocking(False)
    datagrams = []
    while True:
        try:
            datagrams.append(sock.recv(4096).decode())
        except BlockingIOError:
            return datagrams


async def received_until(sock: socket.socket, count: int, *, timeout: float = 5.0) -> list[str]:
    """The datagrams waiting on ``sock``, polled until there are at least ``count``; returns as
    soon as there are, so the caller can change the world before the next message is sent."""
    deadline = time.monotonic() + timeout
    datagrams = received(sock)
    while len(datagrams) < count:
        assert time.monotonic() < deadline, f"only {datagrams} within {timeout:g} s"
        await asyncio.sleep(0.01)
        datagrams += received(sock)
    return datagrams


def test_message_is_newline_separated_assignments() -> None:
    assert message("READY=1", "STATUS=up") == b"READY=1\nSTATUS=up"


def test_status_keeps_to_one_line() -> None:
    assert status("two\nlines") == "STATUS=two lines"


def test_abstract_socket_name_starts_with_nul_and_a_path_stays_as_is() -> None:
    assert socket_address("@playguard/notify") == "\0playguard/notify"
    assert socket_address("/run/systemd/notify") == "/run/systemd/notify"


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"WATCHDOG_USEC": "30000000"}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "4242"}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({}, None),
    ],
)
def test_watchdog_interval_is_half_the_timeout_and_only_for_this_process(
    environ: dict[str, str], expected: float | None
) -> None:
    assert watchdog_interval(environ, pid=4242) == expected


def test_without_notify_socket_nothing_is_sent() -> None:
    notifier = Notifier.from_environment({})
    assert not notifier.enabled
    assert notifier.send("READY=1") is False


def test_unsupported_notify_socket_kind_is_ignored() -> None:
    assert not Notifier("vsock:2:1234").enabled


def test_message_reaches_a_path_socket(receiver: tuple[str, socket.socket]) -> None:
    address, sock = receiver
    assert Notifier.from_environment({"NOTIFY_SOCKET": address}).send("READY=1", "STATUS=up")
    assert sock.recv(4096) == b"READY=1\nSTATUS=up"


def test_message_reaches_an_abstract_socket() -> None:
    name = f"playguard-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(2)
        assert Notifier(f"@{name}").send("WATCHDOG=1")
        assert sock.recv(4096) == b"WATCHDOG=1"


def test_a_vanished_socket_is_a_warning_not_an_error(tmp_path: Path) -> None:
    assert Notifier(str(tmp_path / "gone")).send("READY=1") is False


async def test_ready_once_redis_answers_watchdog_only_while_alive_then_stopping(
    receiver: tuple[str, socket.socket],
) -> None:
    address, sock = receiver
    answers = iter([False, True])
    last_tick: list[float | None] = [None]
    stopping = StopSignal()
    liveness = Liveness(
        interval=1.0, last_tick=lambda: last_tick[0], draining=stopping.is_set, since=0.0
    )

    async def ready() -> bool:
        return next(answers)

    task = asyncio.create_task(
        report_to_systemd(
            Notifier(address),
            ready=ready,
            liveness=liveness,
            status_text=lambda: "up",
            stopping=stopping,
            interval=0.02,
        )
    )
    try:
        # One failed readiness probe, then READY=1 and beats; since=0 means stalled.
        stalled = await received_until(sock, 3)
        last_tick[0] = time.monotonic()
        alive = await received_until(sock, 3)
        stopping.set()
        draining = await received_until(sock, 3)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    assert stalled[0] == "READY=1\nSTATUS=up"
    assert set(stalled[1:]) == {"STATUS=up"}, "no WATCHDOG=1 while the loop is stalled"
    assert set(alive) == {"WATCHDOG=1\nSTATUS=up"}
    assert draining[0] == "STOPPING=1\nSTATUS=up"
    assert set(draining[1:]) == {"WATCHDOG=1\nSTATUS=up"}, "heartbeats go on while draining"


async def test_cancelled_just_as_stopping_is_set_it_still_ends() -> None:
    # asyncio.wait_for on Python 3.11 swallows a cancel that arrives as its awaitable completes;
    # this task must end on cancel whatever it was waiting for, or the daemon never exits.
    stopping = StopSignal()
    asked = asyncio.Event()

    async def ready() -> bool:
        asked.set()
        return True

    task = asyncio.create_task(
        report_to_systemd(
            Notifier(None),
            ready=ready,
            liveness=Liveness(interval=1.0, last_tick=time.monotonic, draining=stopping.is_set),
            status_text=lambda: "up",
            stopping=stopping,
            interval=10.0,
        )
    )
    await asked.wait()  # past READY=1, the task now waits between heartbeats
    stopping.set()
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=2)
    assert done == {task}
    assert task.cancelled()
