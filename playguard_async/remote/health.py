"""Whether a Playground's containers are healthy, in Docker's own words, and the wait for it.

A service is healthy when its container runs and, where the image or compose file defines a
healthcheck, Docker says ``healthy``; one without a healthcheck when it has been running for
``health_grace`` seconds. Nothing here probes a service itself: the healthcheck is Docker's.

The wait is bounded by ``health_timeout``, counted from the first start of the input set: when the
newest of the containers was created, by the host's clock (compose creates a container for each
change and starts it at once, and a wait an earlier cycle's lease cut short goes on from there),
but never from before this cycle's change began (an ``up`` that only started containers that were
there creates none). Neither moves when Docker restarts a container; its ``StartedAt`` does, at
every restart: counted from it, a service that ``restart: always`` brings back every few seconds
was never out of time. The wait is bounded by the lease too, since every read here is a Docker API
call the lease's deadline bounds.

A crash ends the wait early: a container that exited or died will not come back by waiting
(compose sets no restart policy unless asked to), and one that Docker restarted
``CRASH_LOOP_RESTARTS`` times and that is not healthy is crash-looping. Its ``RestartCount`` counts
the restarts since compose created or started it, so it says so whatever the moment of the read.

What a host answers is not trusted: an inspect field of the wrong type or shape reads as absent.

Reads only: the Engine API through the session's tunnel.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from playguard_async.kits.textclean import host_line
from playguard_async.remote.compose import PROJECT_LABEL, SERVICE_LABEL, ComposeProject
from playguard_async.remote.docker import MANAGED, MARQUEE, host_now, query
from playguard_async.remote.ssh import RemoteSession

POLL_INTERVAL = 0.5
"""Seconds between two looks at a Playground that is not healthy yet."""

CRASH_LOOP_RESTARTS = 3
"""Restarts by Docker (a ``restart`` policy) after which a container that is not healthy has
failed: one or two forgive a service that crashed because a neighbour was not up yet; a third
is a crash loop, and waiting longer would only spend the lease."""

_UNSET = "0001-01-01T00:00:00Z"  # Docker's StartedAt for a container never started


@dataclass(frozen=True)
class ServiceHealth:
    """One service as Docker shows it: ``state`` is ``healthy``, ``starting`` (may still become
    healthy), ``unhealthy``, ``restarted`` (crash-looping), ``exited`` or ``missing``; ``detail``
    says why, on one clean line."""

    state: str
    detail: str
    image: str = ""
    """The ID of the image its container runs (``sha256:...``); empty when it has none."""

    @property
    def final(self) -> bool:
        """Whether waiting cannot change it: crash-looping, exited, dead or missing."""
        return self.state in ("restarted", "exited", "missing")


@dataclass(frozen=True)
class PlaygroundHealth:
    services: dict[str, ServiceHealth]
    age: float | None
    """Seconds since the newest of its services' containers was created, by the host's clock;
    None when no container says when."""
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    """Container ID -> its labels, for every container of the compose project the read saw:
    what ``up`` left (``ComposeState.learn_after_up``)."""

    @property
    def healthy(self) -> bool:
        return all(service.state == "healthy" for service in self.services.values())

    @property
    def failed(self) -> bool:
        """Whether a service failed in a way waiting cannot change."""
        return any(service.final for service in self.services.values())

    def problems(self) -> dict[str, str]:
        """Service -> ``state: detail`` for each service that is not healthy."""
        return {
            name: f"{service.state}: {service.detail}" if service.detail else service.state
            for name, service in sorted(self.services.items())
            if service.state != "healthy"
        }


@dataclass(frozen=True)
class Inspected:
    """What one container inspect says, each field of the wrong type or shape read as absent
    (empty, None or 0): a host's answer is not trusted to be Docker's."""

    id: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    image: str = ""
    status: str = ""
    created: datetime | None = None
    started: datetime | None = None
    restarts: int = 0
    exit_code: int | None = None
    error: str = ""
    check: str | None = None
    """Docker's health status; None without a healthcheck."""
    check_output: str = ""
    """The output of the last health check, as the host gave it."""

    @classmethod
    def parse(cls, details: object) -> Inspected:
        top = _mapping(details)
        state = _mapping(top.get("State"))
        config = _mapping(top.get("Config"))
        labels = {
            key: value
            for key, value in _mapping(config.get("Labels")).items()
            if isinstance(key, str) and isinstance(value, str)
        }
        health = state.get("Health")
        check = _mapping(health)
        log = check.get("Log")
        last = _mapping(log[-1]) if isinstance(log, list) and log else {}
        return cls(
            id=_text(top.get("Id")),
            labels=labels,
            image=_text(top.get("Image")),
            status=_text(state.get("Status")),
            created=_moment(top.get("Created")),
            started=_moment(state.get("StartedAt")),
            restarts=_count(top.get("RestartCount")) or 0,
            exit_code=_count(state.get("ExitCode"), negative=True),
            error=_text(state.get("Error")),
            check=(_text(check.get("Status")) or "starting") if isinstance(health, dict) else None,
            check_output=_text(last.get("Output")),
        )


def service_health(
    container: Inspected, now: datetime, *, grace: float, secrets: Iterable[str] = ()
) -> ServiceHealth:
    """What one container says of its service at ``now`` (the host's clock). Its restarts are
    named whenever it is not healthy; from ``CRASH_LOOP_RESTARTS`` on they are its state."""
    health = _judged(container, now, grace, list(secrets))
    restarts = container.restarts
    if health.state == "healthy" or not restarts:
        return ServiceHealth(health.state, health.detail, container.image)
    if not health.final and restarts >= CRASH_LOOP_RESTARTS:
        now_shown = f"{health.state}: {health.detail}" if health.detail else health.state
        return ServiceHealth("restarted", f"{restarts} times; {now_shown}", container.image)
    times = f"restarted {restarts} time" + ("" if restarts == 1 else "s")
    detail = f"{health.detail}; {times}" if health.detail else times
    return ServiceHealth(health.state, detail, container.image)


def _judged(container: Inspected, now: datetime, grace: float, secrets: list[str]) -> ServiceHealth:
    if container.status in ("exited", "dead"):
        return ServiceHealth("exited", _last_exit(container, secrets))
    if container.status == "restarting":
        return ServiceHealth("starting", f"restarting after {_last_exit(container, secrets)}")
    if container.status != "running":
        return ServiceHealth("starting", container.status)
    if container.check is None:
        running_for = _seconds(now, container.started) or 0.0
        if running_for >= grace:
            return ServiceHealth("healthy", "")
        return ServiceHealth("starting", f"running {running_for:.0f}s of {grace:g}s")
    if container.check == "healthy":
        return ServiceHealth("healthy", "")
    last = host_line(container.check_output, secrets=secrets)
    return ServiceHealth("unhealthy" if container.check == "unhealthy" else "starting", last)


def _last_exit(container: Inspected, secrets: list[str]) -> str:
    """``status N`` of its last exit, and Docker's error when it gave one."""
    error = host_line(container.error, secrets=secrets)
    status = "status ?" if container.exit_code is None else f"status {container.exit_code}"
    return status + (f": {error}" if error else "")


def playground_health(
    inspected: Iterable[object],
    services: Sequence[str],
    now: datetime,
    *,
    grace: float,
    secrets: Iterable[str] = (),
) -> PlaygroundHealth:
    """Each of ``services``' health from its containers' inspects, at ``now`` (the host's clock)."""
    hidden = list(secrets)
    found: dict[str, ServiceHealth] = {
        service: ServiceHealth("missing", "") for service in services
    }
    ages: list[float] = []
    labels: dict[str, dict[str, str]] = {}
    for details in inspected:
        container = Inspected.parse(details)
        if container.id:
            labels[container.id] = container.labels
        service = container.labels.get(SERVICE_LABEL, "")
        if service not in found:
            continue
        age = _seconds(now, container.created)
        if age is not None:
            ages.append(age)
        found[service] = service_health(container, now, grace=grace, secrets=hidden)
    return PlaygroundHealth(found, min(ages) if ages else None, labels)


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
    ids = [_text(_mapping(entry).get("Id")) for entry in listed] if isinstance(listed, list) else []
    inspected = [await query(session, f"containers/{id_}/json") for id_ in ids if id_]
    now = await host_now(session)
    return playground_health(inspected, services, now, grace=grace, secrets=secrets)


def verdict(health: PlaygroundHealth, left: float) -> str | None:
    """``healthy``; ``failed`` when a service failed for good or no time is ``left``; None while
    waiting may still make it healthy."""
    if health.healthy:
        return "healthy"
    if health.failed or left <= 0:
        return "failed"
    return None


def waited(health: PlaygroundHealth, *, changed: float | None, began: float, now: float) -> float:
    """Seconds the wait counts as spent at ``now`` (monotonic): the age of the newest container, but
    no more than since this cycle's change began (``changed``, None in a cycle that changed
    nothing); since this wait ``began`` when neither is known."""
    spans = [] if health.age is None else [health.age]
    if changed is not None:
        spans.append(now - changed)
    return min(spans, default=now - began)


async def wait_healthy(
    session: RemoteSession,
    project: ComposeProject,
    services: Sequence[str],
    *,
    timeout: float,
    changed: float | None = None,
    secrets: Iterable[str] = (),
) -> tuple[PlaygroundHealth, bool]:
    """The Playground's health once it is healthy, once a service failed for good (exited or
    crash-looping), or once ``timeout`` seconds passed (``waited``; ``changed`` is the monotonic
    time this cycle began changing it, None in a cycle that changed nothing); and whether it failed
    (False: it is healthy, or the lease ended the wait first and the next cycle goes on with it).

    The wait ends before the lease does (one poll's margin), so the phase can still say so.
    """
    hidden = list(secrets)
    began = time.monotonic()
    while True:
        health = await read_health(
            session, project, services, grace=session.options.health_grace, secrets=hidden
        )
        left = timeout - waited(health, changed=changed, began=began, now=time.monotonic())
        decided = verdict(health, left)
        if decided is not None:
            return health, decided == "failed"
        lease_left = session.lease.remaining() if session.lease is not None else left
        if lease_left < 2 * POLL_INTERVAL:
            return health, False
        await asyncio.sleep(min(POLL_INTERVAL, left))


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _count(value: object, *, negative: bool = False) -> int | None:
    """An integer the host gave as one (not a bool, not a float), None otherwise."""
    if isinstance(value, int) and not isinstance(value, bool) and (negative or value >= 0):
        return value
    return None


def _moment(value: object) -> datetime | None:
    """A timestamp with its offset as Docker writes them; None when unset or not one."""
    if not isinstance(value, str) or value == _UNSET:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def _seconds(now: datetime, since: datetime | None) -> float | None:
    """Seconds from ``since`` to ``now``, never below zero (clocks of a host may step back)."""
    return None if since is None else max((now - since).total_seconds(), 0.0)
