"""The SSH connection pool against the lab's real sshd: reused across sessions, each session with
its own lease; closed when idle, when its Marquee's entry or key files change, when it stops
answering, and when the pool closes."""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncssh
import pytest

from playguard_async.coordination.fence import FenceRefused
from playguard_async.desired_state.model import Marquee
from playguard_async.remote.errors import HostKeyMismatch
from playguard_async.remote.pool import ConnectionPool
from playguard_async.remote.ssh import RemoteOptions, connect, open_session
from playguard_lab import DockerDaemon, SshServer
from playguard_lab.process import descendants
from tests.support.fencing import StaticLease

pytestmark = pytest.mark.integration

OPTIONS = RemoteOptions(connect_timeout=5.0, command_timeout=10.0)
OTHER_HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJdD7y3aLq454yWBdwLWbieU1ebz9/cu7/QEXn9OIeZJ"


@pytest.fixture
def marquee(ssh_server: SshServer, docker_daemon: DockerDaemon, tmp_path: Path) -> Marquee:
    """A Marquee with its own copy of the known_hosts file, so a test may change it."""
    known_hosts = tmp_path / "known_hosts"
    shutil.copy(ssh_server.known_hosts, known_hosts)
    return Marquee.model_validate(
        {
            "name": "edge-1",
            "host": ssh_server.host,
            "port": ssh_server.port,
            "user": ssh_server.user,
            "identity_file": str(ssh_server.client_key),
            "known_hosts": str(known_hosts),
            "docker_socket": str(docker_daemon.socket),
            "workdir": str(tmp_path / "workdir"),
            "state_dir": str(tmp_path / "state"),
        }
    )


@pytest.fixture
async def pool() -> AsyncIterator[ConnectionPool]:
    pool = ConnectionPool(
        functools.partial(connect, options=OPTIONS), size=4, idle_timeout=60.0, check_timeout=1.0
    )
    try:
        yield pool
    finally:
        await pool.close()


async def used_connection(
    pool: ConnectionPool, marquee: Marquee, fence: int | None = None
) -> asyncssh.SSHClientConnection:
    """One session through the pool, running one command (a fenced write when ``fence`` is
    given); returns the connection it had."""
    async with open_session(
        marquee, OPTIONS, lease=StaticLease(fence or 1), connections=pool.connection
    ) as session:
        if fence is None:
            await session.run(["true"])
        else:
            await session.change("write nothing", ["true"])
        return session.connection


async def eventually(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_next_session_reuses_the_connection_with_a_lease_of_its_own(
    pool: ConnectionPool, marquee: Marquee, tmp_path: Path
) -> None:
    first = await used_connection(pool, marquee, fence=5)
    assert pool.idle() == 1
    target = tmp_path / "written"
    # A later session on the same connection carries its own lease: an older fence than the
    # host accepted is refused by the host, however the connection was made.
    with pytest.raises(FenceRefused):
        async with open_session(
            marquee, OPTIONS, lease=StaticLease(4), connections=pool.connection
        ) as stale:
            assert stale.connection is first
            await stale.change("touch", ["touch", str(target)])
    async with open_session(
        marquee, OPTIONS, lease=StaticLease(6), connections=pool.connection
    ) as current:
        assert current.connection is first
        assert current.lease is not None
        assert current.lease.fence == 6
        await current.change("touch", ["touch", str(target)])
    assert target.exists()
    assert pool.connects == 1
    assert not first.is_closed()


async def test_idle_connection_is_closed_after_the_idle_timeout(
    marquee: Marquee,
) -> None:
    pool = ConnectionPool(
        functools.partial(connect, options=OPTIONS), size=4, idle_timeout=0.3, check_timeout=1.0
    )
    try:
        connection = await used_connection(pool, marquee)
        await eventually(lambda: pool.idle() == 0 and connection.is_closed())
        assert await used_connection(pool, marquee) is not connection
        assert pool.connects == 2
    finally:
        await pool.close()


async def test_changed_known_hosts_drops_the_connection_and_checks_the_new_key(
    pool: ConnectionPool, marquee: Marquee, ssh_server: SshServer
) -> None:
    connection = await used_connection(pool, marquee)
    marquee.known_hosts.write_text(f"[{ssh_server.host}]:{ssh_server.port} {OTHER_HOST_KEY}\n")
    with pytest.raises(HostKeyMismatch):
        await used_connection(pool, marquee)
    assert connection.is_closed()
    assert pool.idle() == 0


@pytest.mark.parametrize(
    "change",
    [
        {"workdir": "/tmp/playguard-pool-elsewhere"},
        {"state_dir": "/tmp/playguard-pool-state-elsewhere"},
        {"docker_socket": "/run/elsewhere.sock"},
    ],
    ids=["workdir", "state_dir", "docker_socket"],
)
async def test_changed_marquee_entry_gets_a_new_connection(
    pool: ConnectionPool, marquee: Marquee, change: dict[str, str]
) -> None:
    connection = await used_connection(pool, marquee)
    changed = marquee.model_copy(update=change)
    async with pool.connection(changed) as fresh:
        assert fresh is not connection
    assert connection.is_closed()
    assert pool.connects == 2


async def test_connection_that_stops_answering_is_replaced(
    pool: ConnectionPool, marquee: Marquee, ssh_server: SshServer
) -> None:
    assert ssh_server.pid is not None
    before = {proc.pid for proc in descendants([ssh_server.pid])}
    connection = await used_connection(pool, marquee)
    # The sshd processes serving that connection, frozen: it no longer answers, nor closes.
    frozen = [proc.pid for proc in descendants([ssh_server.pid]) if proc.pid not in before]
    assert frozen
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        replaced = await used_connection(pool, marquee)
        assert replaced is not connection
        assert connection.is_closed()
        assert pool.connects == 2
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)


async def test_closed_pool_closes_idle_connections_and_keeps_no_more(
    pool: ConnectionPool, marquee: Marquee
) -> None:
    connection = await used_connection(pool, marquee)
    async with pool.connection(marquee.model_copy(update={"name": "edge-2"})) as in_use:
        await pool.close()
        assert connection.is_closed()
        assert not in_use.is_closed()
    assert in_use.is_closed()
    assert pool.idle() == 0


async def test_pool_keeps_at_most_size_idle_connections(marquee: Marquee) -> None:
    pool = ConnectionPool(
        functools.partial(connect, options=OPTIONS), size=1, idle_timeout=60.0, check_timeout=1.0
    )
    try:
        first = await used_connection(pool, marquee)
        second = await used_connection(pool, marquee.model_copy(update={"name": "edge-2"}))
        assert first.is_closed()
        assert not second.is_closed()
        assert pool.idle() == 1
    finally:
        await pool.close()
