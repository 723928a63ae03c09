"""sync_git: every playground's checkout on this Marquee at the head of its branch.

The branch heads come from one ``ls-remote`` per repo (a read) and the checkouts' commits from
one read of all the Playgrounds' files (``host_state.playground_files``), so a checkout already
at its head costs no change at all; only a missing checkout (clone) or a moved head (fetch +
hard reset) changes the host. A playground whose branch
is gone keeps its checkout as it is: fetch_branches reports it and stops it when asked.
"""

from __future__ import annotations

from typing import Any

from playguard_async.phases.protocol import PhaseReport
from playguard_async.phases.toolkit import (
    CycleContext,
    branch_gone_notices,
    branch_heads,
    compose_project,
)
from playguard_async.remote import git
from playguard_async.remote.host_state import playground_files


class SyncGit:
    name = "sync_git"

    async def __call__(self, ctx: CycleContext) -> PhaseReport:
        """Findings: ``heads`` (playground -> the commit its checkout is at, or would be at in
        dry-run; None when it has none) and ``branch_gone`` (playground -> missing branch)."""
        session = await ctx.remote()
        playgrounds = ctx.inventory.playgrounds_on(ctx.marquee.name)
        specs = {pg.name: ctx.inventory.playspec_of(pg) for pg in playgrounds}
        heads = await branch_heads(session, (spec.repo for spec in specs.values()))
        files = await playground_files(
            session, [compose_project(session, ctx.inventory, pg) for pg in playgrounds]
        )
        findings: dict[str, Any] = {"heads": {}, "branch_gone": {}}
        for playground in playgrounds:
            repo = specs[playground.name].repo
            checkout = git.checkout_dir(ctx.marquee, playground.name)
            local = files[playground.name].head
            wanted = heads[repo].get(playground.branch)
            if wanted is None:
                findings["branch_gone"][playground.name] = playground.branch
                findings["heads"][playground.name] = local
                continue
            if local is None:
                await session.change(
                    f"clone {repo} branch {playground.branch} for playground {playground.name}",
                    git.clone(repo, playground.branch, checkout),
                )
            elif local != wanted:
                await session.change(
                    f"update playground {playground.name} from {local[:12]} to {wanted[:12]}",
                    git.update(checkout, repo, playground.branch),
                )
            findings["heads"][playground.name] = wanted
        return PhaseReport(findings=findings, notices=branch_gone_notices(findings["branch_gone"]))


sync_git = SyncGit()
