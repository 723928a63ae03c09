"""reconcile_playgrounds: each playground's compose project on this Marquee as the inventory says.

One container listing serves the whole Marquee. A running playground is brought up
(``up --detach --remove-orphans``) when a service has no container, one exited, one belongs to
a service no longer in the compose file, our override changed, or a container's config hash
differs from the one compose computes now for the checkout and the override; the hashes are only
asked for when nothing else already calls for ``up``. A container stuck (created but not
started, restarting, or unhealthy) for longer than ``stuck_after`` is recreated on its own. A
converged Marquee costs reads only, and a constant number of them: the listing, one read of all
its Playgrounds' files and one of its images (``remote.host_state``); compose is asked for the
service names and hashes only when what they depend on changed (``ComposeState``).

An expired playground is taken down with its volumes and nothing else is done for it; a stopped
one (or a running one whose branch is gone and that asks to be stopped then, as fetch_branches
does) is stopped when anything of it is up.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import UTC, datetime

from playguard_async.cycle_record import NoticeKind
from playguard_async.desired_state.inventory import Playground
from playguard_async.phases.protocol import Notice, PhaseReport
from playguard_async.phases.toolkit import (
    Container,
    CycleContext,
    branch_heads,
    compose_project,
    containers_of,
    created_at,
    host_now,
    listed_name,
    stop_if_up,
)
from playguard_async.remote.compose import (
    CONFIG_HASH_LABEL,
    SERVICE_LABEL,
    ComposeProject,
    override_content,
)
from playguard_async.remote.docker import list_ours
from playguard_async.remote.host_state import ComposeState, compose_states
from playguard_async.remote.ssh import RemoteSession

# Docker's default health check interval, for containers whose config leaves it unset (0).
_DEFAULT_HEALTH_INTERVAL = 30.0


class ReconcilePlaygrounds:
    name = "reconcile_playgrounds"

    async def __call__(self, ctx: CycleContext) -> PhaseReport:
        """Findings: ``playgrounds``, playground -> ``state`` (running, stopped, branch_gone,
        expired, or no_checkout when sync_git has not cloned it yet), ``drift`` (why it was or
        would be changed) and ``actions`` (what was done for it)."""
        session = await ctx.remote()
        playgrounds = ctx.inventory.playgrounds_on(ctx.marquee.name)
        report = PhaseReport(findings={"playgrounds": {}})
        if not playgrounds:
            return report
        containers = await list_ours(session)
        now = datetime.now(UTC)
        expired = {
            pg.name: pg.expires_at
            for pg in playgrounds
            if pg.expires_at is not None and pg.expires_at <= now
        }
        gone = await _branch_gone(ctx, session, playgrounds, expired)
        projects = [compose_project(session, ctx.inventory, pg) for pg in playgrounds]
        owned = {project.playground: containers_of(containers, project) for project in projects}
        states = await compose_states(session, projects, owned)
        for playground, project in zip(playgrounds, projects, strict=True):
            playground_mark = len(session.actions)
            own = owned[playground.name]
            if playground.name in expired:
                reason = f"expired at {expired[playground.name].isoformat()}"
                state, drift = "expired", await _take_down(session, project, own, reason)
            elif playground.state == "stopped":
                state, drift = "stopped", await _stop(session, project, own, "state is stopped")
            elif playground.name in gone:
                reason = f"branch {playground.branch} is gone"
                state, drift = "branch_gone", await _stop(session, project, own, reason)
            else:
                state, drift = await _converge_running(
                    session, project, own, states[playground.name]
                )
            report.findings["playgrounds"][playground.name] = {
                "state": state,
                "drift": drift,
                "actions": session.actions_since(playground_mark),
            }
            report.notices += [Notice(NoticeKind.DRIFT, playground.name, why) for why in drift]
        return report


async def _branch_gone(
    ctx: CycleContext,
    session: RemoteSession,
    playgrounds: list[Playground],
    expired: Mapping[str, datetime],
) -> set[str]:
    """Running playgrounds that ask to be stopped when their branch is gone, and whose branch is:
    bringing them back up would undo fetch_branches. Only their repos are asked."""
    watched = {
        pg.name: ctx.inventory.playspec_of(pg).repo
        for pg in playgrounds
        if pg.stop_when_branch_gone and pg.state == "running" and pg.name not in expired
    }
    heads = await branch_heads(session, watched.values())
    return {
        pg.name
        for pg in playgrounds
        if pg.name in watched and pg.branch not in heads[watched[pg.name]]
    }


async def _take_down(
    session: RemoteSession, project: ComposeProject, own: list[Container], reason: str
) -> list[str]:
    """``down --volumes`` while anything of the project exists; nothing once it is gone."""
    if not own:
        return []
    await session.change(f"take down playground {project.playground} ({reason})", project.down())
    return [reason]


async def _stop(
    session: RemoteSession, project: ComposeProject, own: list[Container], reason: str
) -> list[str]:
    return [reason] if await stop_if_up(session, project, own, reason) else []


async def _converge_running(
    session: RemoteSession, project: ComposeProject, own: list[Container], compose: ComposeState
) -> tuple[str, list[str]]:
    services = await compose.services()
    if services is None:
        return "no_checkout", []
    drift: list[str] = []
    override = override_content(project.marquee.name, project.playground, services)
    if not compose.override_current(override):
        await session.write_file(
            f"write the compose override of playground {project.playground}",
            project.override,
            override,
        )
        compose.override_written(override)
        drift.append("override changed")
    drift += _container_drift(services, own)
    if not drift:
        drift += _config_drift(own, await compose.config_hashes())
    if drift:
        await session.change(
            f"compose up playground {project.playground} ({'; '.join(drift)})", project.up()
        )
    stuck = await _stuck(session, [c for c in own if _service(c) in services])
    if stuck:
        reasons = [f"{service}: {why}" for service, why in sorted(stuck.items())]
        await session.change(
            f"recreate stuck services of playground {project.playground} ({'; '.join(reasons)})",
            project.recreate(sorted(stuck)),
        )
        drift += reasons
    return "running", drift


def _service(container: Container) -> str:
    return str(container["Labels"].get(SERVICE_LABEL, ""))


def _by_service(own: list[Container]) -> dict[str, list[Container]]:
    grouped: defaultdict[str, list[Container]] = defaultdict(list)
    for container in own:
        grouped[_service(container)].append(container)
    return grouped


def _container_drift(services: list[str], own: list[Container]) -> list[str]:
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


def _config_drift(own: list[Container], hashes: Mapping[str, str]) -> list[str]:
    """Containers whose config hash label is not the one compose computes for the same files."""
    return [
        f"{service}: {listed_name(container)} config changed"
        for service, containers in sorted(_by_service(own).items())
        for container in containers
        if container["Labels"].get(CONFIG_HASH_LABEL) != hashes.get(service)
    ]


async def _stuck(session: RemoteSession, own: list[Container]) -> dict[str, str]:
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
                stuck[_service(container)] = (
                    f"{listed_name(container)} {container['State']} for {seconds:.0f}s"
                )
    for container in own:
        if container["State"] == "running" and "(unhealthy)" in container.get("Status", ""):
            seconds = await _unhealthy_for(session, container)
            if seconds > limit:
                stuck[_service(container)] = (
                    f"{listed_name(container)} unhealthy for {seconds:.0f}s"
                )
    return stuck


async def _unhealthy_for(session: RemoteSession, container: Container) -> float:
    details = await session.api(session.docker.containers.container(container["Id"]).show())
    streak = int(details["State"].get("Health", {}).get("FailingStreak", 0))
    interval_ns = (details["Config"].get("Healthcheck") or {}).get("Interval") or 0
    return streak * (interval_ns / 1e9 or _DEFAULT_HEALTH_INTERVAL)


reconcile_playgrounds = ReconcilePlaygrounds()
