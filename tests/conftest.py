"""Fixtures for the lab's real servers: one of each per test session, each stopped when it ends.

A missing program skips the tests that need it on a developer's machine, but fails them under CI,
where a skip would let a broken install script pass unnoticed.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import NoReturn, TypeVar

import pytest
from redis.asyncio import Redis

from playguard_async.coordination.client import connect_redis
from playguard_async.phases.decision_copies import MEMORY
from playguard_lab import (
    DockerDaemon,
    GitOrigin,
    MissingBinary,
    PostgresServer,
    RedisServer,
    RegistryServer,
    SshServer,
    build_busybox_image,
    find_binary,
    push_image,
)
from playguard_lab.postgres import postgres_binaries
from playguard_lab.process import StartStop
from playguard_lab.topologies import ClusterLab, SentinelGroup
from tests.support.postgres import LabDatabase, fresh_database
from tests.support.topologies import TOPOLOGIES, TopologyUnderTest, client_for, heal

INTEGRATION_DIR = Path(__file__).parent / "integration"

ServerT = TypeVar("ServerT", bound=StartStop)

# A run started in the background by a non-interactive shell (`.ci/run &`) inherits SIGINT
# ignored, and so would every CLI and daemon the tests start (an ignored signal stays ignored
# across exec): the tests that interrupt them with Ctrl-C could not. Python's own default again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(INTEGRATION_DIR):
            item.add_marker(pytest.mark.integration)


def skip_or_fail(missing: MissingBinary) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(str(missing), pytrace=False)
    pytest.skip(str(missing))


@pytest.fixture(scope="session")
def require_binary() -> Callable[[str, str], str]:
    """For a test that runs a program itself, e.g. `require_binary("ssh", "openssh-client")`."""

    def require(name: str, package: str) -> str:
        try:
            return find_binary(name, package)
        except MissingBinary as missing:
            skip_or_fail(missing)

    return require


@pytest.fixture(scope="session")
def require_postgres() -> Path:
    """For a test that has the lab start PostgreSQL itself: the server's programs' directory."""
    try:
        return postgres_binaries()
    except MissingBinary as missing:
        skip_or_fail(missing)


@pytest.fixture(autouse=True)
def fresh_replica_memory() -> None:
    """A test's in-process cycles are a replica of their own, which starts knowing no decision:
    an earlier test's rollouts and pins (its Redis flushed since) are not this one's."""
    MEMORY.forget()


@pytest.fixture(scope="session")
def lab_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lab")


def _served(make: Callable[[], ServerT]) -> Iterator[ServerT]:
    """Start the server ``make`` builds, yield it, stop it; a missing binary skips or fails."""
    try:
        server = make()
    except MissingBinary as missing:
        skip_or_fail(missing)
    with server:
        yield server


@pytest.fixture(scope="session")
def redis_server(lab_dir: Path) -> Iterator[RedisServer]:
    yield from _served(lambda: RedisServer(lab_dir / "redis"))


@pytest.fixture(scope="session")
def ssh_server(lab_dir: Path) -> Iterator[SshServer]:
    yield from _served(lambda: SshServer(lab_dir / "ssh"))


@pytest.fixture(scope="session")
def docker_daemon(lab_dir: Path) -> Iterator[DockerDaemon]:
    yield from _served(lambda: DockerDaemon(lab_dir / "docker", index=0))


@pytest.fixture(scope="session")
def registry(lab_dir: Path) -> Iterator[RegistryServer]:
    yield from _served(lambda: RegistryServer(lab_dir / "registry"))


@pytest.fixture(scope="session")
def postgres_server(lab_dir: Path) -> Iterator[PostgresServer]:
    """Debian's PostgreSQL for the whole session (about 2 s to initdb and start)."""
    yield from _served(lambda: PostgresServer(lab_dir / "postgres"))


@pytest.fixture
async def postgres(postgres_server: PostgresServer) -> AsyncIterator[LabDatabase]:
    """An empty database of its own on the session's running server, dropped after the test."""
    postgres_server.ensure_running()
    async with fresh_database(postgres_server) as database:
        yield database


@pytest.fixture(scope="session")
def busybox_image(docker_daemon: DockerDaemon, registry: RegistryServer) -> str:
    """The image's reference in the lab registry; docker_daemon holds it under that name too."""
    local_tag = "playguard-lab/busybox:local"
    try:
        build_busybox_image(docker_daemon, local_tag)
    except MissingBinary as missing:
        skip_or_fail(missing)
    return push_image(docker_daemon, registry, local_tag)


@pytest.fixture(scope="session")
def git_origin(lab_dir: Path, busybox_image: str) -> GitOrigin:
    try:
        return GitOrigin(lab_dir / "git", busybox_image)
    except MissingBinary as missing:
        skip_or_fail(missing)


@pytest.fixture(scope="session")
def sentinel_group(lab_dir: Path) -> Iterator[SentinelGroup]:
    """One primary, two replicas, three sentinels, for the whole session (about 7 s to start)."""
    yield from _served(lambda: SentinelGroup(lab_dir / "sentinel"))


@pytest.fixture(scope="session")
def redis_cluster(lab_dir: Path) -> Iterator[ClusterLab]:
    """Three primaries with a replica each, for the whole session (about 3 s to start)."""
    yield from _served(lambda: ClusterLab(lab_dir / "cluster"))


@pytest.fixture
def sentinel(sentinel_group: SentinelGroup) -> Iterator[SentinelGroup]:
    """The session's Sentinel group, whole before the test and healed after it."""
    heal(sentinel_group)
    yield sentinel_group
    heal(sentinel_group)


@pytest.fixture
def cluster(redis_cluster: ClusterLab) -> Iterator[ClusterLab]:
    """The session's Cluster, whole before the test and healed after it."""
    heal(redis_cluster)
    yield redis_cluster
    heal(redis_cluster)


async def _topology_under_test(
    request: pytest.FixtureRequest, name: str
) -> AsyncIterator[TopologyUnderTest]:
    fixture = {"single": "redis_server", "sentinel": "sentinel_group", "cluster": "redis_cluster"}
    lab = request.getfixturevalue(fixture[name])
    heal(lab)
    client = client_for(lab.url)
    try:
        await client.flushall()
        yield TopologyUnderTest(name=name, url=lab.url, lab=lab, redis=client)
    finally:
        await client.aclose()
        heal(lab)


@pytest.fixture(params=TOPOLOGIES)
async def topology(request: pytest.FixtureRequest) -> AsyncIterator[TopologyUnderTest]:
    """Each test that takes it runs on a single server, a Sentinel group and a Cluster: whole
    and emptied before the test, healed after it whatever the test did to the servers."""
    async for topology in _topology_under_test(request, request.param):
        yield topology


@pytest.fixture(params=("sentinel", "cluster"))
async def replicated(request: pytest.FixtureRequest) -> AsyncIterator[TopologyUnderTest]:
    """As ``topology``, on the topologies whose primaries have replicas."""
    async for topology in _topology_under_test(request, request.param):
        yield topology


@pytest.fixture
def live_redis_server(redis_server: RedisServer) -> RedisServer:
    """The session's redis-server, running and not paused, whatever the previous test did to it."""
    redis_server.ensure_running()
    return redis_server


@pytest.fixture
async def redis(live_redis_server: RedisServer) -> AsyncIterator[Redis]:
    """An empty database on the live lab server, with the short timeouts a paused server needs.

    Built like the daemon's own client (a blocking pool), so hundreds of concurrent callers queue
    for a connection instead of failing.
    """
    client = connect_redis(live_redis_server.url, socket_timeout=1, connect_timeout=1)
    assert isinstance(client, Redis)
    try:
        await client.flushall()
        yield client
    finally:
        await client.aclose()
