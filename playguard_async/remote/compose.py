"""Compose command lines for one playground's project on a Marquee: no I/O here.

Compose runs on the host with ``DOCKER_HOST`` pointing at the Marquee's engine and
``DOCKER_CONFIG`` at the directory holding the registry credentials, whichever compose the
settings name (``docker-compose`` 1.29 or ``docker compose`` v2): both read these variables and
accept the same flags used here.

Our labels reach the containers through an override file of our own, layered over the project's
compose file for ``config --hash`` and ``up``; the commands that only find containers by project
(``config --services``, ``stop``, ``down``) leave it out, so they work whether or not it was
written yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from playguard_async.desired_state.model import Marquee
from playguard_async.remote.docker import docker_config_dir, our_labels
from playguard_async.remote.git import checkout_dir, playground_dir

# Labels compose itself puts on every container of a project (1.29 and v2 alike).
PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
CONFIG_HASH_LABEL = "com.docker.compose.config-hash"


def override_path(marquee: Marquee, playground: str) -> str:
    return f"{playground_dir(marquee, playground)}/override.yaml"


def override_content(
    marquee: str,
    playground: str,
    services: Iterable[str],
    pinned: Mapping[str, str] | None = None,
) -> str:
    """Our override: our labels on every service, and, for a Playground rolled back to its last
    good state, each service's image ``pinned`` by digest (service -> reference). No ``version``
    key: compose 1.29 accepts an unversioned override over a file of any version, and v2
    ignores the key."""
    labels = our_labels(marquee, playground=playground)
    document: dict[str, Any] = {
        "services": {service: {"labels": labels} for service in sorted(services)}
    }
    for service, image in (pinned or {}).items():
        if service in document["services"]:
            document["services"][service]["image"] = image
    return "# Written by playguard; rewritten whenever it differs.\n" + yaml.safe_dump(
        document, sort_keys=True
    )


def parse_services(output: str) -> list[str]:
    """``config --services`` output: one service name per line."""
    return [line.strip() for line in output.splitlines() if line.strip()]


def parse_config_hashes(output: str) -> dict[str, str]:
    """``config --hash=*`` output ("<service> <hash>" lines, in 1.29 and v2) as service -> hash."""
    hashes: dict[str, str] = {}
    for line in output.splitlines():
        service, _, digest = line.strip().partition(" ")
        if digest:
            hashes[service] = digest.strip()
    return hashes


@dataclass(frozen=True)
class ComposeProject:
    """One playground's compose project on one Marquee, as command lines."""

    marquee: Marquee
    playground: str
    compose_file: str
    """Relative to the checkout, as the playspec names it."""
    compose_command: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"pg-{self.playground}"

    @property
    def checkout(self) -> str:
        return checkout_dir(self.marquee, self.playground)

    @property
    def compose_path(self) -> str:
        return f"{self.checkout}/{self.compose_file}"

    @property
    def override(self) -> str:
        return override_path(self.marquee, self.playground)

    def command(self) -> list[str]:
        """Compose for this project, before its files (``-f``) and its command: a dry run
        gives it a copy of the compose file as the checkout will be (``remote.planned``)."""
        return [
            "env",
            f"DOCKER_HOST=unix://{self.marquee.docker_socket}",
            f"DOCKER_CONFIG={docker_config_dir(self.marquee)}",
            *self.compose_command,
            "--project-name", self.name,
            "--project-directory", self.checkout,
        ]  # fmt: skip

    def _argv(self, *args: str, with_override: bool = True) -> list[str]:
        files = ["-f", self.compose_path]
        if with_override:
            files += ["-f", self.override]
        return [*self.command(), *files, *args]

    def services(self) -> list[str]:
        """Reads the project's service names (from its own file: the override follows them)."""
        return self._argv("config", "--services", with_override=False)

    def config_hashes(self) -> list[str]:
        """Reads the hash compose would label each service's container with now."""
        return self._argv("config", "--hash=*")

    def up(self) -> list[str]:
        return self._argv("up", "--detach", "--remove-orphans")

    def recreate(self, services: Sequence[str]) -> list[str]:
        """Replaces the containers of ``services`` only, leaving their dependencies be."""
        return self._argv("up", "--detach", "--no-deps", "--force-recreate", "--", *services)

    def stop(self) -> list[str]:
        return self._argv("stop", with_override=False)

    def down(self) -> list[str]:
        """Removes the project's containers, networks and volumes: its data goes with it."""
        return self._argv("down", "--volumes", "--remove-orphans", with_override=False)
