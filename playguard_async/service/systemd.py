"""systemd's notify protocol in a few lines of our own: READY, WATCHDOG, STATUS and STOPPING.

The protocol is one datagram of ``KEY=VALUE`` lines to the unix socket named by ``$NOTIFY_SOCKET``
(a path, or ``@name`` for the abstract namespace). libsystemd is not needed for that, and without
the variable (a terminal, a container) every call is a no-op. See sd_notify(3) and
sd_watchdog_enabled(3).
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable, Mapping

import structlog

from playguard_async.kits.aio import StopSignal
from playguard_async.service.liveness import Liveness

log = structlog.get_logger("playguard.systemd")

READY_RETRY = 1.0
"""Seconds between readiness probes while Redis does not answer at start-up."""


def socket_address(notify_socket: str) -> str:
    """The address to send to: ``@name`` is ``name`` in the abstract namespace (a leading NUL)."""
    if notify_socket.startswith("@"):
        return "\0" + notify_socket[1:]
    return notify_socket


def status(text: str) -> str:
    """A ``STATUS=`` assignment; a newline would end the value, so lines are joined."""
    return "STATUS=" + " ".join(text.splitlines())


def message(*assignments: str) -> bytes:
    """One datagram: the assignments (``READY=1``, ``STATUS=...``) as newline-separated lines."""
    return "\n".join(assignments).encode()


def watchdog_interval(
    environ: Mapping[str, str] = os.environ, pid: int | None = None
) -> float | None:
    """Seconds between ``WATCHDOG=1`` messages: half of ``$WATCHDOG_USEC``, as sd_watchdog_enabled
    advises; None when no watchdog is asked of this process (unset, zero, unparsable, or
    ``$WATCHDOG_PID`` naming another process)."""
    watchdog_pid = environ.get("WATCHDOG_PID")
    if watchdog_pid and watchdog_pid != str(os.getpid() if pid is None else pid):
        return None
    try:
        usec = int(environ.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    return usec / 2_000_000 if usec > 0 else None


class Notifier:
    """Sends notify messages to the service manager; does nothing when there is none."""

    def __init__(self, notify_socket: str | None) -> None:
        if notify_socket and not notify_socket.startswith(("/", "@")):
            log.warning("systemd.notify_socket_unsupported", notify_socket=notify_socket)
            notify_socket = None
        self.address = socket_address(notify_socket) if notify_socket else None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> Notifier:
        return cls(environ.get("NOTIFY_SOCKET"))

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *assignments: str) -> bool:
        """Send one message; False (and a warning) when it could not be sent. Never blocks: a
        full socket queue drops the message, as a missed heartbeat rather than a stalled loop."""
        if self.address is None:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.setblocking(False)
                sock.sendto(message(*assignments), self.address)
        except OSError as exc:
            log.warning("systemd.notify_failed", error=repr(exc))
            return False
        return True


async def report_to_systemd(
    notifier: Notifier,
    *,
    ready: Callable[[], Awaitable[bool]],
    liveness: Liveness,
    status_text: Callable[[], str],
    stopping: StopSignal,
    interval: float,
) -> None:
    """Tell the service manager how the daemon is, until cancelled.

    READY=1 once ``ready()`` says yes (Redis answers); then every ``interval`` a STATUS line, with
    WATCHDOG=1 only while ``liveness`` holds, so a stalled tick loop stops the heartbeat and the
    watchdog restarts us; STOPPING=1 as soon as ``stopping`` is set (or this task is cancelled
    before it noticed); heartbeats go on while the engine drains.
    """
    try:
        while not stopping.is_set():
            if await ready():
                notifier.send("READY=1", status(status_text()))
                break
            await stopping.sleep(READY_RETRY)
        while not stopping.is_set():
            _beat(notifier, liveness, status_text)
            await stopping.sleep(interval)
    finally:
        notifier.send("STOPPING=1", status(status_text()))
    while True:
        _beat(notifier, liveness, status_text)
        await asyncio.sleep(interval)


def _beat(notifier: Notifier, liveness: Liveness, status_text: Callable[[], str]) -> None:
    if liveness.check().alive:
        notifier.send("WATCHDOG=1", status(status_text()))
    else:
        notifier.send(status(status_text()))
