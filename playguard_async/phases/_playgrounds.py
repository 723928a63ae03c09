"""What the playground phases share: a playground's compose project, its containers, its branch.

Reads only, except ``stop_if_up``, which changes the host through the session's funnel.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from playguard_async.inventory import Inventory, Playground, Playspec
from playguard_async.remote import git
from playguard_async.remote.compose import PROJECT_LABEL, ComposeProject
from playguard_async.remote.docker import PLAYGROUND
from playguard_async.remote.ssh import RemoteSession

Container = dict[str, Any]
"""One entry of the Engine API's container listing (``list_ours``)."""

# States in which a container holds its processes (a paused one still does).
_UP_STATES = frozenset({"running", "restarting", "paused"})


def playspec_of(inventory: Inventory, playground: Playground) -> Playspec:
    """The playground's playspec; the inventory guarantees the reference resolves."""
    return next(spec for spec in inventory.playspecs if spec.name == playground.playspec)


def compose_project(
    session: RemoteSession, inventory: Inventory, playground: Playground
) -> ComposeProject:
    return ComposeProject(
        marquee=session.marquee,
        playground=playground.name,
        compose_file=playspec_of(inventory, playground).compose_file,
        compose_command=session.options.compose_command,
    )


async def branch_heads(session: RemoteSession, repos: Iterable[str]) -> dict[str, dict[str, str]]:
    """Branch -> commit for each distinct repo, side by side: one ``ls-remote`` per repo per
    cycle, shared by every phase that asks (sync_git, fetch_branches, reconcile_playgrounds)."""
    distinct = sorted(set(repos))
    heads = await asyncio.gather(*(_heads_of(session, repo) for repo in distinct))
    return dict(zip(distinct, heads, strict=True))


async def _heads_of(session: RemoteSession, repo: str) -> dict[str, str]:
    async def list_heads() -> dict[str, str]:
        return git.parse_heads((await session.run(git.ls_remote_heads(repo))).stdout)

    return dict(await session.read_once(("ls-remote", repo), list_heads, of_host=False))


def containers_of(containers: Iterable[Container], project: ComposeProject) -> list[Container]:
    """The containers of the playground's compose project. Its agent chats' containers carry its
    label too, but compose did not make them, so compose commands must not be judged by them."""
    return [
        container
        for container in containers
        if container["Labels"].get(PLAYGROUND) == project.playground
        and container["Labels"].get(PROJECT_LABEL) == project.name
    ]


def is_up(container: Container) -> bool:
    return container["State"] in _UP_STATES


def container_name(container: Container) -> str:
    names: list[str] = container.get("Names") or []
    return names[0].lstrip("/") if names else str(container["Id"])[:12]


def created_at(container: Container) -> datetime:
    """When the host's engine created the container (the listing gives whole seconds)."""
    return datetime.fromtimestamp(container["Created"], UTC)


async def host_now(session: RemoteSession) -> datetime:
    """The host engine's clock, to age its containers by: our own clock may be skewed from it."""
    info = await session.api(session.docker.system.info())
    return datetime.fromisoformat(info["SystemTime"])


async def stop_if_up(
    session: RemoteSession, project: ComposeProject, containers: list[Container], reason: str
) -> bool:
    """``compose stop`` when any container of the project still holds processes; True if so."""
    if not any(is_up(container) for container in containers):
        return False
    await session.change(f"stop playground {project.playground} ({reason})", project.stop())
    return True
