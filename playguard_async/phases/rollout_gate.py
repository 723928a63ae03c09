"""The rollout gate: whether this Marquee may take a Playground's new release now, and what the
cycle tells the fleet's rollout afterwards.

A release is what the desired state makes reach a Playground's host: the commit at the head of
its branch, its compose file, the digest the registry serves for each of its images and the form
of the override playguard writes (``release_of``, named by ``phases.release_identity``). When a
Playspec with a rollout policy (its own, else the fleet's) is on several Marquees at a branch,
the release goes to them in waves (``desired_state.rollout_policy``) tracked by one record per
scope, ``playspec@branch`` (``phases.rollout_record``, kept by ``coordination.rollouts``). A
Playground whose last good revision is not the release opens a rollout when the scope has none
for it (never again one a later rollout of the scope replaced: ``RolloutDesk``); one outside the
admitted waves is held at its last good revision (``phases.holds``), the way a ``last-good`` pin
holds it: its checkout is not moved and its services run their last good images by digest, so
nothing on its host changes.

After the Playground converged, an admitted Marquee reports: verified healthy at the release
(counted once in its wave) or failed (named in the record, which halts the rollout past its
budget). Every cycle of a Marquee in the cohort also takes the rollout's steps that are due
(``Rollout.progressed``): a replica that dies mid-rollout leaves nothing half done, as each step
is one compare-and-set from a reading, and any other replica's next cycle takes the next one.

The verdicts are made once per cycle (sync_git asks first, reconcile_playgrounds reuses them);
a dry run (``plan``, ``detect``) reads and never writes. A Redis error leaves a Playground with a
last good revision held (uncertainty means no change), one with none unheld (nothing to hold
it at).
"""

from __future__ import annotations

import structlog

from playguard_async.cycle_record import RolloutFinding
from playguard_async.desired_state.model import Inventory, Playspec
from playguard_async.phases.decision_copies import keep_rollouts, kept_rollouts
from playguard_async.phases.release_identity import release_digest
from playguard_async.phases.rollout_desk import (
    RolloutDesk,
    Standing,
    Verdict,
    scope_of,
    staged_playgrounds,
)
from playguard_async.phases.toolkit import CycleContext, branch_heads
from playguard_async.remote.errors import DockerApiError
from playguard_async.remote.last_good import read_records
from playguard_async.remote.registry import auth_for, registry_digest_once
from playguard_async.remote.ssh import RemoteSession

log = structlog.get_logger("playguard.rollouts")


async def release_of(
    session: RemoteSession, inventory: Inventory, playspec: Playspec, head: str
) -> str | None:
    """The release the desired state asks of a Playground of ``playspec`` whose branch is at
    ``head``; None when the registry does not say what an image's tag names now."""
    registry = inventory.registry_of(playspec)
    digests: dict[str, str] = {}
    try:
        for reference in sorted(set(playspec.images)):
            auth = auth_for(reference, registry)
            digests[reference] = await registry_digest_once(session, reference, auth)
    except DockerApiError as exc:
        log.info("rollout.release_unknown", playspec=playspec.name, reason=str(exc)[:200])
        return None
    return release_digest(playspec, head, digests)


async def verdicts(ctx: CycleContext, session: RemoteSession) -> dict[str, Verdict]:
    """Playground -> the gate's verdict, for this Marquee's running Playgrounds whose release a
    rollout stages (the others have none: they take their release at once). Made once per
    cycle."""

    async def decide() -> dict[str, Verdict]:
        return await _decide(ctx, session)

    return dict(await session.read_once(("rollout-verdicts",), decide, of_host=False))


async def _decide(ctx: CycleContext, session: RemoteSession) -> dict[str, Verdict]:
    staged = staged_playgrounds(ctx)
    if not staged:
        return {}
    heads = await branch_heads(session, (playspec.repo for _, playspec, _ in staged))
    records = await read_records(
        session, [pg.name for pg in ctx.inventory.playgrounds_on(ctx.marquee.name)]
    )
    desk = _desk(ctx, session)
    scopes = {pg.name: scope_of(pg) for pg, _, _ in staged}
    kept = await kept_rollouts(session, scopes, await desk.recorded(set(scopes.values())))
    verdicts: dict[str, Verdict] = {}
    for playground, playspec, policy in staged:
        head = heads[playspec.repo].get(playground.branch)
        if head is None:
            continue  # its branch is gone: sync_git and fetch_branches say so
        good, before = records[playground.name].last_good, records[playground.name].previous
        standing = Standing(
            has_good=good is not None,
            good_release=None if good is None else good.release,
            has_previous=before is not None,
            previous_release=None if before is None else before.release,
            rolls_back=playspec.rollback == "auto",
            kept=kept.get(scope_of(playground)),
        )
        release = await release_of(session, ctx.inventory, playspec, head)
        verdicts[playground.name] = await desk.verdict(playground, policy, release, head, standing)
    await keep_rollouts(session, {
        name: verdict.rollout for name, verdict in verdicts.items() if verdict.rollout is not None
    })  # fmt: skip
    return verdicts


def _desk(ctx: CycleContext, session: RemoteSession) -> RolloutDesk:
    lock = ctx.lease.lock
    return RolloutDesk(lock.redis, lock.timeout, ctx.inventory, ctx.marquee, session.dry_run,
                       ctx.windows_default, ctx.versions_mixed)  # fmt: skip


async def tell_rollout(
    ctx: CycleContext,
    session: RemoteSession,
    verdict: Verdict,
    healthy: bool | None,
    why: str,
    *,
    playground: str,
) -> RolloutFinding:
    """Tell the rollout how ``playground``, which it admitted, came out (``RolloutDesk.tell``);
    what the cycle records of it. A record the telling changed (a failure counted, a halt, a
    wave started) is kept in this replica's memory and on this host in the same cycle (one
    fenced write, only when it changed), so a halt outlives Redis forgetting it at once, not
    from the next cycle that reads it."""
    told = await _desk(ctx, session).tell(verdict, healthy, why)
    if told is not None:
        await keep_rollouts(session, {playground: told.rollout})
    rollout = verdict.rollout if told is None else told.rollout
    assert rollout is not None
    return {
        "status": rollout.status,
        "wave": rollout.wave + 1,
        "waves": len(rollout.waves),
        "release": rollout.target[:12],
        "held": not verdict.admitted,
        "failed_here": told is not None and told.failed,
        "halted_here": None if told is None or not told.halted else rollout.why,
    }
