"""What a running Playground's containers show that calls for compose: services without a
container, exited or dead containers, containers of services the compose file no longer has,
containers whose image is no longer the one their reference names, a config hash that is not
compose's, and containers stuck past ``stuck_after``. Reads only.

A new image behind a tag is read from the images themselves, not from compose's config hash:
compose 1.29 puts the image's ID into that hash, v2 does not (it keeps the ID in a label of its
own), so the hash alone would leave a pulled release undeployed under v2."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from playguard_async.kits.image_reference import normalized
from playguard_async.phases.toolkit import Container, created_at, listed_name
from playguard_async.remote.compose import CONFIG_HASH_LABEL, SERVICE_LABEL
from playguard_async.remote.docker import host_now, inspect_container
from playguard_async.remote.host_state import ABSENT
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


def config_drift(own: list[Container], hashes: Mapping[str, str]) -> list[str]:
    """Containers whose config hash label is not the one compose computes for the same files."""
    return [
        f"{service}: {listed_name(container)} config changed"
        for service, containers in sorted(_by_service(own).items())
        for container in containers
        if container["Labels"].get(CONFIG_HASH_LABEL) != hashes.get(service)
    ]


def image_drift(
    own: list[Container], images: Mapping[str, str], created_from: Mapping[str, str]
) -> list[str]:
    """Containers that run another image than the one the reference they were created from
    names now: ``images`` reference -> image ID (``host_state.image_ids``, in a dry run as the
    cycle will find them: ``remote.planned``), ``created_from`` container ID -> reference
    (``references_of``). A container created from a reference ``images`` does not have (a built
    image, one outside the Playspec's images, a digest a pin or rollback wrote into the
    override), or from one with no image on the host, is not judged: nothing says what it
    should run. References are matched as docker reads them (``kits.image_reference``), so
    ``busybox`` and ``docker.io/library/busybox:latest`` are one; one that is no reference at
    all is not judged either."""
    wanted = {
        normalized(reference): image
        for reference, image in images.items()
        if isinstance(reference, str) and isinstance(image, str) and image not in ("", ABSENT)
    }
    wanted.pop(None, None)
    drift: list[str] = []
    for service, containers in sorted(_by_service(own).items()):
        for container in containers:
            running = container.get("ImageID")
            reference = created_from.get(str(container.get("Id")))
            if not isinstance(running, str) or not running or not isinstance(reference, str):
                continue
            now = wanted.get(normalized(reference))
            if now is not None and now != running:
                drift.append(f"{service}: {listed_name(container)} image changed")
    return drift


async def references_of(session: RemoteSession, own: list[Container]) -> dict[str, str]:
    """Container ID -> the reference it was created from. The listing shows it, except where it
    no longer names the container's image (a tag moved: docker then lists the image's ID): only
    those are inspected (``Config.Image``), one call each, so a Playground whose tags stayed
    costs no call. A container gone meanwhile has none: it is not judged."""
    references: dict[str, str] = {}
    for container in own:
        listed, running = container.get("Image"), container.get("ImageID")
        if isinstance(listed, str) and listed and listed != running:
            references[str(container["Id"])] = listed
            continue
        details = await inspect_container(session, str(container["Id"]))
        configured = ((details or {}).get("Config") or {}).get("Image")
        if isinstance(configured, str):
            references[str(container["Id"])] = configured
    return references


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
    """How long the container has failed its health check; 0 when it is gone meanwhile."""
    details = await inspect_container(session, str(container["Id"]))
    if details is None:
        return 0.0
    streak = int(details["State"].get("Health", {}).get("FailingStreak", 0))
    interval_ns = (details["Config"].get("Healthcheck") or {}).get("Interval") or 0
    return streak * (interval_ns / 1e9 or _DEFAULT_HEALTH_INTERVAL)
