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

A change is done when it is healthy, and a release that is not is rolled back under ``rollback:
auto``: ``phases.running_playground``. Where a rollout stages the release, a Marquee it has not
admitted keeps its last good revision, and one it admitted tells it how the release came out
(``phases.rollout_gate``); one that runs an aborted release with no revision before it to go
back to is stopped, and says why (``phases.rollout_desk``). A rollback that cannot have every
part of its revision changes nothing and is told once (``coordination.told``), not every cycle.

At its end the phase keeps what it listed, and what each running Playground should run, for the
web view (``phases.containers_listed``): written to Redis only when it changed.

An expired playground is taken down with its volumes and nothing else is done for it; a stopped
one (or a running one whose branch is gone and that asks to be stopped then, as fetch_branches
does) is stopped when anything of it is up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime

from playguard_async.coordination.containers_seen import DesiredParts
from playguard_async.coordination.told import first_telling, forget_telling
from playguard_async.cycle_record import (
    PLAYGROUND_FINDINGS,
    NoticeKind,
    PlaygroundFinding,
    PlaygroundFindingRecord,
    RolloutFinding,
)
from playguard_async.desired_state.model import Playground
from playguard_async.phases.causes import ChangeCause, change_notices, put_down_cause
from playguard_async.phases.containers_listed import desired_parts, keep_listing
from playguard_async.phases.converged import Converged
from playguard_async.phases.holds import pins_of, with_images
from playguard_async.phases.protocol import Notice, PhaseReport
from playguard_async.phases.rollout_desk import Verdict
from playguard_async.phases.rollout_gate import tell_rollout, verdicts
from playguard_async.phases.running_playground import HealthRecords, RunningPlayground
from playguard_async.phases.toolkit import (
    Container,
    CycleContext,
    branch_heads,
    compose_project,
    containers_of,
    stop_if_up,
)
from playguard_async.remote.compose import ComposeProject
from playguard_async.remote.docker import list_ours
from playguard_async.remote.host_state import compose_states, keep_answers
from playguard_async.remote.planned import planned_states
from playguard_async.remote.ssh import RemoteSession


class ReconcilePlaygrounds:
    name = "reconcile_playgrounds"

    async def __call__(self, ctx: CycleContext) -> PhaseReport:
        """Findings: ``playgrounds``, playground -> its ``PlaygroundFinding`` (``cycle_record``):
        its state, drift (why it was or would be changed), actions (what was done for it) and
        what its health gate and rollback came to; ``rollouts``, scope -> ``RolloutFinding``
        for the rollouts its Playgrounds are part of."""
        session = await ctx.remote()
        playgrounds = ctx.inventory.playgrounds_on(ctx.marquee.name)
        found: dict[str, PlaygroundFindingRecord] = {}
        rollouts: dict[str, RolloutFinding] = {}
        report = PhaseReport(findings={PLAYGROUND_FINDINGS: found})
        desired: dict[str, DesiredParts] = {}
        if not playgrounds:
            await keep_listing(ctx, session, desired)
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
        states = await planned_states(
            session,
            await compose_states(session, projects, owned),
            projects,
            {pg.name: ctx.inventory.playspec_of(pg).repo for pg in playgrounds},
        )
        records = HealthRecords(session, [pg.name for pg in playgrounds])
        pins = await pins_of(ctx, session)
        gate = await verdicts(ctx, session)
        unhealthy: list[str] = []
        for playground, project in zip(playgrounds, projects, strict=True):
            playground_mark = len(session.actions)
            own = owned[playground.name]
            verdict = gate.get(playground.name)
            down = await _put_down(
                session, project, own, playground, expired=expired, gone=gone, verdict=verdict
            )
            finding: PlaygroundFinding
            cause: ChangeCause | None = None
            if down is not None:
                finding = down
                cause = put_down_cause(down)
            else:
                playspec = ctx.inventory.playspec_of(playground)
                running = RunningPlayground(
                    session, project, own, states[playground.name], playspec,
                    ctx.inventory.registry_of(playspec),
                    await with_images(ctx, session, pins.get(playground.name), own),
                    (await branch_heads(session, [playspec.repo]))[playspec.repo].get(
                        playground.branch
                    ),
                    held_by=None if verdict is None else verdict.hold,
                    release=None if verdict is None else verdict.admitted_release,
                    aborted=frozenset() if verdict is None else verdict.aborted,
                )  # fmt: skip
                converged = await running.converge(records)
                desired[playground.name] = await desired_parts(
                    session, states[playground.name], playspec
                )
                finding, cause = converged.finding, converged.cause
                await _tell_blocked_once(ctx, playground.name, converged)
                await _tell_rollout(
                    ctx, session, verdict, converged, rollouts, playground=playground.name
                )
                report.notices += converged.notices
                if converged.unhealthy is not None and playspec.rollback != "off":
                    unhealthy.append(f"playground {playground.name} {converged.unhealthy}")
            actions = tuple(session.actions_since(playground_mark))
            found[playground.name] = replace(finding, actions=actions).to_json()
            if finding.drift and cause is not None:
                report.notices += change_notices(playground.name, cause, finding.drift)
        report.unhealthy = "; ".join(unhealthy) or None
        if rollouts:
            report.findings["rollouts"] = rollouts
        await keep_answers(session, list(states.values()))
        await keep_listing(ctx, session, desired)
        return report


async def _tell_rollout(
    ctx: CycleContext,
    session: RemoteSession,
    verdict: Verdict | None,
    converged: Converged,
    rollouts: dict[str, RolloutFinding],
    *,
    playground: str,
) -> None:
    """Tell the Playground's rollout (if it has one) how it came out; its finding kept under
    the scope, and a notice when this very failure halted it."""
    if verdict is None or verdict.rollout is None:
        return
    why = converged.unhealthy or "unhealthy"
    told = await tell_rollout(
        ctx, session, verdict, converged.at_release, why, playground=playground
    )
    rollouts[verdict.scope] = told
    if told["halted_here"] is not None:
        notice = Notice(NoticeKind.ROLLOUT_HALTED, verdict.scope, told["halted_here"])
        converged.notices.append(notice)


async def _tell_blocked_once(ctx: CycleContext, playground: str, converged: Converged) -> None:
    """A notice for a rollback that could not be made, in the first cycle that finds it missing
    these parts of this revision; a rollback that could be made forgets what was told. A cycle
    that tells no one (``plan``: ``ctx.tells``) shows the notice every time and leaves what was
    told alone, so the daemon's next cycle still tells it."""
    if not converged.rollback_checked:
        return
    lock = ctx.lease.lock
    if converged.blocked is None:
        if ctx.tells:
            await forget_telling(lock.redis, ctx.marquee.name, playground, lock.timeout)
        return
    if not ctx.tells or await first_telling(
        lock.redis, ctx.marquee.name, playground, converged.blocked, lock.timeout
    ):
        words = converged.finding.rollback_blocked or ""
        converged.notices.append(Notice(NoticeKind.ROLLBACK_BLOCKED, playground, words))


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


async def _put_down(
    session: RemoteSession,
    project: ComposeProject,
    own: list[Container],
    playground: Playground,
    *,
    expired: Mapping[str, datetime],
    gone: set[str],
    verdict: Verdict | None,
) -> PlaygroundFinding | None:
    """The finding of a Playground taken down or stopped in this cycle (when anything of it is
    up), or None when it is to run: expired, stopped by the desired state, its branch gone, or
    running an aborted release with nothing before it to go back to."""
    if playground.name in expired:
        reason = f"expired at {expired[playground.name].isoformat()}"
        return PlaygroundFinding("expired", tuple(await _take_down(session, project, own, reason)))
    if playground.state == "stopped":
        drift = await _stop(session, project, own, "state is stopped")
        return PlaygroundFinding("stopped", tuple(drift))
    if playground.name in gone:
        reason = f"branch {playground.branch} is gone"
        return PlaygroundFinding("branch_gone", tuple(await _stop(session, project, own, reason)))
    if verdict is not None and verdict.stop:
        drift = await _stop(session, project, own, verdict.why)
        return PlaygroundFinding("stopped", tuple(drift), held_by=verdict.why)
    return None


async def _stop(
    session: RemoteSession, project: ComposeProject, own: list[Container], reason: str
) -> list[str]:
    return [reason] if await stop_if_up(session, project, own, reason) else []


reconcile_playgrounds = ReconcilePlaygrounds()
