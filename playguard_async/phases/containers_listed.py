"""The containers a cycle saw on its Marquee, kept in Redis for the web view when they changed
(``coordination.containers_seen``), with what its Playgrounds should run beside them.

The listing is the one the phases share (``remote.docker.list_ours``): taken at the end of
``reconcile_playgrounds``, it is the one the phase began with when it changed nothing, and a
fresh one after its writes. What the listing lacks (a container's restarts and start, an image's
repo digest) is read only when the listing differs from the one this replica last kept: a
converged Marquee costs no Docker call and no Redis write more (bench/README.md, "Containers
seen"). Keeping it is for the page only: no Docker API or Redis error of it fails the cycle.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Mapping
from typing import Any

from playguard_async.coordination.containers_seen import (
    CONTAINERS_MAX,
    PLAYGROUNDS_MAX,
    SERVICES_MAX,
    ContainersSeen,
    DesiredParts,
    SeenContainer,
    write_seen,
)
from playguard_async.desired_state.model import Playspec
from playguard_async.phases.container_drift import service_of
from playguard_async.phases.toolkit import Container, CycleContext, listed_name
from playguard_async.remote.compose import CONFIG_HASH_LABEL
from playguard_async.remote.docker import AGENT_CHAT, PLAYGROUND, inspect_container, list_ours
from playguard_async.remote.errors import DockerApiError, RemoteCommandFailed
from playguard_async.remote.host_state import ComposeState, image_ids, pinned_references
from playguard_async.remote.memo import ComposeAnswer
from playguard_async.remote.ssh import RemoteSession

HASH_SHOWN = 12
"""Hex digits of a config hash kept: enough to tell two definitions apart on a page."""

_HEALTH = re.compile(r"\((healthy|unhealthy|health: starting)\)")


def health_of(container: Container) -> str | None:
    """The health Docker shows in a listed container's status; None without a health check."""
    found = _HEALTH.search(str(container.get("Status", "")))
    return None if found is None else found.group(1).removeprefix("health: ")


async def desired_parts(
    session: RemoteSession, state: ComposeState, playspec: Playspec
) -> DesiredParts:
    """What a running Playground should run as the cycle found it: its services (compose was
    asked already, or its answer remembered), each service's config hash where compose's
    answer is known (never asked for this), the image behind each of its Playspec's
    references, and its files' digests (never their content)."""
    try:
        services = await state.services()
    except RemoteCommandFailed:
        services = None
    digests = state.file_digests()
    return DesiredParts(
        services=None if services is None else services[:SERVICES_MAX],
        definitions=_definitions(state.answer),
        images=await image_ids(session, playspec.images[:SERVICES_MAX]),
        compose=digests["compose"],
        env=digests["env"],
    )


def _definitions(answer: ComposeAnswer | None) -> dict[str, str]:
    """Service -> the start of its config hash, from compose's answer where this cycle asked
    or remembered it (none otherwise)."""
    if answer is None:
        return {}
    return {service: config[:HASH_SHOWN] for service, config in answer.hashes[:SERVICES_MAX]}


async def keep_listing(
    ctx: CycleContext, session: RemoteSession, desired: Mapping[str, DesiredParts]
) -> bool:
    """Keep what the cycle saw of its Marquee's containers when it changed; whether it was
    written. A Docker API error on the way is logged and the listing not kept: the page is the
    worse for it, not the cycle (a host gone unreachable is the cycle's news, as anywhere)."""
    try:
        return await _keep(ctx, session, desired)
    except DockerApiError as exc:
        ctx.log.warning("containers_seen.not_listed", status=exc.status, error=str(exc)[:300])
        return False


async def _keep(
    ctx: CycleContext, session: RemoteSession, desired: Mapping[str, DesiredParts]
) -> bool:
    containers = await list_ours(session)
    seen = ContainersSeen(
        seen_at=time.time(),
        cycle=session.cycle_id or "?",
        containers=[_listed(container) for container in containers[:CONTAINERS_MAX]],
        more=max(0, len(containers) - CONTAINERS_MAX),
        desired=dict(list(desired.items())[:PLAYGROUNDS_MAX]),
    )
    name, memo = ctx.marquee.name, session.seen_memo
    if not memo.due(name, seen.digest()):
        return False
    filled = await _filled(session, containers[:CONTAINERS_MAX], seen.containers)
    lock = ctx.lease.lock
    kept = seen.model_copy(update={"containers": filled})
    return await write_seen(lock.redis, name, kept, memo, lock.timeout)


def _listed(container: Container) -> SeenContainer:
    labels = container.get("Labels") or {}
    return SeenContainer(
        playground=labels.get(PLAYGROUND),
        agent_chat=labels.get(AGENT_CHAT),
        service=service_of(container),
        name=listed_name(container),
        state=str(container.get("State", "")),
        health=health_of(container),
        image=str(container.get("Image", "")),
        image_id=str(container.get("ImageID", "")),
        config_hash=str(labels.get(CONFIG_HASH_LABEL, ""))[:HASH_SHOWN] or None,
    )


async def _filled(
    session: RemoteSession, containers: list[Container], seen: list[SeenContainer]
) -> list[SeenContainer]:
    """``seen`` with what the listing lacks: restarts and start (an inspect each, side by
    side), and each image's repo digest (the host's image list, read once a cycle)."""
    pinned = await pinned_references(session, sorted({entry.image_id for entry in seen}))
    details = await asyncio.gather(*(_inspected(session, c) for c in containers))
    filled = []
    for entry, detail in zip(seen, details, strict=True):
        state = (detail or {}).get("State") or {}
        restarts = (detail or {}).get("RestartCount")
        digest = pinned.get(entry.image_id)
        started = state.get("StartedAt")
        filled.append(
            entry.model_copy(
                update={
                    "restarts": restarts if isinstance(restarts, int) else None,
                    "started_at": started[:40] if isinstance(started, str) else None,
                    "digest": None if digest == entry.image_id else digest,
                }
            )
        )
    return filled


async def _inspected(session: RemoteSession, container: Container) -> Mapping[str, Any] | None:
    """The container's inspect, or None when it is gone or the engine would not say."""
    try:
        return await inspect_container(session, str(container["Id"]))
    except DockerApiError:
        return None
