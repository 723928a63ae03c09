"""A dead link is noticed in bounded time on each of the daemon's long-lived connections
(issue 24): Redis's (TCP keepalive and user timeout, proven on a real DROP in a namespace of the
test's own), an SSH connection's (asyncssh keepalives), the SSH pool's health check, and the
PostgreSQL LISTEN connection's (a bounded probe). The last three are application-level probes,
so the fault proxy's stall (its kernel still ACKs, as a frozen host's or a half-open NAT's does)
is what they must see through."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from playguard_async.desired_state.model import Marquee
from playguard_async.desired_state.postgres.connection import PgAddress, password_from
from playguard_async.desired_state.postgres.notify import NotificationListener
from playguard_async.kits.aio import bounded
from playguard_async.remote.errors import HostUnreachable
from playguard_async.remote.pool import ConnectionPool
from playguard_async.remote.ssh import RemoteOptions, connect
from playguard_lab import SshServer
from tests.support.daemon import REPO_ROOT
from tests.support.fault_proxy import FaultProxy
from tests.support.fencing import eventually
from tests.support.postgres import LabDatabase
from tests.support.world import ssh_marquee_through

pytestmark = pytest.mark.integration

SLACK = 1.0
"""Seconds a loaded 2-core machine may add to a bound."""


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("keepalive", "ended"), [(4.0, True), (0.0, False)], ids=["keepalive", "kernel-defaults"]
)
def test_a_black_holed_redis_connection_is_ended_by_tcp_within_redis_keepalive(
    keepalive: float, ended: bool
) -> None:
    """With ``redis_keepalive`` the kernel ends the channel's and the pool's connections within
    it, and the SET abandoned in the hole is never delivered after the drop is lifted; with the
    kernel's defaults both are still open 5 s past that bound."""
    result = subprocess.run(
        ["unshare", "-n", sys.executable, "-m", "tests.support.black_hole", str(keepalive)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=50, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    seen = json.loads(result.stdout.splitlines()[-1])
    if ended:
        assert seen["dead_after"] is not None
        assert seen["dead_after"] <= keepalive + SLACK
        assert seen["late_write"] is False, "an abandoned SET reached Redis after the drop"
    else:
        assert seen == {"dead_after": None, "late_write": None}


@pytest.fixture
async def ssh_proxy(ssh_server: SshServer) -> AsyncIterator[FaultProxy]:
    async with FaultProxy(ssh_server.host, ssh_server.port) as proxy:
        yield proxy


@pytest.fixture
def proxied_marquee(ssh_server: SshServer, ssh_proxy: FaultProxy, tmp_path: Path) -> Marquee:
    return Marquee.model_validate(
        ssh_marquee_through(ssh_server, ssh_proxy.port, "edge-1", tmp_path / "edge-1")
    )


async def test_ssh_keepalives_close_a_stalled_connection_within_their_bound(
    ssh_proxy: FaultProxy, proxied_marquee: Marquee
) -> None:
    options = RemoteOptions(connect_timeout=5.0, keepalive_interval=0.5, keepalive_count_max=2)
    connection = await connect(proxied_marquee, options)
    try:
        await asyncio.sleep(1.5)  # keepalives answered: the link is quiet, not dead
        assert not connection.is_closed()
        ssh_proxy.stall()
        stalled = time.monotonic()
        bound = options.keepalive_interval * (options.keepalive_count_max + 1)
        await bounded(bound + SLACK, connection.wait_closed())
        assert time.monotonic() - stalled <= bound + SLACK
        assert ssh_proxy.open_connections == 1, "TCP stayed up: the keepalives noticed"
    finally:
        connection.close()


async def test_pool_health_check_of_a_stalled_idle_connection_is_bounded(
    ssh_proxy: FaultProxy, proxied_marquee: Marquee
) -> None:
    """A pooled connection whose link stalled (keepalives far apart, so they do not notice
    first): the next cycle's health check gives up within ``check_timeout``, and the new connect
    through the same stall within ``connect_timeout``; nothing waits longer."""
    options = RemoteOptions(connect_timeout=2.0, keepalive_interval=600.0)
    pool = ConnectionPool(
        functools.partial(connect, options=options), size=4, idle_timeout=60.0, check_timeout=1.0
    )
    try:
        async with pool.connection(proxied_marquee) as first:
            pass
        ssh_proxy.stall()
        started = time.monotonic()
        with capture_logs() as logs, pytest.raises(HostUnreachable, match="timeout"):
            async with pool.connection(proxied_marquee):
                pass
        assert time.monotonic() - started <= pool.check_timeout + options.connect_timeout + SLACK
        assert first.is_closed()
        assert [entry["reason"] for entry in logs if entry["event"] == "ssh.pool_dropped"] == [
            "no answer to the health check"
        ]
    finally:
        await pool.close()


async def test_a_stalled_listen_connection_is_noticed_and_replaced(postgres: LabDatabase) -> None:
    """LISTEN only receives, so a stalled link would look alive for TCP's two hours; the probe
    notices it within ``probe_interval + timeout`` and, once the link moves, the listener is back
    and resyncs (notifications may have been lost)."""
    address = PgAddress.parse(postgres.url)
    async with FaultProxy(address.host, address.port) as proxy:
        listener = NotificationListener(
            dataclasses.replace(address, port=proxy.port),
            password_from(postgres.password, None),
            timeout=1.0,
            probe_interval=1.0,
        )
        resyncs: list[float] = []

        async def resync() -> None:
            resyncs.append(time.monotonic())

        async def wake(names: object) -> None:
            return None

        running = asyncio.create_task(listener.run(wake, resync))
        try:
            await eventually(lambda: listener.connected, timeout=10, what="the listener up")
            await asyncio.sleep(2.5)  # probes answered: a quiet link stays up
            assert listener.connected
            proxy.stall()
            stalled = time.monotonic()
            await eventually(lambda: not listener.connected, timeout=5, what="the loss noticed")
            assert time.monotonic() - stalled <= 1.0 + 1.0 + SLACK
            proxy.heal()
            await eventually(lambda: resyncs, timeout=10, what="a resync after the reconnect")
            assert listener.connected
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
