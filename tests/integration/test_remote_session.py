"""The remote session against the lab's real sshd and dockerd."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from playguard_async.desired_state.model import Marquee
from playguard_async.kits.aio import bounded
from playguard_async.remote.errors import (
    AuthRefused,
    HostKeyMismatch,
    HostUnreachable,
    MarqueeMisconfigured,
    RemoteCommandFailed,
    RemoteCommandTimeout,
)
from playguard_async.remote.ssh import RemoteOptions, open_session
from playguard_lab import DockerDaemon, SshServer
from tests.support.fencing import StaticLease, journal

pytestmark = pytest.mark.integration

OPTIONS = RemoteOptions(connect_timeout=5.0, command_timeout=10.0, output_limit=1000)


def lab_marquee(ssh: SshServer, docker: DockerDaemon, **changes: object) -> Marquee:
    fields: dict[str, object] = {
        "name": "edge-1",
        "host": ssh.host,
        "port": ssh.port,
        "user": ssh.user,
        "identity_file": ssh.client_key,
        "known_hosts": ssh.known_hosts,
        "docker_socket": str(docker.socket),
        "workdir": "/tmp/playguard-test-workdir",
    }
    fields.update(changes)
    return Marquee.model_validate(fields)


async def test_arguments_reach_the_host_literally(
    ssh_server: SshServer, docker_daemon: DockerDaemon, tmp_path: Path
) -> None:
    canary = tmp_path / "pwned"
    async with open_session(lab_marquee(ssh_server, docker_daemon), OPTIONS) as session:
        result = await session.run(["printf", "%s", f"a b; touch {canary}", "$HOME"])
    assert result.stdout == f"a b; touch {canary}$HOME"
    assert not canary.exists()


async def test_failed_command_carries_exit_status_and_stderr(
    ssh_server: SshServer, docker_daemon: DockerDaemon
) -> None:
    async with open_session(lab_marquee(ssh_server, docker_daemon), OPTIONS) as session:
        with pytest.raises(RemoteCommandFailed) as failed:
            await session.run(["sh", "-c", "echo broken >&2; exit 3"])
        unchecked = await session.run(["sh", "-c", "exit 4"], check=False)
    assert failed.value.exit_status == 3
    assert failed.value.stderr_tail == "broken"
    assert "edge-1" in str(failed.value)
    assert unchecked.exit_status == 4


async def test_command_past_its_timeout_is_abandoned(
    ssh_server: SshServer, docker_daemon: DockerDaemon
) -> None:
    async with open_session(lab_marquee(ssh_server, docker_daemon), OPTIONS) as session:
        with pytest.raises(RemoteCommandTimeout):
            await session.run(["sleep", "30"], timeout=0.5)
        assert (await session.run(["echo", "still usable"])).stdout == "still usable\n"


async def test_output_is_capped(ssh_server: SshServer, docker_daemon: DockerDaemon) -> None:
    async with open_session(lab_marquee(ssh_server, docker_daemon), OPTIONS) as session:
        result = await session.run(["sh", "-c", "seq 1 100000"])
    assert result.truncated
    assert len(result.stdout) <= 1000
    assert result.stdout.endswith("100000\n")


async def test_many_commands_at_once_share_one_connection(
    ssh_server: SshServer, docker_daemon: DockerDaemon
) -> None:
    async with open_session(lab_marquee(ssh_server, docker_daemon), OPTIONS) as session:
        results = await asyncio.gather(*(session.run(["echo", str(i)]) for i in range(30)))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(30)]


async def test_docker_api_goes_through_a_private_tunnel(
    ssh_server: SshServer, docker_daemon: DockerDaemon
) -> None:
    async with open_session(lab_marquee(ssh_server, docker_daemon), OPTIONS) as session:
        version = await session.api(session.docker.version())
        tunnel_dir = Path(session.docker.session.connector.path).parent  # type: ignore[union-attr]
        mode = stat.S_IMODE(os.stat(tunnel_dir).st_mode)
    assert version["ApiVersion"]
    assert mode == 0o700
    assert not tunnel_dir.exists(), "the tunnel's directory is removed with the session"


async def test_writes_go_through_the_funnel_and_dry_run_writes_nothing(
    ssh_server: SshServer, docker_daemon: DockerDaemon, tmp_path: Path
) -> None:
    target = tmp_path / "sub" / "config.json"
    marquee = lab_marquee(ssh_server, docker_daemon, state_dir=str(tmp_path / "state"))
    async with open_session(marquee, OPTIONS, lease=StaticLease(3), dry_run=True) as session:
        await session.write_file("write config", str(target), '{"secret": 1}')
    assert session.actions == ["would write config"]
    assert not target.exists()
    assert journal(tmp_path / "state") == []
    async with open_session(marquee, OPTIONS, lease=StaticLease(3)) as session:
        await session.write_file("write config", str(target), '{"secret": 1}')
    assert session.actions == ["write config"]
    assert [(entry.fence, entry.action) for entry in journal(tmp_path / "state")] == [
        (3, "write config")
    ]
    assert target.read_text() == '{"secret": 1}'
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


async def test_unknown_host_key_is_refused_naming_the_fingerprint(
    ssh_server: SshServer, docker_daemon: DockerDaemon, tmp_path: Path
) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(HostKeyMismatch) as refused:
        async with open_session(lab_marquee(ssh_server, docker_daemon, known_hosts=empty), OPTIONS):
            pass
    assert refused.value.fingerprint == ssh_server.host_key_fingerprint
    assert ssh_server.host_key_fingerprint in str(refused.value)
    assert str(empty) in str(refused.value)


async def test_changed_host_key_is_refused(
    ssh_server: SshServer, docker_daemon: DockerDaemon, tmp_path: Path
) -> None:
    other = tmp_path / "known_hosts"
    other.write_text(
        f"[{ssh_server.host}]:{ssh_server.port} "
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJdD7y3aLq454yWBdwLWbieU1ebz9/cu7/QEXn9OIeZJ\n"
    )
    with pytest.raises(HostKeyMismatch):
        async with open_session(lab_marquee(ssh_server, docker_daemon, known_hosts=other), OPTIONS):
            pass


async def test_wrong_client_key_is_auth_refused(
    ssh_server: SshServer, docker_daemon: DockerDaemon
) -> None:
    with pytest.raises(AuthRefused):
        async with open_session(
            lab_marquee(ssh_server, docker_daemon, identity_file=ssh_server.host_key), OPTIONS
        ):
            pass


async def test_stopped_sshd_is_unreachable(
    ssh_server: SshServer, docker_daemon: DockerDaemon
) -> None:
    ssh_server.stop()
    try:
        with pytest.raises(HostUnreachable):
            async with open_session(lab_marquee(ssh_server, docker_daemon), OPTIONS):
                pass
    finally:
        ssh_server.restart()


def broken_file(kind: str, path: Path, ssh: SshServer) -> Path:
    """A file that is not what a Marquee's entry says it is."""
    makers: dict[str, Callable[[], object]] = {
        "text": lambda: path.write_text("not a key at all\n"),
        "binary": lambda: path.write_bytes(os.urandom(2048)),
        "empty": lambda: path.write_bytes(b""),
        "not-utf8": lambda: path.write_bytes(b"[127.0.0.1]:22 ssh-ed25519 \xff\xfe\n"),
        "public-key": lambda: path.write_bytes(ssh.client_key.with_suffix(".pub").read_bytes()),
        "fifo": lambda: os.mkfifo(path),
        "directory": path.mkdir,
        "dev-zero": lambda: path.symlink_to("/dev/zero"),
        "huge": lambda: path.write_bytes(b"#" * (2 << 20)),
        "missing": lambda: None,
    }
    makers[kind]()
    return path


UNUSABLE_FILES = [
    *(("identity_file", kind) for kind in ("text", "binary", "empty", "public-key", "fifo",
                                           "directory", "dev-zero", "huge", "missing")),
    *(("known_hosts", kind) for kind in ("not-utf8", "binary", "fifo", "directory", "dev-zero",
                                         "huge")),
]  # fmt: skip


@pytest.mark.parametrize(("field", "kind"), UNUSABLE_FILES)
async def test_an_unusable_client_file_names_marquee_field_and_file(
    ssh_server: SshServer, docker_daemon: DockerDaemon, tmp_path: Path, field: str, kind: str
) -> None:
    path = broken_file(kind, tmp_path / field, ssh_server)
    marquee = lab_marquee(ssh_server, docker_daemon, **{field: path})
    with pytest.raises(MarqueeMisconfigured) as error:
        await bounded(10, open_session(marquee, OPTIONS).__aenter__())
    message = str(error.value)
    assert message.startswith(f"edge-1 ({ssh_server.host}:{ssh_server.port}): {field} {path}")
    assert "\n" not in message


@pytest.mark.parametrize("user", ["\u0627x1", "a\u0000b", "\u200e", "x\u2ff0", "\U000e0001"])
async def test_a_user_name_saslprep_refuses_names_marquee_and_user(
    ssh_server: SshServer, docker_daemon: DockerDaemon, user: str
) -> None:
    marquee = lab_marquee(ssh_server, docker_daemon, user=user)
    with pytest.raises(MarqueeMisconfigured) as error:
        await bounded(10, open_session(marquee, OPTIONS).__aenter__())
    assert str(error.value).startswith(f"edge-1 ({ssh_server.host}:{ssh_server.port}): user ")
