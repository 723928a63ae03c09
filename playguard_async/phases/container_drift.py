"""What a running Playground's containers show that calls for compose: services without a
container, exited or dead containers, containers of services the compose file no longer has, a
config hash that is not compose's, and containers stuck past ``stuck_after``. Reads only."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from playguard_async.phases.toolkit import Container, created_at, listed_name
from playguard_async.remote.compose import CONFIG_HASH_LABEL, SERVICE_LABEL
from playguard_async.remote.docker import host_now
from playguard_async.remote.ssh import RemoteSession

# Docker's default health check interval, for containers whose config leaves it unset (0).
_DEFAULT_HEALTH_INTERVAL = 30.0


def service_of(container: Container) -> str:
    return str(container["Labels"].get(SERVICE_LABEL, ""))


def _by_service(own: list[Container]) -> dict[str, list[Container]]:
    grouped: defaultdict[str, list[Container]] = defaultdict(list)
    for container in own:
        grouped[service_of(container)].append(container)
    return grouped


def container_drift(services: list[str], own: list[Container]) -> list[str]:
    """What the listing alone shows: services without a container, exited containers, and
    containers of services the compose file no longer has."""
    grouped = _by_service(own)
    drift: list[str] = []
    for service in services:
        if service not in grouped:
            drift.append(f"{service}: missing")
        drift += [
            f"{service}: {listed_name(container)} {container['State']}"
            for container in grouped.get(service, [])
            if container["State"] in ("exited", "dead")
        ]
    drift += [
        f"{service}: not in the compose file" for service in sorted(set(grouped) - set(services))
    ]
    return drift


def config_drift(
    own: list[Container], hashes: Mapping[str, str], *, moved: frozenset[str] = frozenset()
) -> list[str]:
    """Containers whose config hash label is not the one compose computes for the same files,
    or that run an image in ``moved`` (a dry run's: one its pull moves a tag off, which moves
    the hash compose will compute then, ``remote.planned``)."""
    return [
        f"{service}: {listed_name(container)} config changed"
        for service, containers in sorted(_by_service(own).items())
        for container in containers
        if container["Labels"].get(CONFIG_HASH_LABEL) != hashes.get(service)
        or str(container.get("ImageID")) in moved
    ]


async def stuck(session: RemoteSession, own: list[Container]) -> dict[str, str]:
    """Service -> why, for containers stuck longer than ``stuck_after``.

    Created-but-not-started and restarting containers are aged from their creation: compose
    makes a new container for every change, so one still not up that long after it was made is
    not coming up by itself. Unhealthy ones are aged by their failing streak times their check
    interval, since Docker keeps no timestamp of when a container turned unhealthy.
    """
    limit = session.options.stuck_after
    stuck: dict[str, str] = {}
    waiting = [container for container in own if container["State"] in ("created", "restarting")]
    if waiting:
        now = await host_now(session)
        for container in waiting:
            seconds = (now - created_at(container)).total_seconds()
            if seconds > limit:
                stuck[service_of(container)] = (
                    f"{listed_name(container)} {container['State']} for {seconds:.0f}s"
                )
    for container in own:
        if container["State"] == "running" and "(unhealthy)" in container.get("Status", ""):
            seconds = await _unhealthy_for(session, container)
            if seconds > limit:
                stuck[service_of(container)] = (
                    f"{listed_name(container)} unhealthy for {seconds:.0f}s"
                )
    return stuck


async def _unhealthy_for(session: RemoteSession, container: Container) -> float:
    details = await session.api(session.docker.containers.container(container["Id"]).show())
    streak = int(details["State"].get("Health", {}).get("FailingStreak", 0))
    interval_ns = (details["Config"].get("Healthcheck") or {}).get("Interval") or 0
    return streak * (interval_ns / 1e9 or _DEFAULT_HEALTH_INTERVAL)
