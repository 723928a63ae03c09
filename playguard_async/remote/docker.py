"""What marks a container as ours, the Docker API reads every phase shares, and the ``docker``
command lines of the writes.

A container is ours only if it carries ``io.playguard.managed=true`` and this Marquee's name;
containers without those labels are never touched, whoever started them.

Writes to the engine are ``docker`` commands run on the host inside the fence guard (through
``RemoteSession.change``), never API calls through the tunnel: only a command can be checked
and run by the host in one step under its lock. Containers we create carry the fence of the
lease that created them (``io.playguard.fence``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from playguard_async.desired_state.model import Marquee, Registry
from playguard_async.remote.errors import DockerApiError
from playguard_async.remote.ssh import RemoteSession

MANAGED = "io.playguard.managed"
MARQUEE = "io.playguard.marquee"
PLAYGROUND = "io.playguard.playground"
AGENT_CHAT = "io.playguard.agent-chat"
FENCE = "io.playguard.fence"

_NOT_FOUND = 404


def our_labels(
    marquee: str, *, playground: str | None = None, agent_chat: str | None = None
) -> dict[str, str]:
    """What marks a container as ours; compose containers carry exactly these (their config hash
    covers their labels, so a fence among them would recreate them at every new lease)."""
    labels = {MANAGED: "true", MARQUEE: marquee}
    if playground is not None:
        labels[PLAYGROUND] = playground
    if agent_chat is not None:
        labels[AGENT_CHAT] = agent_chat
    return labels


async def query(
    session: RemoteSession,
    path: str,
    *,
    method: str = "GET",
    params: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    data: str | None = None,
) -> Any:
    """One Engine API request through the tunnel, answered as JSON.

    The one place that uses aiodocker's private ``_query_json`` (the public API has no call for
    some reads, such as the distribution endpoint), so a change of it in aiodocker is met here.
    """
    return await session.api(
        session.docker._query_json(path, method=method, params=params, headers=headers, data=data)
    )


async def inspect_or_none(session: RemoteSession, path: str) -> Any:
    """``GET path``'s answer, or None when the engine has no such object (404)."""
    try:
        return await query(session, path)
    except DockerApiError as exc:
        if exc.status == _NOT_FOUND:
            return None
        raise


async def inspect_container(session: RemoteSession, container_id: str) -> Mapping[str, Any] | None:
    """A container's inspect (``containers/{id}/json``), or None when it is gone (removed
    between the listing and now: what read it leaves it unjudged) or the engine's answer is
    not an object. Other refusals raise ``DockerApiError``, as any read."""
    found = await inspect_or_none(session, f"containers/{container_id}/json")
    return found if isinstance(found, Mapping) else None


async def list_ours(session: RemoteSession) -> list[dict[str, Any]]:
    """All containers (running or not) carrying our labels for this Marquee, in one API call,
    shared by the phases of the cycle until the session writes."""
    filters = json.dumps({"label": [f"{MANAGED}=true", f"{MARQUEE}={session.marquee.name}"]})

    async def listing() -> list[dict[str, Any]]:
        return list(
            await query(session, "containers/json", params={"all": "1", "filters": filters})
        )

    return list(await session.read_once("our containers", listing))


async def host_now(session: RemoteSession) -> datetime:
    """The host engine's clock, to age its containers by: our own clock may be skewed from it."""
    info = await session.api(session.docker.system.info())
    return datetime.fromisoformat(info["SystemTime"])


def docker_command(marquee: Marquee, *args: str) -> list[str]:
    """The host's ``docker`` client pointed at the Marquee's engine."""
    return ["docker", "--host", f"unix://{marquee.docker_socket}", *args]


def run_container(
    marquee: Marquee,
    name: str,
    *,
    image: str,
    command: list[str],
    labels: dict[str, str],
    network: str,
) -> list[str]:
    """Creates and starts a container; never pulls (the image was pulled, fenced, before)."""
    label_args = [f"--label={key}={value}" for key, value in sorted(labels.items())]
    return docker_command(
        marquee, "run", "--detach", "--pull", "never", "--name", name, "--network", network,
        *label_args, "--", image, *command,
    )  # fmt: skip


def start_container(marquee: Marquee, container_id: str) -> list[str]:
    return docker_command(marquee, "start", "--", container_id)


def remove_container(marquee: Marquee, container_id: str) -> list[str]:
    """Forced removal with anonymous volumes; a container already gone counts as removed."""
    script = (
        'id=$1; shift; "$@" rm --force --volumes -- "$id" >/dev/null '
        '|| ! "$@" container inspect -- "$id" >/dev/null 2>&1'
    )
    return ["sh", "-c", script, "sh", container_id, *docker_command(marquee)]


def pull_image(marquee: Marquee, reference: str) -> list[str]:
    """Pulls ``reference`` with the credentials read from stdin (a ``config.json`` document),
    kept in a private temporary directory for that one pull: never in argv, never left behind."""
    script = (
        "ref=$1; shift; d=$(mktemp -d) || exit 1; trap 'rm -rf -- \"$d\"' EXIT; "
        'umask 077; cat >"$d/config.json" && "$@" --config "$d" pull --quiet -- "$ref" >/dev/null'
    )
    return ["sh", "-c", script, "sh", reference, *docker_command(marquee)]


def docker_config_dir(marquee: Marquee) -> str:
    """Where the host keeps the registry credentials the compose command reads (DOCKER_CONFIG)."""
    return f"{marquee.workdir}/.docker"


def config_entry(auth: dict[str, str]) -> dict[str, str]:
    """A registry's entry in a ``config.json`` (``auths``), from ``registry_auth``'s shape."""
    basic = f"{auth['username']}:{auth['password']}".encode()
    return {"auth": base64.b64encode(basic).decode()}


def registry_auth(registry: Registry) -> dict[str, str]:
    """Credentials in the shape the Engine API's /auth and X-Registry-Auth take."""
    return {
        "username": registry.username,
        "password": registry.password().get_secret_value(),
        "serveraddress": registry.server,
    }
