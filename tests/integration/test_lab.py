"""The lab's servers answer as the real programs do, and stopping them leaves nothing behind."""

from __future__ import annotations

import base64
import http.client
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import aiodocker
import asyncssh
import pytest
from aiodocker.exceptions import DockerError
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from playguard_lab import (
    DockerDaemon,
    GitOrigin,
    Lab,
    MissingBinary,
    RedisServer,
    RegistryServer,
    ServerStartFailed,
    SshServer,
    build_busybox_image,
    find_binary,
)


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live (not zombie) processes that name `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError):
            continue
        if state != "Z" and text in cmdline:
            found.append(cmdline)
    return found


def mounts_under(root: Path) -> list[str]:
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [point for point in (line.split()[4] for line in lines) if point.startswith(f"{root}/")]


def ssh_options(server: SshServer, known_hosts: Path) -> dict[str, object]:
    return {
        "port": server.port,
        "username": server.user,
        "client_keys": [str(server.client_key)],
        "known_hosts": str(known_hosts),
    }


def registry_status(registry: RegistryServer, password: str | None) -> int:
    headers = {}
    if password is not None:
        token = base64.b64encode(f"{registry.username}:{password}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    connection = http.client.HTTPConnection("127.0.0.1", registry.port, timeout=5)
    try:
        connection.request("GET", "/v2/", headers=headers)
        return connection.getresponse().status
    finally:
        connection.close()


def test_missing_binary_names_the_debian_package() -> None:
    with pytest.raises(MissingBinary, match=r"apt-get install playguard-no-such-package") as err:
        find_binary("playguard-no-such-binary", "playguard-no-such-package")
    assert err.value.binary == "playguard-no-such-binary"
    assert err.value.package == "playguard-no-such-package"


async def test_redis_answers_ping(redis: Redis) -> None:
    assert await redis.ping() is True


async def test_redis_pause_resume_kill_stop_restart_keep_the_port(
    redis: Redis, redis_server: RedisServer
) -> None:
    port, first_pid = redis_server.port, redis_server.pid
    await redis.set("survives-a-pause", "yes")

    redis_server.pause()
    try:
        assert redis_server.paused
        with pytest.raises(RedisTimeoutError):
            await redis.ping()
    finally:
        redis_server.resume()
    assert await redis.get("survives-a-pause") == b"yes"
    assert redis_server.pid == first_pid

    redis_server.kill()
    assert redis_server.pid is None
    with pytest.raises(RedisConnectionError):
        await redis.ping()
    redis_server.restart()
    assert redis_server.port == port
    assert redis_server.pid not in {None, first_pid}
    assert await redis.ping() is True
    assert await redis.get("survives-a-pause") is None, "no persistence: a restart starts empty"

    redis_server.stop()
    assert not redis_server.running
    with pytest.raises(RedisConnectionError):
        await redis.ping()
    redis_server.restart()
    assert redis_server.port == port
    assert await redis.ping() is True


async def test_ensure_running_undoes_pause_and_kill(
    redis: Redis, redis_server: RedisServer
) -> None:
    redis_server.pause()
    redis_server.ensure_running()
    assert await redis.ping() is True
    redis_server.kill()
    with pytest.raises(RedisConnectionError):
        await redis.ping()
    redis_server.ensure_running()
    assert await redis.ping() is True


async def test_ssh_runs_true_with_the_client_key_and_known_hosts(ssh_server: SshServer) -> None:
    options = ssh_options(ssh_server, ssh_server.known_hosts)
    async with asyncssh.connect(ssh_server.host, **options) as connection:
        result = await connection.run("true", check=True)
        host_key = connection.get_server_host_key()
    assert result.exit_status == 0
    assert host_key is not None
    assert host_key.get_fingerprint("sha256") == ssh_server.host_key_fingerprint


async def test_ssh_refuses_a_host_missing_from_known_hosts(
    ssh_server: SshServer, tmp_path: Path
) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    options = ssh_options(ssh_server, empty)
    with pytest.raises(asyncssh.HostKeyNotVerifiable):
        await asyncssh.connect(ssh_server.host, **options)


async def test_docker_socket_answers_through_ssh_forwarding(
    ssh_server: SshServer, docker_daemon: DockerDaemon, tmp_path: Path
) -> None:
    local_socket = tmp_path / "docker.sock"
    options = ssh_options(ssh_server, ssh_server.known_hosts)
    async with asyncssh.connect(ssh_server.host, **options) as connection:
        listener = await connection.forward_local_path(str(local_socket), str(docker_daemon.socket))
        try:
            async with aiodocker.Docker(url=f"unix://{local_socket}") as docker:
                version = await docker.version()
        finally:
            listener.close()
            await listener.wait_closed()
    assert version["ApiVersion"]


async def test_docker_daemon_answers_ping(docker_daemon: DockerDaemon) -> None:
    async with (
        aiodocker.Docker(url=docker_daemon.url) as docker,
        docker._query("_ping") as response,
    ):
        assert await response.text() == "OK"


async def test_busybox_image_runs_a_container_that_echoes(
    docker_daemon: DockerDaemon, busybox_image: str
) -> None:
    async with aiodocker.Docker(url=docker_daemon.url) as docker:
        container = await docker.containers.run(
            config={
                "Image": busybox_image,
                "Cmd": ["echo", "hello from busybox"],
                "HostConfig": {"NetworkMode": "none"},
            }
        )
        try:
            outcome = await container.wait()
            output = await container.log(stdout=True)
        finally:
            await container.delete(force=True)
    assert outcome["StatusCode"] == 0
    assert output == ["hello from busybox\n"]


async def test_two_docker_daemons_answer_side_by_side(
    docker_daemon: DockerDaemon, lab_dir: Path
) -> None:
    with DockerDaemon(lab_dir / "docker-b", index=1) as second:
        async with (
            aiodocker.Docker(url=docker_daemon.url) as first_client,
            aiodocker.Docker(url=second.url) as second_client,
        ):
            first_info = await first_client.system.info()
            second_info = await second_client.system.info()
    assert first_info["DockerRootDir"] == str(docker_daemon.data_root)
    assert second_info["DockerRootDir"] == str(second.data_root)
    assert second.pid is None
    assert processes_mentioning(str(second.workdir)) == []
    assert mounts_under(second.workdir) == []


def test_docker_stop_after_a_crash_ends_orphaned_containers_and_mounts(lab_dir: Path) -> None:
    daemon = DockerDaemon(lab_dir / "docker-c", index=2)
    try:
        daemon.start()
        build_busybox_image(daemon, "crash-test:1")
        daemon.cli("run", "--detach", "--network", "none", "crash-test:1", "sleep", "86400")
        daemon.kill()
        assert processes_mentioning(str(daemon.exec_root)), "a crash leaves the container's shim"
    finally:
        started = time.monotonic()
        daemon.stop()
    assert time.monotonic() - started < 10
    assert processes_mentioning(str(daemon.workdir)) == []
    assert mounts_under(daemon.workdir) == []


async def test_registry_login_accepts_its_password_and_refuses_another(
    docker_daemon: DockerDaemon, registry: RegistryServer
) -> None:
    async with aiodocker.Docker(url=docker_daemon.url) as docker:
        accepted = await docker.auth(
            username=registry.username, password=registry.password, serveraddress=registry.address
        )
        with pytest.raises(DockerError) as refused:
            await docker.auth(
                username=registry.username, password="wrong", serveraddress=registry.address
            )
    assert accepted["Status"] == "Login Succeeded"
    # Engine 20.10 answers a registry's 401 with a 500 of its own that quotes it.
    assert refused.value.status == 500
    assert "401 Unauthorized" in refused.value.message
    assert registry_status(registry, registry.password) == 200
    assert registry_status(registry, "wrong") == 401
    assert registry_status(registry, None) == 401


def test_git_origin_holds_main_and_feature_with_the_compose_project(
    git_origin: GitOrigin, busybox_image: str, require_binary: Callable[[str, str], str]
) -> None:
    git = require_binary("git", "git")
    listing = subprocess.run(
        [git, "ls-remote", git_origin.url], capture_output=True, text=True, check=True
    ).stdout
    heads = {line.split("\t")[1] for line in listing.splitlines() if "refs/heads/" in line}
    # The origin lives for the whole session: tests that ran earlier may have pushed branches of
    # their own (tests.support.playgrounds.use_own_branch names them test-...).
    own = {head for head in heads if head.startswith("refs/heads/test-")}
    assert heads - own == {"refs/heads/main", "refs/heads/feature"}
    compose = git_origin.git("--git-dir", str(git_origin.path), "show", "main:compose.yaml")
    assert f'image: "{busybox_image}"' in compose
    assert 'command: ["sleep", "86400"]' in compose
    assert 'network_mode: "none"' in compose


def test_git_origin_commit_pushes_and_delete_branch_removes(tmp_path: Path) -> None:
    origin = GitOrigin(tmp_path / "git", "registry.invalid/app:1")
    sha = origin.commit("feature", {"config/app.env": "MODE=fast\n"}, "Go fast")
    topic = origin.commit("topic", {"NOTES": "new\n"}, "Start a topic")
    listing = origin.git("ls-remote", "--heads", origin.url)
    assert f"{sha}\trefs/heads/feature" in listing
    assert f"{topic}\trefs/heads/topic" in listing
    assert origin.git("--git-dir", str(origin.path), "show", f"{sha}:config/app.env") == (
        "MODE=fast\n"
    )
    origin.delete_branch("feature")
    assert origin.branches() == ["main", "topic"]


def test_lab_starts_everything_and_stop_leaves_nothing_running(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    workdir = tmp_path_factory.mktemp("whole-lab")
    with Lab(workdir, marquees=2) as lab:
        assert all(server.running for server in lab.servers())
        assert lab.git.branches() == ["feature", "main"]
        other = lab.marquees[1].docker
        other.cli(
            "login", "--username", lab.registry.username, "--password-stdin", lab.registry.address,
            stdin=lab.registry.password.encode(),
        )  # fmt: skip
        other.cli("pull", lab.image)
    assert processes_mentioning(str(workdir)) == []
    assert mounts_under(workdir) == []


def test_lab_stops_what_it_started_when_a_later_server_fails(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    workdir = tmp_path_factory.mktemp("broken-lab")
    lab = Lab(workdir, marquees=1)
    with (
        socket.create_server(("127.0.0.1", lab.registry.port)),
        pytest.raises(ServerStartFailed, match="address already in use") as failed,
    ):
        lab.start()
    assert failed.value.server == "registry"
    assert not lab.redis.running
    assert processes_mentioning(str(workdir)) == []
