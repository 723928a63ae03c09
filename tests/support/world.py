"""The shared world of the lab tests: a desired state pointing at the lab's servers (``LabWorld``),
the remote options that suit them (``LAB_OPTIONS``), and what running one phase returns. The
fixtures that build them are in ``tests/integration/conftest.py``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from playguard_async.desired_state.model import Inventory, Marquee
from playguard_async.desired_state.source import Ability
from playguard_async.phases.protocol import PhaseReport
from playguard_async.remote.ssh import RemoteOptions
from playguard_lab import DockerDaemon, SshServer

LAB_OPTIONS = RemoteOptions(
    connect_timeout=5.0,
    command_timeout=60.0,
    docker_timeout=60.0,
    compose_command=("docker-compose",),
    stuck_after=2.0,
    health_grace=0.5,
    orphan_grace=0.0,
)


def ssh_marquee(ssh: SshServer, name: str, workdir: Path) -> dict[str, str | int]:
    """A Marquee that is the lab's sshd (on this machine), its files under ``workdir`` and its
    fence state beside it; several can share one sshd."""
    return {
        "name": name,
        "host": ssh.host,
        "port": ssh.port,
        "user": ssh.user,
        "identity_file": str(ssh.client_key),
        "known_hosts": str(ssh.known_hosts),
        "workdir": str(workdir),
        "state_dir": str(workdir.with_name(f"{workdir.name}-state")),
    }


def ssh_marquee_through(
    ssh: SshServer, port: int, name: str, workdir: Path
) -> dict[str, str | int]:
    """``ssh_marquee`` reached on ``port`` (a fault proxy in front of the sshd): its known_hosts
    names the host key under that port, as a host behind a forwarded port is known."""
    entry = ssh_marquee(ssh, name, workdir)
    known_hosts = workdir.with_name(f"{workdir.name}-known_hosts")
    known_hosts.parent.mkdir(parents=True, exist_ok=True)
    key = ssh.known_hosts.read_text(encoding="utf-8").split(" ", 1)[1]
    known_hosts.write_text(f"[{ssh.host}]:{port} {key}", encoding="utf-8")
    return {**entry, "port": port, "known_hosts": str(known_hosts)}


def lab_marquee_fields(ssh: SshServer, docker: DockerDaemon, workdir: Path) -> dict[str, Any]:
    return {**ssh_marquee(ssh, "edge-1", workdir), "docker_socket": str(docker.socket)}


@dataclass
class LabWorld:
    """A desired state pointing at the lab, built as a plain dict so a test can change it."""

    data: dict[str, Any]
    password_file: Path
    abilities: ClassVar[frozenset[Ability]] = frozenset()

    def inventory(self) -> Inventory:
        return Inventory.model_validate(self.data)

    def marquee(self) -> Marquee:
        return self.inventory().marquee("edge-1")

    async def load(self) -> Inventory:
        """As a ``DesiredState``: an engine over the world sees each change a test makes."""
        return self.inventory()

    def describe(self) -> str:
        return "the lab world"


@dataclass
class PhaseRun:
    report: PhaseReport
    actions: list[str] = field(default_factory=list)


PhaseRunner = Callable[..., Any]
"""``await run_phase(phase, world, dry_run=False, options=LAB_OPTIONS, tells=True) -> PhaseRun``"""
