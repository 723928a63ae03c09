"""reconcile_playgrounds: each playground's compose project on this Marquee as the inventory says.

One container listing serves the whole Marquee. A running playground is brought up
(``up --detach --remove-orphans``) when a service has no container, one exited, one belongs to
a service no longer in the compose file, our override changed, or a container's config hash
differs from the one compose computes now for the checkout and the override; the hashes are only
asked for when nothing else already calls for ``up``. A container stuck (created but not
started, restarting, or unhealthy) for longer than ``stuck_after`` is recreated on its own. A
converged Marquee costs reads only, and a constant number of them: the listing, one read of all
its Playgrounds' files, one of its images (``remote.host_state``) and one of their health
records (``remote.last_good``); compose is asked for the service names and hashes only when what
they depend on changed (``ComposeState``).

A change is done when it is healthy: after ``up``, the health gate (``remote.health``) waits for
every service to be healthy by Docker's word, within the Playspec's ``health_timeout`` (counted
from the first start of its input set, which no restart of a container moves) and the lease; a
service that exited or that Docker keeps restarting fails it at once. A Playground verified
healthy has its inputs recorded as its last good state; one that is not is reported
``unhealthy``, its inputs are remembered as failed and not tried again until they change, and
under ``rollback: auto`` it is recreated from its last good state by digest (``_Running``; README
"Healthy, not just started").

An expired playground is taken down with its volumes and nothing else is done for it; a stopped
one (or a running one whose branch is gone and that asks to be stopped then, as fetch_branches
does) is stopped when anything of it is up.
"""

from __future__ import annotations

import hashlib
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TypedDict

from playguard_async.coordination.pins import Pin
from playguard_async.cycle_record import (
    PLAYGROUND_FINDINGS,
    NoticeKind,
    PlaygroundFinding,
    PlaygroundFindingRecord,
    RevisionRecord,
)
from playguard_async.desired_state.model import InventoryError, Playground, Playspec, Registry
from playguard_async.phases.holds import hold_of, pins_of
from playguard_async.phases.protocol import Notice, PhaseReport
from playguard_async.phases.toolkit import (
    Container,
    CycleContext,
    branch_heads,
    compose_project,
    containers_of,
    created_at,
    listed_name,
    stop_if_up,
)
from playguard_async.remote import git
from playguard_async.remote.compose import (
    CONFIG_HASH_LABEL,
    SERVICE_LABEL,
    ComposeProject,
    override_content,
    parse_services,
)
from playguard_async.remote.docker import host_now, list_ours
from playguard_async.remote.health import PlaygroundHealth, wait_healthy
from playguard_async.remote.host_state import (
    ComposeState,
    compose_states,
    image_ids,
    keep_answers,
    pinned_references,
)
from playguard_async.remote.last_good import (
    Failed,
    HealthRecord,
    LastGood,
    input_digest,
    read_records,
    tags_digest,
    write_record,
)
from playguard_async.remote.revision import ABSENT, Revision, kept_env_path, restore_env
from playguard_async.remote.ssh import RemoteSession

# Docker's default health check interval, for containers whose config leaves it unset (0).
_DEFAULT_HEALTH_INTERVAL = 30.0


class ReconcilePlaygrounds:
    name = "reconcile_playgrounds"

    async def __call__(self, ctx: CycleContext) -> PhaseReport:
        """Findings: ``playgrounds``, playground -> its ``PlaygroundFinding`` (``cycle_record``):
        its state, drift (why it was or would be changed), actions (what was done for it) and
        what its health gate and rollback came to."""
        session = await ctx.remote()
        playgrounds = ctx.inventory.playgrounds_on(ctx.marquee.name)
        found: dict[str, PlaygroundFindingRecord] = {}
        report = PhaseReport(findings={PLAYGROUND_FINDINGS: found})
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
        records = _Records(session, [pg.name for pg in playgrounds])
        pins = await pins_of(ctx, session)
        unhealthy: list[str] = []
        for playground, project in zip(playgrounds, projects, strict=True):
            playground_mark = len(session.actions)
            own = owned[playground.name]
            finding: PlaygroundFinding
            if playground.name in expired:
                reason = f"expired at {expired[playground.name].isoformat()}"
                drift = await _take_down(session, project, own, reason)
                finding = PlaygroundFinding("expired", tuple(drift))
            elif playground.state == "stopped":
                drift = await _stop(session, project, own, "state is stopped")
                finding = PlaygroundFinding("stopped", tuple(drift))
            elif playground.name in gone:
                reason = f"branch {playground.branch} is gone"
                drift = await _stop(session, project, own, reason)
                finding = PlaygroundFinding("branch_gone", tuple(drift))
            else:
                playspec = ctx.inventory.playspec_of(playground)
                heads = await branch_heads(session, [playspec.repo])
                running = _Running(
                    session, project, own, states[playground.name], playspec,
                    ctx.inventory.registry_of(playspec), pins.get(playground.name),
                    heads[playspec.repo].get(playground.branch),
                )  # fmt: skip
                converged = await running.converge(records)
                finding = converged.finding
                report.notices += converged.notices
                if converged.unhealthy is not None and playspec.rollback != "off":
                    unhealthy.append(f"playground {playground.name} {converged.unhealthy}")
            actions = tuple(session.actions_since(playground_mark))
            found[playground.name] = replace(finding, actions=actions).to_json()
            report.notices += [
                Notice(NoticeKind.DRIFT, playground.name, why) for why in finding.drift
            ]
        report.unhealthy = "; ".join(unhealthy) or None
        await keep_answers(session, list(states.values()))
        return report


def _secrets(registry: Registry | None) -> list[str]:
    """What must not appear in a health log line shown: the password of the Playspec's
    registry (a service may well print the credentials it was started with). Read only when a
    health gate runs: a converged cycle reads no password file."""
    if registry is None:
        return []
    try:
        return [registry.password().get_secret_value()]
    except InventoryError:
        return []  # refresh_credentials names the unreadable password


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


@dataclass
class _Converged:
    """What converging one running Playground came to: its finding (its actions are the
    caller's to add), its notices, and in a few words why it is unhealthy, for the cycle's
    outcome (None when it is not known to be; the notices carry the details)."""

    finding: PlaygroundFinding
    notices: list[Notice] = field(default_factory=list)
    unhealthy: str | None = None


class _Records:
    """The Marquee's health records (``remote.last_good``), read once when first asked for."""

    def __init__(self, session: RemoteSession, playgrounds: list[str]) -> None:
        self._session = session
        self._playgrounds = playgrounds

    async def of(self, playground: str) -> HealthRecord:
        return (await read_records(self._session, self._playgrounds))[playground]


@dataclass(frozen=True)
class _Running:
    """One running Playground converged in this cycle: what its steps share."""

    session: RemoteSession
    project: ComposeProject
    own: list[Container]
    compose: ComposeState
    playspec: Playspec
    registry: Registry | None
    pin: Pin | None
    head: str | None
    """The commit at the head of its branch now."""

    async def converge(self, records: _Records) -> _Converged:
        """Bring the Playground to its desired revision, then through the health gate.

        The desired revision is its branch head (or the commit it is pinned at) with the images
        behind its Playspec's tags, unless that very release already failed (``Failed``): then,
        under ``auto``, its last good revision (``_keep_rolled_back``), and otherwise it is left
        as it is, neither ``up`` again nor recreated as stuck. The gate runs after a change, and
        on a converged Playground whose inputs were not verified yet (a wait a lease cut short,
        or one running since before this gate existed)."""
        session, project, compose, playspec = (
            self.session, self.project, self.compose, self.playspec
        )  # fmt: skip
        services = await compose.services()
        if services is None:
            return _Converged(PlaygroundFinding("no_checkout"))
        plain = override_content(project.marquee.name, project.playground, services)
        images = await image_ids(session, playspec.images)
        tags = tags_digest(images)
        inputs = input_digest(compose.file_digests(), plain, images)
        record = await records.of(project.playground)
        hold = hold_of(self.pin, record, rollback=playspec.rollback, head=self.head, tags=tags)
        if hold is not None and hold.pin is None:
            return await self._keep_rolled_back(services, record)
        failed = record.failed
        if (
            hold is None
            and failed is not None
            and (failed.inputs == inputs or failed.is_release(self.head, tags))
        ):
            return _held(project, record, playspec)
        override = override_content(
            project.marquee.name, project.playground, services, hold.images if hold else None
        )
        changing = time.monotonic()
        drift = await self._bring_up(services, override)
        result = _Converged(
            PlaygroundFinding(
                "running", tuple(drift), **_last_good_of(record),
                pinned=None if hold is None else hold.why,
            )
        )  # fmt: skip
        verified = record.last_good is not None and record.last_good.inputs == inputs
        if verified and not drift:
            assert record.last_good is not None
            result.finding = replace(result.finding, revision=record.last_good.revision.to_json())
        if session.dry_run or not (drift or not verified):
            return result
        health, time_up = await wait_healthy(
            session,
            project,
            services,
            timeout=playspec.health_timeout,
            changed=changing if drift else None,
            secrets=_secrets(self.registry),
        )
        if health.healthy:
            result.finding = replace(result.finding, health="healthy")
            if drift:
                await compose.learn_after_up(health.labels)
            good = LastGood(
                inputs=inputs,
                compose=compose.file_digests()["compose"],
                revision=Revision(
                    commit=compose.commit,
                    images=await _running_images(session, health),
                    env=compose.file_digests()["env"],
                    override=hashlib.sha256(plain.encode()).hexdigest(),
                ),
            )
            if record != HealthRecord(last_good=good):
                await write_record(
                    session, project.playground, HealthRecord(last_good=good),
                    env=compose.env_path,
                )  # fmt: skip
            result.finding = replace(
                result.finding,
                revision=good.revision.to_json(),
                **_last_good_of(HealthRecord(last_good=good)),
            )
            return result
        if not time_up:
            result.finding = replace(result.finding, health="pending")
            return result
        reason = "; ".join(f"{service}: {why}" for service, why in health.problems().items())
        result.finding = replace(result.finding, health="unhealthy", unhealthy=health.problems())
        result.unhealthy = "unhealthy"
        now = Revision(
            compose.commit,
            await _pinned_tags(session, images),
            compose.file_digests()["env"],
            hashlib.sha256(plain.encode()).hexdigest(),
        )
        result.finding = replace(result.finding, revision=now.to_json())
        result.notices.append(
            Notice(NoticeKind.UNHEALTHY, project.playground, f"{reason} ({_both(now, record)})")
        )
        if verified:
            # The last good state itself is not healthy now: reported, not undone, and its inputs
            # are not marked failed (they were verified; what changed is not in them).
            return result
        failed_now = Failed(inputs, reason, commit=compose.commit, tags=tags)
        record = HealthRecord(last_good=record.last_good, failed=failed_now)
        await write_record(session, project.playground, record)
        if playspec.rollback == "auto" and record.last_good is not None and hold is None:
            await self._roll_back(record, result)
        return result

    async def _keep_rolled_back(self, services: list[str], record: HealthRecord) -> _Converged:
        """A Playground held at its last good revision because the release at its head failed:
        finished rolling back where it is not all there yet (a rollback a lost lease cut
        short: its commit or ``.env`` is not the last good one), else kept there, its images
        pinned by digest; verified after any change."""
        session, project = self.session, self.project
        good = record.last_good
        assert good is not None
        result = _Converged(
            PlaygroundFinding("running", revision=good.revision.to_json(), **_last_good_of(record))
        )
        if _off_revision(self.compose, good.revision):
            await self._roll_back(record, result)
            result.finding = replace(result.finding, health=result.finding.rollback_health)
            return result
        override = override_content(project.marquee.name, project.playground, services, good.images)
        changing = time.monotonic()
        drift = await self._bring_up(services, override)
        result.finding = replace(result.finding, drift=tuple(drift))
        _say_rolled_back(project, record, result, now=bool(drift) and not session.dry_run)
        if session.dry_run or not drift:
            return result
        health, time_up = await wait_healthy(
            session, project, services, timeout=self.playspec.health_timeout, changed=changing,
            secrets=_secrets(self.registry),
        )  # fmt: skip
        if health.healthy:
            await self.compose.learn_after_up(health.labels)
        result.finding = replace(result.finding, health=_word(health.healthy, time_up))
        return result

    async def _bring_up(self, services: list[str], override: str) -> list[str]:
        """Write the override and ``up`` when anything calls for it, recreate what is stuck;
        returns why (nothing when the Playground already was as desired)."""
        session, project, compose = self.session, self.project, self.compose
        drift: list[str] = []
        if not compose.override_current(override):
            await session.write_file(
                f"write the compose override of playground {project.playground}",
                project.override,
                override,
            )
            compose.override_written(override)
            drift.append("override changed")
        drift += _container_drift(services, self.own)
        if not drift:
            drift += _config_drift(self.own, await compose.config_hashes())
        if drift:
            # The listing is stale now (up recreated what differed); the health gate that
            # follows sees what up left, stuck or not.
            await session.change(
                f"compose up playground {project.playground} ({'; '.join(drift)})", project.up()
            )
            return drift
        stuck = await _stuck(session, [c for c in self.own if _service(c) in services])
        if stuck:
            reasons = [f"{service}: {why}" for service, why in sorted(stuck.items())]
            await session.change(
                f"recreate stuck services of playground {project.playground} "
                f"({'; '.join(reasons)})",
                project.recreate(sorted(stuck)),
            )
            drift += reasons
        return drift

    async def _roll_back(self, record: HealthRecord, result: _Converged) -> None:
        """Put the Playground back at its last good revision, all of it, and verify it: the
        checkout at its commit (fetched only if missing), its ``.env`` from the copy the host
        kept, our override naming each service's last good image by digest, then ``up``. A lease
        lost midway stops it like any write; the next cycle, seeing the same failed release,
        finishes it (``_keep_rolled_back``)."""
        session, project, compose = self.session, self.project, self.compose
        good = record.last_good
        assert good is not None
        revision = good.revision
        changing = time.monotonic()
        if revision.commit is not None and compose.commit != revision.commit:
            await session.change(
                f"check out playground {project.playground} at {revision.commit[:12]} "
                "(roll back to its last good revision)",
                git.check_out(project.checkout, self.playspec.repo, revision.commit),
            )
        if revision.commit is not None and compose.file_digests()["env"] != revision.env:
            await session.change(
                f"restore the .env of playground {project.playground} "
                f"(env={revision.env[:12]}, its last good revision)",
                restore_env(
                    project.checkout,
                    kept_env_path(project.marquee, project.playground),
                    revision.env != ABSENT,
                ),
            )
        services = await _services_now(session, project)
        await session.write_file(
            f"write the compose override of playground {project.playground} "
            f"(roll back to {good.shown()})",
            project.override,
            override_content(project.marquee.name, project.playground, services, good.images),
        )
        await session.change(
            f"compose up playground {project.playground} (roll back to its last good revision)",
            project.up(),
        )
        _say_rolled_back(project, record, result, now=True)
        if session.dry_run:
            return
        health, time_up = await wait_healthy(
            session, project, services, timeout=self.playspec.health_timeout, changed=changing,
            secrets=_secrets(self.registry),
        )  # fmt: skip
        result.finding = replace(
            result.finding,
            revision=revision.to_json(),
            rollback_health=_word(health.healthy, time_up),
        )


def _off_revision(compose: ComposeState, revision: Revision) -> bool:
    """Whether the checkout's commit or ``.env`` is not ``revision``'s (one a record written
    before revisions had a commit cannot say: never)."""
    if revision.commit is None:
        return False
    return compose.commit != revision.commit or compose.file_digests()["env"] != revision.env


async def _services_now(session: RemoteSession, project: ComposeProject) -> list[str]:
    """The project's services as its checkout is now, asked of compose (the cycle's answer was
    for the checkout before the rollback moved it)."""
    if session.dry_run:
        return []
    return parse_services((await session.run(project.services())).stdout)


def _word(healthy: bool, time_up: bool) -> str:
    return "healthy" if healthy else "unhealthy" if time_up else "pending"


def _both(now: Revision, record: HealthRecord) -> str:
    """Both revisions, in one line for a notice: the one that failed and the last good one."""
    good = "none" if record.last_good is None else record.last_good.revision.short()
    return f"revision {now.short()}; last good {good}"


async def _pinned_tags(session: RemoteSession, images: Mapping[str, str]) -> dict[str, str]:
    """Playspec reference -> the image behind it, by repo digest (where the host has it)."""
    present = [image for image in images.values() if image != ABSENT]
    pinned = await pinned_references(session, sorted(set(present)))
    return {reference: pinned[image] for reference, image in images.items() if image in pinned}


def _say_rolled_back(
    project: ComposeProject, record: HealthRecord, result: _Converged, *, now: bool
) -> None:
    """The finding, notice and outcome of a Playground running its last good state: the notice
    is ``rolled_back`` in the cycle that rolled it back (``now``; what the rollback metric
    counts), ``unhealthy`` in the cycles that keep it there."""
    assert record.last_good is not None
    assert record.failed is not None
    commit = record.last_good.revision.commit
    at = "" if commit is None else f" at {commit[:12]}"
    words = f"rolled back to {record.last_good.shown()}{at} because {record.failed.reason}"
    result.finding = replace(result.finding, rollback=words)
    kind = NoticeKind.ROLLED_BACK if now else NoticeKind.UNHEALTHY
    result.notices.append(Notice(kind, project.playground, words))
    result.unhealthy = "rolled back to its last good state"


def _held(project: ComposeProject, record: HealthRecord, playspec: Playspec) -> _Converged:
    """A Playground whose inputs failed and that is not rolled back: left as it is."""
    assert record.failed is not None
    why = (
        f"inputs {record.failed.inputs[:12]} failed ({record.failed.reason}); "
        "not retried until they change"
    )
    if playspec.rollback == "auto":
        why += "; no last good state to roll back to"
    held = _Converged(
        PlaygroundFinding("running", health="held", held=why, **_last_good_of(record)),
        unhealthy="held back: its inputs failed",
    )
    held.notices.append(Notice(NoticeKind.UNHEALTHY, project.playground, why))
    return held


class _LastGoodFields(TypedDict):
    last_good: str | None
    last_good_revision: RevisionRecord | None


def _last_good_of(record: HealthRecord) -> _LastGoodFields:
    """The Playground's last good state as its finding holds it, in every cycle (``describe``
    shows the last cycle's): its images in a few words, and its revision in full."""
    good = record.last_good
    return {
        "last_good": None if good is None else good.shown(),
        "last_good_revision": None if good is None else good.revision.to_json(),
    }


async def _running_images(session: RemoteSession, health: PlaygroundHealth) -> dict[str, str]:
    """Service -> the image its container runs, by a reference naming exactly that image."""
    pinned = await pinned_references(
        session, sorted({service.image for service in health.services.values()})
    )
    return {name: pinned[service.image] for name, service in health.services.items()}


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
