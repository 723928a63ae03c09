"""Many Marquees on one lab host: a fleet that costs one sshd and one dockerd, for the remote
benchmarks.

Each Marquee is a separate entry of the inventory reaching the same sshd and dockerd, kept apart
the way separate hosts are: a workdir and a fence state directory of its own, and Playgrounds
whose names (hence compose project names, ``pg-<playground>``) start with the Marquee's name. Our
containers carry their Marquee's name, so one Marquee's sweep never sees another's. Each Marquee
opens its own SSH connections, runs its own commands and compose projects: per Marquee, the host
sees what a real host of its own would.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from playguard_lab.fleet import Lab, MarqueeHost


def marquee_entry(
    host: MarqueeHost, name: str, directory: Path, *, canary: bool = False
) -> dict[str, Any]:
    """An inventory entry for a Marquee called ``name`` on ``host``, with its workdir and fence
    state under ``directory``; a ``canary`` goes first in every rollout."""
    return {
        "name": name,
        "host": host.ssh.host,
        "port": host.ssh.port,
        "user": host.ssh.user,
        "identity_file": str(host.ssh.client_key),
        "known_hosts": str(host.ssh.known_hosts),
        "docker_socket": str(host.docker.socket),
        "workdir": str(directory / f"{name}-workdir"),
        "state_dir": str(directory / f"{name}-state"),
        **({"canary": True} if canary else {}),
    }


def registry_entry(lab: Lab, directory: Path) -> dict[str, Any]:
    """The lab registry as an inventory entry, its password in a 0600 file under ``directory``."""
    password_file = directory / "registry-password"
    password_file.write_text(lab.registry.password)
    password_file.chmod(0o600)
    return {
        "name": "lab",
        "server": lab.registry.address,
        "username": lab.registry.username,
        "password_file": str(password_file),
    }


def shared_host_inventory(
    lab: Lab,
    directory: Path,
    *,
    marquees: int,
    playgrounds: int,
    host: int = 0,
    rollout: Mapping[str, Any] | None = None,
    canaries: int = 0,
) -> dict[str, Any]:
    """A desired state of ``marquees`` Marquees, all on the lab's Marquee host ``host``, each
    with ``playgrounds`` Playgrounds of the origin's compose project on ``main``; with
    ``rollout`` (``{"waves": [1, "50%", "100%"], "bake": 10}``) a release of it goes in
    waves, the first ``canaries`` Marquees first."""
    directory.mkdir(parents=True, exist_ok=True)
    shared = lab.marquees[host]
    names = [f"{shared.name}-{index}" for index in range(marquees)]
    web: dict[str, Any] = {"name": "web", "repo": lab.git.url, "images": [lab.image],
                           "registry": "lab"}  # fmt: skip
    if rollout is not None:
        web["rollout"] = dict(rollout)
    return {
        "marquees": [
            marquee_entry(shared, name, directory, canary=index < canaries)
            for index, name in enumerate(names)
        ],
        "registries": [registry_entry(lab, directory)],
        "playspecs": [web],
        "playgrounds": [
            {"name": f"{name}-web-{index}", "playspec": "web", "marquee": name, "branch": "main"}
            for name in names
            for index in range(playgrounds)
        ],
    }


def write_inventory(inventory: dict[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(inventory, indent=2))  # JSON is YAML
    return path
