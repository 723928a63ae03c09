"""Fixtures for running real phases against the lab: a Marquee that is the lab's sshd + dockerd,
an inventory that uses the lab's registry and git origin (``tests.support.world``), and a runner
that gives a phase a real remote session under a real lease."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import aiodocker
import asyncpg
import pytest
import structlog
from redis import Redis as SyncRedis
from redis.asyncio import Redis

from playguard_async.coordination.keys import marquee_lock_name
from playguard_async.coordination.lock import TokenLock
from playguard_async.desired_state.postgres.schema import migrate
from playguard_async.desired_state.postgres.transfer import import_inventory
from playguard_async.phases.protocol import Phase, PhaseContext, PhaseReport
from playguard_async.remote.docker import MANAGED
from playguard_async.remote.memo import ComposeMemo
from playguard_async.remote.ssh import RemoteOptions, RemoteSession, open_session
from playguard_lab import DockerDaemon, GitOrigin, RedisServer, RegistryServer, SshServer
from tests.support.cli import LAB_SETTINGS, Playguard
from tests.support.daemon import DaemonRunner
from tests.support.edge import LabEdge
from tests.support.netns import Namespace, leftover_namespaces, network_namespace
from tests.support.pg_inventory import full_document, write_inventory
from tests.support.playgrounds import use_own_branch
from tests.support.postgres import LabDatabase
from tests.support.world import LAB_OPTIONS, LabWorld, PhaseRun, PhaseRunner, lab_marquee_fields


@pytest.fixture
def lab_world(
    ssh_server: SshServer,
    docker_daemon: DockerDaemon,
    registry: RegistryServer,
    git_origin: GitOrigin,
    busybox_image: str,
    tmp_path: Path,
) -> LabWorld:
    """One Marquee (the lab's), the lab registry, one playspec from the origin, one playground on
    main and one active agent chat. Each test gets its own remote workdir."""
    password_file = tmp_path / "registry-password"
    password_file.write_text(registry.password)
    data: dict[str, Any] = {
        "marquees": [lab_marquee_fields(ssh_server, docker_daemon, tmp_path / "workdir")],
        "registries": [
            {
                "name": "lab",
                "server": registry.address,
                "username": registry.username,
                "password_file": str(password_file),
            }
        ],
        "playspecs": [
            {
                "name": "web",
                "repo": git_origin.url,
                "compose_file": "compose.yaml",
                "images": [busybox_image],
                "registry": "lab",
                # health_grace (5 s) for its service without a healthcheck, plus compose's own
                # time: the timeout counts from the container's creation, before its start.
                "health_timeout": 15,
            }
        ],
        "playgrounds": [
            {"name": "web-main", "playspec": "web", "marquee": "edge-1", "branch": "main"}
        ],
        "agent_chats": [
            {
                "name": "chat-1",
                "playground": "web-main",
                "image": busybox_image,
                "command": ["sleep", "3600"],
            }
        ],
    }
    return LabWorld(data=data, password_file=password_file)


@pytest.fixture(scope="module")
def second_host(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[SshServer, DockerDaemon]]:
    """A second simulated Marquee: its own sshd and its own dockerd."""
    root = tmp_path_factory.mktemp("second-host")
    with SshServer(root / "ssh") as ssh, DockerDaemon(root / "docker", index=1) as docker:
        yield ssh, docker


@pytest.fixture
def run_phase(redis: Redis) -> PhaseRunner:
    """Run one phase as the engine would: under a real lease, with a real remote session."""

    async def run(
        phase: Phase | Sequence[Phase], world: LabWorld, *, dry_run: bool = False,
        options: RemoteOptions = LAB_OPTIONS, compose_memo: ComposeMemo | None = None,
        watch: Callable[[RemoteSession], None] | None = None, tells: bool = True,
    ) -> PhaseRun:  # fmt: skip
        """Several phases run one after the other in one session, as in one cycle; the report
        is the last one's. ``watch`` sees the session before any phase runs; ``tells`` false:
        a cycle whose notices no one sends (``plan``)."""
        phases = [phase] if isinstance(phase, Phase) else list(phase)
        inventory = world.inventory()
        marquee = inventory.marquee("edge-1")
        # The Marquee's own lock, as the engine takes it: fences grow run after run, which the
        # host's fence check requires of successive leases.
        lease = await TokenLock(redis, marquee_lock_name(marquee.name), ttl=120.0).acquire()
        assert lease is not None
        try:
            async with open_session(
                marquee, options, lease=lease, dry_run=dry_run, compose_memo=compose_memo
            ) as session:
                if watch is not None:
                    watch(session)

                async def remote() -> RemoteSession:
                    return session

                report = PhaseReport()
                for each in phases:
                    ctx = PhaseContext(
                        marquee=marquee,
                        inventory=inventory,
                        log=structlog.get_logger("test").bind(phase=each.name),
                        dry_run=dry_run,
                        lease=lease,
                        remote=remote,
                        tells=tells,
                    )
                    report = await each(ctx) or PhaseReport()
                return PhaseRun(report=report, actions=list(session.actions))
        finally:
            await lease.release()

    return run


@pytest.fixture
async def lab_docker(docker_daemon: DockerDaemon) -> AsyncIterator[aiodocker.Docker]:
    """A direct client of the lab's dockerd, for tests to set up and check the world; removes
    every container labelled as ours when the test ends."""
    docker = aiodocker.Docker(url=docker_daemon.url)
    try:
        yield docker
    finally:
        filters = json.dumps({"label": [f"{MANAGED}=true"]})
        for container in await docker.containers.list(all=True, filters=filters):
            await container.delete(force=True, v=True)
        await docker.close()


@pytest.fixture
def edge(
    lab_world: LabWorld,
    run_phase: PhaseRunner,
    lab_docker: aiodocker.Docker,
    git_origin: GitOrigin,
    busybox_image: str,
) -> LabEdge:
    """The lab's Marquee with its world, dockerd client and phase runner, for the phase tests."""
    return LabEdge(lab_world, run_phase, lab_docker, git_origin, busybox_image)


@pytest.fixture
def store(live_redis_server: RedisServer) -> Iterator[SyncRedis]:
    """A plain synchronous client on an emptied lab Redis, to see what the daemons left there."""
    client = SyncRedis.from_url(live_redis_server.url, socket_timeout=2, socket_connect_timeout=2)
    client.flushall()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def daemons(
    tmp_path: Path, live_redis_server: RedisServer, store: SyncRedis
) -> Iterator[DaemonRunner]:
    """Starts `playguard run` processes against the lab Redis; kills any left when the test ends."""
    runner = DaemonRunner(tmp_path, live_redis_server.url)
    try:
        yield runner
    finally:
        runner.kill_all()


@pytest.fixture
def netns(daemons: DaemonRunner) -> Iterator[Callable[[Sequence[int]], Namespace]]:
    """Opens network namespaces wired to the lab ports given (``tests.support.netns``); kills
    the test's daemons, then removes every namespace, however the test ended (a process left
    inside would keep its namespace alive)."""
    with contextlib.ExitStack() as opened:
        try:
            yield lambda ports: opened.enter_context(network_namespace(ports))
        finally:
            daemons.kill_all()


@pytest.fixture(scope="session", autouse=True)
def no_namespace_left() -> Iterator[None]:
    """The session's last check: no network namespace the suite made is still there."""
    yield
    left = leftover_namespaces()
    assert not left, f"network namespaces the tests made are still there: {left}"


@pytest.fixture
def playguard(daemons: DaemonRunner) -> Playguard:
    """``playguard`` with files in the test's directory, on an emptied lab Redis."""
    return Playguard(daemons)


@pytest.fixture
def lab(
    playguard: Playguard, lab_world: LabWorld, git_origin: GitOrigin, busybox_image: str,
    lab_docker: aiodocker.Docker, store: SyncRedis,
) -> LabWorld:  # fmt: skip
    """The lab's Marquee, its playground on a branch of the test's own, configured for cycles;
    ``lab_docker`` removes the containers they start when the test ends."""
    use_own_branch(lab_world, git_origin, busybox_image)
    playguard.configure(lab_world.data, **LAB_SETTINGS)
    return lab_world


@pytest.fixture
async def fleet(postgres: LabDatabase, tmp_path: Path) -> AsyncIterator[asyncpg.Connection]:
    """The test's database, migrated and holding ``full_document()``: edge-0..2, edge-0 and
    edge-1 launchable, each with playgrounds shop-<n>-0..2 (an admin connection to it)."""
    connection = await postgres.connect()
    await migrate(connection)
    await import_inventory(connection, write_inventory(tmp_path, full_document()))
    yield connection
    await connection.close()
