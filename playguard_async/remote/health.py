"""Whether a Playground's containers are healthy, in Docker's own words, and the wait for it.

A service is healthy when its container runs and, where the image or compose file defines a
healthcheck, Docker says ``healthy``; one without a healthcheck when it has been running for
``health_grace`` seconds. Nothing here probes a service itself: the healthcheck is Docker's.

The wait is bounded by ``health_timeout`` counted from when the newest container started (host
clock), so a wait that a lease cut short goes on in the next cycle instead of starting over; and
by the lease itself, since every read here is a Docker API call the lease's deadline bounds. A
container that exited or died will not come back by waiting (compose sets no restart policy
unless asked to): it ends the wait at once, which is how a crash-looping service is caught.

Reads only: the Engine API through the session's tunnel.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from playguard_async.kits.textclean import host_line
from playguard_async.remote.compose import PROJECT_LABEL, SERVICE_LABEL, ComposeProject
from playguard_async.remote.docker import MANAGED, MARQUEE, host_now, query
from playguard_async.remote.ssh import RemoteSession

POLL_INTERVAL = 0.5
"""Seconds between two looks at a Playground that is not healthy yet."""

_UNSET = "0001-01-01T00:00:00Z"  # Docker's StartedAt for a container never started


@dataclass(frozen=True)
class ServiceHealth:
    """One service as Docker shows it: ``state`` is ``healthy``, ``starting`` (may still become
    healthy), ``unhealthy``, ``exited`` or ``missing``; ``detail`` says why, on one clean line."""

    state: str
    detail: str
    image: str = ""
    """The ID of the image its container runs (``sha256:...``); empty when it has none."""

    @property
    def final(self) -> bool:
        """Whether waiting cannot change it: exited, dead or missing."""
        return self.state in ("exited", "missing")


@dataclass(frozen=True)
class PlaygroundHealth:
    services: dict[str, ServiceHealth]
    started: float
    """Seconds since the newest of its containers started, by the host's clock."""
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    """Container ID -> its labels, for every container of the compose project the read saw:
    what ``up`` left (``ComposeState.learn_after_up``)."""

    @property
    def healthy(self) -> bool:
        return all(service.state == "healthy" for service in self.services.values())

    def problems(self) -> dict[str, str]:
        """Service -> ``state: detail`` for each service that is not healthy."""
        return {
            name: f"{service.state}: {service.detail}" if service.detail else service.state
            for name, service in sorted(self.services.items())
            if service.state != "healthy"
        }


async def read_health(
    session: RemoteSession,
    project: ComposeProject,
    services: Sequence[str],
    *,
    grace: float,
    secrets: Iterable[str] = (),
) -> PlaygroundHealth:
    """Each of ``services``' health now: one listing of the project's containers, one inspect
    of each, one read of the host's clock."""
    filters = json.dumps(
        {
            "label": [
                f"{MANAGED}=true",
                f"{MARQUEE}={session.marquee.name}",
                f"{PROJECT_LABEL}={project.name}",
            ]
        }
    )
    listed = await query(session, "containers/json", params={"all": "1", "filters": filters})
    inspected = [await query(session, f"containers/{entry['Id']}/json") for entry in listed]
    now = await host_now(session)
    hidden = list(secrets)
    found: dict[str, ServiceHealth] = {
        service: ServiceHealth("missing", "") for service in services
    }
    newest = float("inf")
    labels: dict[str, dict[str, str]] = {}
    for details in inspected:
        own: dict[str, str] = dict((details.get("Config") or {}).get("Labels") or {})
        labels[str(details.get("Id"))] = own
        service = str(own.get(SERVICE_LABEL, ""))
        if service not in found:
            continue
        state = details.get("State") or {}
        started = str(state.get("StartedAt") or _UNSET)
        running_for = (
            (now - datetime.fromisoformat(started)).total_seconds() if started != _UNSET else 0.0
        )
        newest = min(newest, max(running_for, 0.0))
        health = _service_health(state, running_for, grace, hidden)
        found[service] = ServiceHealth(health.state, health.detail, str(details.get("Image", "")))
    return PlaygroundHealth(found, 0.0 if newest == float("inf") else newest, labels)


def _service_health(
    state: dict[str, Any], running_for: float, grace: float, secrets: list[str]
) -> ServiceHealth:
    status = str(state.get("Status", ""))
    if status in ("exited", "dead"):
        error = host_line(str(state.get("Error") or ""), secrets=secrets)
        detail = f"status {state.get('ExitCode')}" + (f": {error}" if error else "")
        return ServiceHealth("exited", detail)
    if status != "running":
        return ServiceHealth("starting", status)
    check = state.get("Health")
    if not check:
        if running_for >= grace:
            return ServiceHealth("healthy", "")
        return ServiceHealth("starting", f"running {running_for:.0f}s of {grace:g}s")
    log = check.get("Log") or []
    last = host_line(str(log[-1].get("Output", "")), secrets=secrets) if log else ""
    verdict = str(check.get("Status", "starting"))
    if verdict == "healthy":
        return ServiceHealth("healthy", "")
    return ServiceHealth("unhealthy" if verdict == "unhealthy" else "starting", last)


async def wait_healthy(
    session: RemoteSession,
    project: ComposeProject,
    services: Sequence[str],
    *,
    timeout: float,
    secrets: Iterable[str] = (),
) -> tuple[PlaygroundHealth, bool]:
    """The Playground's health once it is healthy, once a service exited, or once ``timeout``
    seconds passed since its newest container started; and whether that time is up (False: it
    is healthy, or the lease ended the wait first and the next cycle goes on with it).

    The wait ends before the lease does (one poll's margin), so the phase can still say so.
    """
    hidden = list(secrets)
    while True:
        health = await read_health(
            session, project, services, grace=session.options.health_grace, secrets=hidden
        )
        left = timeout - health.started
        if health.healthy:
            return health, False
        if any(service.final for service in health.services.values()) or left <= 0:
            return health, True
        lease_left = session.lease.remaining() if session.lease is not None else left
        if lease_left < 2 * POLL_INTERVAL:
            return health, False
        await asyncio.sleep(min(POLL_INTERVAL, left))
