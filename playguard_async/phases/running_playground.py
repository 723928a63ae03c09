"""One running Playground converged in a cycle: brought to its desired revision, through the
health gate, and, under ``rollback: auto``, back to its last good revision when that revision is
not healthy in time.

The desired revision is its branch head (or the commit it is pinned at, ``phases.holds``) with the
images behind its Playspec's tags. A change is done when it is healthy: after ``up``, the health
gate (``remote.health``) waits for every service to be healthy by Docker's word, within the
Playspec's ``health_timeout`` (counted from the first start of its input set, which no restart of
a container moves) and the lease; a service that exited or that Docker keeps restarting fails it
at once. A Playground verified healthy has its revision recorded as its last good one
(``remote.last_good``); one that is not is reported ``unhealthy``, its release is remembered as
failed and not tried again until its branch head or an image behind a tag moves, and under
``rollback: auto`` it goes back to its last good revision, all of it: commit, ``.env``, images by
digest (docs, concepts/health.md), once every part of it is known to be there
(``remote.rollback_check``): a rollback that cannot have one changes nothing and says what is
missing (``phases.rollback``). What converging came to is a ``Converged`` (``phases.converged``).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from playguard_async.coordination.pins import LAST_GOOD, Pin
from playguard_async.cycle_record import (
    NoticeKind,
    PlaygroundFinding,
)
from playguard_async.desired_state.model import Playspec, Registry
from playguard_async.kits.vocabulary import Cause
from playguard_async.phases.causes import ChangeCause, change_cause
from playguard_async.phases.container_drift import (
    config_drift,
    container_drift,
    image_drift,
    references_of,
    service_of,
    stuck,
)
from playguard_async.phases.converged import (
    Converged,
    health_word,
    last_good_fields,
    registry_secrets,
)
from playguard_async.phases.holds import Hold, hold_of
from playguard_async.phases.protocol import Notice
from playguard_async.phases.rollback import Rollback, off_revision, say_rolled_back
from playguard_async.phases.rollout_desk import RolloutHold
from playguard_async.phases.toolkit import Container
from playguard_async.remote.compose import ComposeProject, override_content
from playguard_async.remote.health import PlaygroundHealth, wait_healthy
from playguard_async.remote.host_state import ABSENT, ComposeState, image_ids, pinned_references
from playguard_async.remote.last_good import (
    Failed,
    HealthRecord,
    LastGood,
    input_digest,
    read_records,
    tags_digest,
    write_record,
)
from playguard_async.remote.planned import planned_image_ids
from playguard_async.remote.revision import Revision
from playguard_async.remote.ssh import RemoteSession


class HealthRecords:
    """The Marquee's health records (``remote.last_good``), read once when first asked for."""

    def __init__(self, session: RemoteSession, playgrounds: list[str]) -> None:
        self._session = session
        self._playgrounds = playgrounds

    async def of(self, playground: str) -> HealthRecord:
        return (await read_records(self._session, self._playgrounds))[playground]


@dataclass(frozen=True)
class RunningPlayground:
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
    held_by: RolloutHold | None = None
    """The hold a rollout puts on it, if one does."""
    release: str | None = None
    """The release a rollout admitted it to, recorded with its last good revision."""
    aborted: frozenset[str] = frozenset()
    """The releases its scope's rollout knows aborted: the health gate never rolls back onto
    one of them (``Rollback.off_failed``)."""

    @property
    def _rollback(self) -> Rollback:
        return Rollback(self.session, self.project, self.compose, self.playspec, self.registry,
                        self.aborted)  # fmt: skip

    async def converge(self, records: HealthRecords) -> Converged:
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
            return await self._without_checkout()
        plain = override_content(project.marquee.name, project.playground, services)
        images = planned_image_ids(session, await image_ids(session, playspec.images))
        tags = tags_digest(images)
        inputs = input_digest(compose.file_digests(), plain, images)
        record = await records.of(project.playground)
        hold = hold_of(
            self.pin, record, rollback=playspec.rollback, head=self.head, tags=tags,
            rollout=self.held_by,
        )  # fmt: skip
        if hold is not None and hold.rolled_back:
            return await self._keep_rolled_back(services, record)
        if hold is not None and _off_hold(compose, hold) and not session.dry_run:
            # sync_git could not put the checkout there, and said why: it runs as it was.
            return Converged(
                PlaygroundFinding("not_held", held_by=hold.shown, **last_good_fields(record))
            )
        failed = record.failed
        # A pinned Playground's failed inputs are held like any (its pin is not its branch head,
        # so it is held by its inputs only).
        if failed is not None and (
            failed.inputs == inputs or (hold is None and failed.is_release(self.head, tags))
        ):
            return _held(project, record, playspec)
        override = override_content(
            project.marquee.name,
            project.playground,
            services,
            await _pinned(session, hold, self.own, images),
        )
        changing = time.monotonic()
        drift, why = await self._bring_up(
            services, override, self._cause(record, inputs, hold), images=images
        )
        result = Converged(
            PlaygroundFinding(
                "running", tuple(drift), **last_good_fields(record),
                pinned=None if hold is None or hold.pin is None else hold.why,
                held_by=None if hold is None else hold.shown,
            ),
            cause=why,
        )  # fmt: skip
        verified = record.last_good is not None and record.last_good.inputs == inputs
        if verified and not drift:
            assert record.last_good is not None
            result.finding = replace(result.finding, revision=record.last_good.revision.to_json())
            result.at_release = await self._name_release(record)
        if session.dry_run or not (drift or not verified):
            await self._plan_record(record, verified=verified)
            return result
        health, time_up = await wait_healthy(
            session,
            project,
            services,
            timeout=playspec.health_timeout,
            changed=changing if drift else None,
            secrets=registry_secrets(self.registry),
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
                release=self.release,
            )
            result.at_release = self.release is not None
            if record != record.replaced_by(good):
                await write_record(
                    session, project.playground, record.replaced_by(good), env=compose.env_path
                )
            result.finding = replace(
                result.finding,
                revision=good.revision.to_json(),
                **last_good_fields(HealthRecord(last_good=good)),
            )
            return result
        if not time_up:
            result.finding = replace(result.finding, health="pending")
            return result
        reason = "; ".join(f"{service}: {why}" for service, why in health.problems().items())
        result.finding = replace(result.finding, health="unhealthy", unhealthy=health.problems())
        result.unhealthy = "unhealthy"
        result.at_release = False if self.release is not None else None
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
        record = replace(record, failed=failed_now)
        await write_record(session, project.playground, record)
        if playspec.rollback == "auto" and record.last_good is not None and hold is None:
            await self._rollback.off_failed(record, result)
        return result

    async def _name_release(self, record: HealthRecord) -> bool | None:
        """Whether a converged Playground verified healthy runs the release a rollout admitted
        it to (None: no rollout asks); its record names that release from then on (written
        once, when it does not yet)."""
        good = record.last_good
        assert good is not None
        if self.release is None or self.session.dry_run:
            return None
        if good.release != self.release:
            named = replace(record, last_good=replace(good, release=self.release))
            await write_record(self.session, self.project.playground, named)
        return True

    async def _keep_rolled_back(self, services: list[str], record: HealthRecord) -> Converged:
        """A Playground held at its last good revision because the release at its head failed:
        finished rolling back where it is not all there yet (a rollback a lost lease cut
        short: its commit or ``.env`` is not the last good one), else kept there, its images
        pinned by digest; verified after any change."""
        session, project = self.session, self.project
        good = record.last_good
        assert good is not None
        result = Converged(
            PlaygroundFinding(
                "running", revision=good.revision.to_json(), **last_good_fields(record)
            )
        )
        if off_revision(self.compose, good.revision):
            await self._rollback.roll_back(record, result)
            if result.blocked is not None:
                # What status shows of it every cycle; the news is told once (the caller's).
                result.finding = replace(result.finding, revision=None, health="held")
                assert result.unhealthy is not None
                result.notices.append(
                    Notice(NoticeKind.UNHEALTHY, project.playground, result.unhealthy)
                )
                return result
            result.finding = replace(result.finding, health=result.finding.rollback_health)
            return result
        override = override_content(project.marquee.name, project.playground, services, good.images)
        changing = time.monotonic()
        rolled_back = ChangeCause(Cause.ROLLBACK, "kept at its last good revision")
        drift, _ = await self._bring_up(services, override, lambda _: rolled_back)
        result.finding = replace(result.finding, drift=tuple(drift))
        say_rolled_back(project, record, result, now=bool(drift) and not session.dry_run)
        if session.dry_run or not drift:
            return result
        health, time_up = await wait_healthy(
            session, project, services, timeout=self.playspec.health_timeout, changed=changing,
            secrets=registry_secrets(self.registry),
        )  # fmt: skip
        if health.healthy:
            await self.compose.learn_after_up(health.labels)
        result.finding = replace(result.finding, health=health_word(health.healthy, time_up))
        return result

    def _cause(
        self, record: HealthRecord, inputs: str, hold: Hold | None
    ) -> Callable[[list[str]], ChangeCause]:
        """Why the drift ``_bring_up`` finds calls for a change (``phases.causes``)."""
        compose = self.compose
        return lambda drift: change_cause(
            record.last_good, inputs=inputs, files=compose.file_digests(), commit=compose.commit,
            hold=hold, drift=drift,
        )  # fmt: skip

    async def _plan_record(self, record: HealthRecord, *, verified: bool) -> None:
        """In a dry run, the record the health gate writes of inputs not verified yet (healthy
        or not: either verdict is recorded), so that the plan lists it as the cycle takes it."""
        if self.session.dry_run and not verified:
            await write_record(self.session, self.project.playground, record)

    async def _without_checkout(self) -> Converged:
        """A Playground with no checkout: reported as such, except in a dry run of one whose
        branch sync_git would clone (``_plan_first_deploy``)."""
        if self.session.dry_run and self.head is not None:
            return await self._plan_first_deploy(self.head)
        return Converged(PlaygroundFinding("no_checkout"))

    async def _plan_first_deploy(self, head: str) -> Converged:
        """A dry run's plan of a Playground sync_git would clone: what the first cycle does
        after the clone (its override, ``up``, the health gate's record), which a dry run
        cannot ask compose about, having no checkout; a plan that stopped at the clone listed
        less than the cycle then did."""
        project, pin = self.project, self.pin
        commit = head if pin is None or pin.revision == LAST_GOOD else pin.revision
        first = ChangeCause(Cause.RELEASE, f"first deploy at {commit[:7]}")
        plain = override_content(project.marquee.name, project.playground, [])
        drift, why = await self._bring_up([], plain, lambda _: first)
        await write_record(self.session, project.playground, HealthRecord())
        return Converged(PlaygroundFinding("running", tuple(drift)), cause=why)

    async def _bring_up(
        self,
        services: list[str],
        override: str,
        cause: Callable[[list[str]], ChangeCause],
        *,
        images: Mapping[str, str] | None = None,
    ) -> tuple[list[str], ChangeCause | None]:
        """Write the override and ``up`` when anything calls for it, recreate what is stuck;
        returns why (nothing when the Playground already was as desired) and its ``cause``,
        which the ``up`` names. ``images``: reference -> the image behind it as this cycle's
        ``up`` will find it (a dry run's planned pull included, ``remote.planned``), whose
        containers on another image are drift whatever compose's version; none where the
        override names the images by digest (a rollback kept), which no tag moves."""
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
        drift += container_drift(services, self.own)
        if not drift and images:
            # A new image behind a tag first: compose v2's config hash does not name the image,
            # and where it does (1.29) the hash's word would only repeat it, at a compose call.
            drift += image_drift(self.own, images, await references_of(session, self.own))
        if not drift:
            drift += config_drift(self.own, await compose.config_hashes())
        if drift:
            # The listing is stale now (up recreated what differed); the health gate that
            # follows sees what up left, stuck or not.
            why = cause(drift)
            await session.change(
                f"compose up playground {project.playground} ({why})", project.up()
            )
            return drift, why
        stuck_now = await stuck(session, [c for c in self.own if service_of(c) in services])
        if stuck_now:
            reasons = [f"{service}: {why}" for service, why in sorted(stuck_now.items())]
            await session.change(
                f"recreate stuck services of playground {project.playground} "
                f"({'; '.join(reasons)})",
                project.recreate(sorted(stuck_now)),
            )
            return reasons, ChangeCause(Cause.DRIFT, "; ".join(reasons))
        return drift, None


async def _pinned(
    session: RemoteSession, hold: Hold | None, own: list[Container], images: Mapping[str, str]
) -> Mapping[str, str] | None:
    """The images the override pins by digest: a hold's, except while what runs already is what
    it holds and each container runs what a tag of its Playspec names now, so that ``up`` with
    the plain override would run the very same images: then the override stays as it was. That
    is a rollout's hold (not back) while no image behind a tag moved, and a pin whose images are
    the ones its services run: a pin at the revision a Playground runs changes nothing on the
    host (no override rewrite, no ``up``, no restart) until an image behind a tag moves."""
    if hold is None:
        return None
    behind_tags = set(images.values())
    if not all(str(c["ImageID"]) in behind_tags for c in own):
        return hold.images
    if hold.rollout and not hold.back:
        return None
    if hold.pin is None or hold.images is None:
        return hold.images
    refs = await pinned_references(session, sorted({str(c["ImageID"]) for c in own}))
    running = {service_of(c): refs[str(c["ImageID"])] for c in own if service_of(c)}
    if all(running.get(service) == image for service, image in hold.images.items()):
        return None
    return hold.images


def _off_hold(compose: ComposeState, hold: Hold) -> bool:
    """Whether the checkout is not at the commit ``hold`` keeps it at (one that names none, a
    record written before revisions had a commit: never)."""
    return hold.commit is not None and compose.commit != hold.commit


def _both(now: Revision, record: HealthRecord) -> str:
    """Both revisions, in one line for a notice: the one that failed and the last good one."""
    good = "none" if record.last_good is None else record.last_good.revision.short()
    return f"revision {now.short()}; last good {good}"


async def _pinned_tags(session: RemoteSession, images: Mapping[str, str]) -> dict[str, str]:
    """Playspec reference -> the image behind it, by repo digest (where the host has it)."""
    present = [image for image in images.values() if image != ABSENT]
    pinned = await pinned_references(session, sorted(set(present)))
    return {reference: pinned[image] for reference, image in images.items() if image in pinned}


def _held(project: ComposeProject, record: HealthRecord, playspec: Playspec) -> Converged:
    """A Playground whose inputs failed and that is not rolled back: left as it is."""
    assert record.failed is not None
    why = (
        f"inputs {record.failed.inputs[:12]} failed ({record.failed.reason}); "
        "not retried until they change"
    )
    if playspec.rollback == "auto":
        why += "; no last good state to roll back to"
    held = Converged(
        PlaygroundFinding("running", health="held", held=why, **last_good_fields(record)),
        unhealthy="held back: its inputs failed",
    )
    held.notices.append(Notice(NoticeKind.UNHEALTHY, project.playground, why))
    return held


async def _running_images(session: RemoteSession, health: PlaygroundHealth) -> dict[str, str]:
    """Service -> the image its container runs, by a reference naming exactly that image."""
    pinned = await pinned_references(
        session, sorted({service.image for service in health.services.values()})
    )
    return {name: pinned[service.image] for name, service in health.services.items()}
