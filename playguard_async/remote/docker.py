"""What marks a container as ours, and the Docker API reads every phase shares.

A container is ours only if it carries ``io.playguard.managed=true`` and this Marquee's name;
containers without those labels are never touched, whoever started them.
"""

from __future__ import annotations

import json
from typing import Any

from playguard_async.inventory import Marquee, Registry
from playguard_async.remote.ssh import RemoteSession

MANAGED = "io.playguard.managed"
MARQUEE = "io.playguard.marquee"
PLAYGROUND = "io.playguard.playground"
AGENT_CHAT = "io.playguard.agent-chat"


def our_labels(
    marquee: str, *, playground: str | None = None, agent_chat: str | None = None
) -> dict[str, str]:
    labels = {MANAGED: "true", MARQUEE: marquee}
    if playground is not None:
        labels[PLAYGROUND] = playground
    if agent_chat is not None:
        labels[AGENT_CHAT] = agent_chat
    return labels


async def list_ours(session: RemoteSession) -> list[dict[str, Any]]:
    """All containers (running or not) carrying our labels for this Marquee, in one API call."""
    filters = json.dumps({"label": [f"{MANAGED}=true", f"{MARQUEE}={session.marquee.name}"]})
    containers = await session.api(
        session.docker._query_json(
            "containers/json", method="GET", params={"all": "1", "filters": filters}
        )
    )
    return list(containers)


def docker_config_dir(marquee: Marquee) -> str:
    """Where the host keeps the registry credentials the compose command reads (DOCKER_CONFIG)."""
    return f"{marquee.workdir}/.docker"


def registry_auth(registry: Registry) -> dict[str, str]:
    """Credentials in the shape the Engine API's /auth and X-Registry-Auth take."""
    return {
        "username": registry.username,
        "password": registry.password().get_secret_value(),
        "serveraddress": registry.server,
    }
