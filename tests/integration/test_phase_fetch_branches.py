"""fetch_branches against the lab: branches listed over SSH, a deleted branch reported and, when the
playground asks for it, its project stopped."""

from __future__ import annotations

import aiodocker
import pytest

from playguard_async.phases.fetch_branches import fetch_branches
from playguard_async.phases.reconcile_playgrounds import reconcile_playgrounds
from playguard_async.phases.sync_git import sync_git
from tests.support.edge import LabEdge
from tests.support.playgrounds import project_containers, set_playground

pytestmark = pytest.mark.integration


async def running_playground(edge: LabEdge) -> str:
    """A playground on a branch of its own, cloned and brought up; returns the branch."""
    branch = edge.own_branch()
    await edge.run(sync_git)
    await edge.run(reconcile_playgrounds)
    return branch


async def app_state(docker: aiodocker.Docker) -> str:
    [container] = await project_containers(docker)
    state: str = container["State"]["Status"]
    return state


async def test_branches_of_each_playspec_repo_are_listed(edge: LabEdge) -> None:
    branch = edge.own_branch()

    run = await edge.run(fetch_branches)

    assert run.actions == []
    assert run.report.findings == {
        "branches": {"web": edge.origin.branches()},
        "branch_gone": {},
        "stopped": [],
    }
    assert {"main", "feature", branch} <= set(run.report.findings["branches"]["web"])


async def test_deleted_branch_is_reported_and_left_running_by_default(edge: LabEdge) -> None:
    branch = await running_playground(edge)
    edge.origin.delete_branch(branch)

    run = await edge.run(fetch_branches)

    assert run.actions == []
    assert run.report.findings["branch_gone"] == {"web-main": branch}
    assert branch not in run.report.findings["branches"]["web"]
    assert run.report.findings["stopped"] == []
    assert await app_state(edge.docker) == "running"


async def test_deleted_branch_stops_the_playground_when_asked_and_it_stays_stopped(
    edge: LabEdge,
) -> None:
    branch = await running_playground(edge)
    set_playground(edge.world, stop_when_branch_gone=True)
    edge.origin.delete_branch(branch)

    stopped = await edge.run(fetch_branches)
    again = await edge.run(fetch_branches)
    reconciled = await edge.run(reconcile_playgrounds)

    assert stopped.actions == [f"stop playground web-main (branch {branch} is gone)"]
    assert stopped.report.findings["branch_gone"] == {"web-main": branch}
    assert stopped.report.findings["stopped"] == ["web-main"]
    assert await app_state(edge.docker) == "exited"
    assert again.actions == []
    assert again.report.findings["stopped"] == []
    assert reconciled.actions == [], "reconcile must not bring back what fetch_branches stopped"
    assert reconciled.report.findings["playgrounds"]["web-main"]["state"] == "branch_gone"
    assert await app_state(edge.docker) == "exited"


async def test_dry_run_reports_would_stop_and_changes_nothing(edge: LabEdge) -> None:
    branch = await running_playground(edge)
    set_playground(edge.world, stop_when_branch_gone=True)
    edge.origin.delete_branch(branch)

    run = await edge.run(fetch_branches, dry_run=True)

    assert run.actions == [f"would stop playground web-main (branch {branch} is gone)"]
    assert await app_state(edge.docker) == "running"
