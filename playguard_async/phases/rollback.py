"""A Playground whose release failed taken back to its last good revision (``rollback: auto``),
all of it: commit, ``.env``, images by digest, once every part of it is known to be there
(``remote.rollback_check``: a rollback that cannot have one changes nothing and says what is
missing), and never onto a release its scope's rollout knows aborted (it is stopped instead)."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from playguard_async.cycle_record import ABSENT_FILE, NoticeKind
from playguard_async.desired_state.model import Playspec, Registry
from playguard_async.phases.converged import Converged, health_word, registry_secrets
from playguard_async.phases.protocol import Notice
from playguard_async.phases.toolkit import check_out_held
from playguard_async.remote.compose import ComposeProject, override_content, parse_services
from playguard_async.remote.health import wait_healthy
from playguard_async.remote.host_state import ComposeState
from playguard_async.remote.last_good import HealthRecord
from playguard_async.remote.revision import Revision, kept_env_path, restore_env
from playguard_async.remote.rollback_check import check_revision, fingerprint
from playguard_async.remote.ssh import RemoteSession


@dataclass(frozen=True)
class Rollback:
    """The rollback of one running Playground in this cycle: what it needs of the cycle."""

    session: RemoteSession
    project: ComposeProject
    compose: ComposeState
    playspec: Playspec
    registry: Registry | None
    aborted: frozenset[str]
    """The releases its scope's rollout knows aborted."""

    async def off_failed(self, record: HealthRecord, result: Converged) -> None:
        """Off a release that failed: back to the last good revision (``roll_back``), unless
        that revision is a release its scope's rollout knows aborted. No Marquee runs an
        aborted release: the Playground is then stopped and says so, as an abort stops one
        with no revision before the aborted one, and the next cycle's rollout verdict takes it
        back to the revision before that one (or keeps it stopped)."""
        good = record.last_good
        assert good is not None
        if good.release is None or good.release not in self.aborted:
            await self.roll_back(record, result)
            return
        words = (
            f"not rolled back: its last good revision is release {good.release[:12]}, which "
            "was aborted; stopped"
        )
        await self.session.change(
            f"stop playground {self.project.playground} ({words})", self.project.stop()
        )
        result.finding = replace(result.finding, rollback=words)
        result.notices.append(Notice(NoticeKind.FAILED, self.project.playground, words))
        result.unhealthy = "stopped: its last good revision was aborted"

    async def roll_back(self, record: HealthRecord, result: Converged) -> None:
        """Put the Playground back at its last good revision, all of it, and verify it: the
        checkout at its commit (fetched only if missing), its ``.env`` from the copy the host
        kept, our override naming each service's last good image by digest, then ``up``. A lease
        lost midway stops it like any write; the next cycle, seeing the same failed release,
        finishes it (``RunningPlayground``, which keeps it there). First, with reads only, it
        makes sure every part it needs can be had (``remote.rollback_check``): if one cannot,
        nothing is written and the finding names what is missing."""
        session, project, compose = self.session, self.project, self.compose
        good = record.last_good
        assert good is not None
        revision = good.revision
        if await self._blocked(revision, result):
            return
        changing = time.monotonic()
        if revision.commit is not None and compose.commit != revision.commit:
            failed = await check_out_held(
                session,
                f"check out playground {project.playground} at {revision.commit[:12]} "
                "(roll back to its last good revision)",
                project.checkout, self.playspec.repo, revision.commit,
            )  # fmt: skip
            if failed is not None:
                _say_not_rolled_back(project, revision.commit, result, failed)
                return
        if revision.commit is not None and compose.file_digests()["env"] != revision.env:
            await session.change(
                f"restore the .env of playground {project.playground} "
                f"(env={revision.env[:12]}, its last good revision)",
                restore_env(
                    project.checkout,
                    kept_env_path(project.marquee, project.playground),
                    revision.env != ABSENT_FILE,
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
        say_rolled_back(project, record, result, now=True)
        if session.dry_run:
            return
        health, time_up = await wait_healthy(
            session, project, services, timeout=self.playspec.health_timeout, changed=changing,
            secrets=registry_secrets(self.registry),
        )  # fmt: skip
        result.finding = replace(
            result.finding,
            revision=revision.to_json(),
            rollback_health=health_word(health.healthy, time_up),
        )

    async def _blocked(self, revision: Revision, result: Converged) -> bool:
        """Whether the rollback to ``revision`` cannot have a part it needs; its finding and
        outcome then say which (the notice is the caller's to tell once)."""
        project = self.project
        env_copy = kept_env_path(project.marquee, project.playground)
        missing = await check_revision(
            self.session, checkout=project.checkout, repo=self.playspec.repo, revision=revision,
            now_commit=self.compose.commit, now_env=self.compose.file_digests()["env"],
            env_copy_path=env_copy, registry=self.registry,
        )  # fmt: skip
        result.rollback_checked = True
        if not missing:
            return False
        words = "; ".join(missing)
        result.finding = replace(result.finding, rollback_blocked=words)
        result.blocked = fingerprint(project.playground, revision, missing)
        result.unhealthy = f"not rolled back: {words}"
        return True


def _say_not_rolled_back(
    project: ComposeProject, commit: str, result: Converged, failed: str
) -> None:
    """A rollback whose commit cannot be checked out changes nothing more: the Playground runs
    what failed, and says why it was not rolled back (its own failure, not its Marquee's)."""
    words = f"cannot roll back to {commit[:12]}: {failed}"
    result.finding = replace(result.finding, rollback=words)
    result.notices.append(Notice(NoticeKind.FAILED, project.playground, words))
    result.unhealthy = "not rolled back: its last good commit cannot be checked out"


def off_revision(compose: ComposeState, revision: Revision) -> bool:
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


def say_rolled_back(
    project: ComposeProject, record: HealthRecord, result: Converged, *, now: bool
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
