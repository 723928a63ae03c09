"""sync_git: every playground's checkout on this Marquee at the head of its branch, unless it is
held at another revision (``phases.holds``: pinned, rolled back from a release that failed, or
not admitted yet by a rollout of its release: ``phases.rollout_gate``).

The branch heads come from one ``ls-remote`` per repo (a read) and the checkouts' commits from
one read of all the Playgrounds' files (``host_state.playground_files``), so a checkout already
at its head costs no change at all; only a missing checkout (clone) or a moved head (fetch +
hard reset) changes the host. The Marquee's pins come from Redis; its health records (which say
whether a release failed) are read only when a checkout is not at its branch head, so a
converged Marquee costs no more reads than before. A held checkout is moved to its commit
(fetched only when missing, never reset to the head), except one rolled back from a failed
release: reconcile_playgrounds moves that one with the rest of the rollback, once every part of
the revision is known to be there (``remote.rollback_check``), so a rollback that cannot be made
leaves the checkout where it is. A playground whose branch is gone keeps its checkout as it is:
fetch_branches reports it and stops it when asked. One whose checkout cannot be moved to the
commit it is held at (not on the origin, or the origin away) keeps its checkout as it is too,
and fails alone: noticed with git's reason, the cycle ``unhealthy``, and the other Playgrounds
go on (reconcile_playgrounds leaves it as it runs).
"""

from __future__ import annotations

from typing import Any

from playguard_async.cycle_record import NoticeKind
from playguard_async.desired_state.model import Playground
from playguard_async.phases.holds import Hold, hold_of, pins_of
from playguard_async.phases.protocol import Notice, PhaseReport
from playguard_async.phases.rollout_gate import verdicts
from playguard_async.phases.toolkit import (
    CycleContext,
    branch_gone_notices,
    branch_heads,
    check_out_held,
    compose_project,
)
from playguard_async.remote import git
from playguard_async.remote.host_state import image_ids, playground_files
from playguard_async.remote.last_good import read_records, tags_digest
from playguard_async.remote.ssh import RemoteSession


class SyncGit:
    name = "sync_git"

    async def __call__(self, ctx: CycleContext) -> PhaseReport:
        """Findings: ``heads`` (playground -> the commit its checkout is at, or would be at in
        dry-run; None when it has none), ``branch_gone`` (playground -> missing branch),
        ``held`` (playground -> why its checkout is kept at a revision that is not its head)
        and ``unheld`` (playground -> why its checkout could not be put at that revision)."""
        session = await ctx.remote()
        playgrounds = ctx.inventory.playgrounds_on(ctx.marquee.name)
        specs = {pg.name: ctx.inventory.playspec_of(pg) for pg in playgrounds}
        heads = await branch_heads(session, (spec.repo for spec in specs.values()))
        files = await playground_files(
            session, [compose_project(session, ctx.inventory, pg) for pg in playgrounds]
        )
        moved = [
            pg
            for pg in playgrounds
            if files[pg.name].head != heads[specs[pg.name].repo].get(pg.branch)
        ]
        holds = await _holds(ctx, session, playgrounds, moved, heads)
        findings: dict[str, Any] = {"heads": {}, "branch_gone": {}, "held": {}, "unheld": {}}
        for playground in playgrounds:
            repo = specs[playground.name].repo
            checkout = git.checkout_dir(ctx.marquee, playground.name)
            local = files[playground.name].head
            hold = holds.get(playground.name)
            wanted = heads[repo].get(playground.branch)
            if hold is not None:
                findings["held"][playground.name] = hold.why
                wanted = _held_at(hold, local) or wanted
            if wanted is None:
                findings["branch_gone"][playground.name] = playground.branch
                findings["heads"][playground.name] = local
                continue
            if local is None:
                await session.change(
                    f"clone {repo} branch {playground.branch} for playground {playground.name}",
                    git.clone(repo, playground.branch, checkout),
                )
                local = heads[repo].get(playground.branch)
            if local != wanted and hold is not None:
                failed = await check_out_held(
                    session,
                    f"hold playground {playground.name} at {wanted[:12]} ({hold.why})",
                    checkout, repo, wanted,
                )  # fmt: skip
                if failed is not None:
                    findings["unheld"][playground.name] = (
                        f"cannot be held at {wanted[:12]} ({hold.shown}): {failed}"
                    )
                    findings["heads"][playground.name] = local
                    continue
            elif local != wanted:
                was = (local or "-")[:12]
                await session.change(
                    f"update playground {playground.name} from {was} to {wanted[:12]}",
                    git.update(checkout, repo, playground.branch),
                )
            findings["heads"][playground.name] = wanted
            if session.dry_run and local != wanted:
                session.planned_commits[playground.name] = wanted
        return _report(findings)


def _report(findings: dict[str, Any]) -> PhaseReport:
    """The branches gone and the Playgrounds not held are noticed; one not held leaves the
    cycle ``unhealthy`` (every phase still runs, for the other Playgrounds)."""
    unheld: dict[str, str] = findings["unheld"]
    report = PhaseReport(findings=findings, notices=branch_gone_notices(findings["branch_gone"]))
    report.notices += [Notice(NoticeKind.FAILED, name, why) for name, why in unheld.items()]
    if unheld:
        report.unhealthy = "; ".join(
            f"playground {name} not at the revision it is held at" for name in unheld
        )
    return report


def _held_at(hold: Hold, local: str | None) -> str | None:
    """The commit a held checkout is kept at: the hold's, except for a rollback, which
    reconcile_playgrounds makes whole (checkout with the rest) or not at all."""
    if hold.rolled_back:
        return local
    return hold.commit or local


async def _holds(
    ctx: CycleContext,
    session: RemoteSession,
    playgrounds: list[Playground],
    moved: list[Playground],
    heads: dict[str, dict[str, str]],
) -> dict[str, Hold]:
    """The holds on this Marquee's Playgrounds: a pinned one always counts, a rolled back one
    can only be off its head, so the health records are read only when one is, or when a
    rollout holds one."""
    pins = await pins_of(ctx, session)
    gate = await verdicts(ctx, session)
    if not pins and not moved and not any(not v.admitted for v in gate.values()):
        return {}
    records = await read_records(session, [pg.name for pg in playgrounds])
    holds: dict[str, Hold] = {}
    for playground in playgrounds:
        record = records[playground.name]
        playspec = ctx.inventory.playspec_of(playground)
        tags = None
        if record.failed is not None and playspec.rollback == "auto":
            tags = tags_digest(await image_ids(session, playspec.images))
        hold = hold_of(
            pins.get(playground.name),
            record,
            rollback=playspec.rollback,
            head=heads[playspec.repo].get(playground.branch),
            tags=tags,
            rollout=None if (verdict := gate.get(playground.name)) is None else verdict.hold,
        )
        if hold is not None:
            holds[playground.name] = hold
    return holds


sync_git = SyncGit()
