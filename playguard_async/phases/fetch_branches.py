"""fetch_branches: which branches the repos used on this Marquee have, and which are gone.

A playground whose branch was deleted in its repo is reported; if it asks for it
(``stop_when_branch_gone``) and anything of it still runs, its project is stopped, not removed:
its containers and volumes stay until the branch comes back or the playground is dropped.
"""

from __future__ import annotations

from typing import Any

from playguard_async.phases.protocol import PhaseReport
from playguard_async.phases.toolkit import (
    CycleContext,
    branch_gone_notices,
    branch_heads,
    compose_project,
    containers_of,
    stop_if_up,
)
from playguard_async.remote.docker import list_ours


class FetchBranches:
    name = "fetch_branches"

    async def __call__(self, ctx: CycleContext) -> PhaseReport:
        """Findings: ``branches`` (playspec -> its repo's branches, sorted), ``branch_gone``
        (playground -> its missing branch) and ``stopped`` (playgrounds stopped for that, or that
        would be in dry-run)."""
        session = await ctx.remote()
        playgrounds = ctx.inventory.playgrounds_on(ctx.marquee.name)
        specs = {pg.name: ctx.inventory.playspec_of(pg) for pg in playgrounds}
        heads = await branch_heads(session, (spec.repo for spec in specs.values()))
        gone = [pg for pg in playgrounds if pg.branch not in heads[specs[pg.name].repo]]
        findings: dict[str, Any] = {
            "branches": {spec.name: sorted(heads[spec.repo]) for spec in specs.values()},
            "branch_gone": {pg.name: pg.branch for pg in gone},
            "stopped": [],
        }
        for playground in gone:
            ctx.log.warning(
                "playground.branch_gone", playground=playground.name, branch=playground.branch
            )
        to_stop = [pg for pg in gone if pg.stop_when_branch_gone]
        if to_stop:
            containers = await list_ours(session)
            for playground in to_stop:
                project = compose_project(session, ctx.inventory, playground)
                if await stop_if_up(
                    session,
                    project,
                    containers_of(containers, project),
                    f"branch {playground.branch} is gone",
                ):
                    findings["stopped"].append(playground.name)
        return PhaseReport(findings=findings, notices=branch_gone_notices(findings["branch_gone"]))


fetch_branches = FetchBranches()
