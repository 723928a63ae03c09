"""fetch_branches against the lab: branches listed over SSH, a deleted branch reported and, when the
playground asks for it, its project stopped."""

from __future__ import annotations

import aiodocker
import pytest

from playguard_async.lab import GitOrigin
from playguard_async.phases.fetch_branches import fetch_branches
from playguard_async.phases.reconcile_playgrounds import reconcile_playgrounds
from playguard_async.phases.sync_git import sync_git
from tests.support.playgrounds import project_containers, set_playground, use_own_branch
from tests.support.world import LabWorld, PhaseRunner

pytestmark = pytest.mark.integration


async def running_playground(
    world: LabWorld, run_phase: PhaseRunner, git_origin: GitOrigin, image: str
) -> str:
    """A playground on a branch of its own, cloned and brought up; returns the branch."""
    branch = use_own_branch(world, git_origin, image)
    await run_phase(sync_git, world)
    await run_phase(reconcile_playgrounds, world)
    return branch


async def app_state(docker: aiodocker.Docker) -> str:
    [container] = await project_containers(docker)
    state: str = container["State"]["Status"]
    return state


async def test_branches_of_each_playspec_repo_are_listed(
    lab_world: LabWorld, run_phase: PhaseRunner, git_origin: GitOrigin, busybox_image: str
) -> None:
    branch = use_own_branch(lab_world, git_origin, busybox_image)

    run = await run_phase(fetch_branches, lab_world)

    assert run.actions == []
    assert run.report.findings == {
        "branches": {"web": git_origin.branches()},
        "branch_gone": {},
        "stopped": [],
    }
    assert {"main", "feature", branch} <= set(run.report.findings["branches"]["web"])


async def test_deleted_branch_is_reported_and_left_running_by_default(
    lab_world: LabWorld,
    run_phase: PhaseRunner,
    git_origin: GitOrigin,
    busybox_image: str,
    lab_docker: aiodocker.Docker,
) -> None:
    branch = await running_playground(lab_world, run_phase, git_origin, busybox_image)
    git_origin.delete_branch(branch)

    run = await run_phase(fetch_branches, lab_world)

    assert run.actions == []
    assert run.report.findings["branch_gone"] == {"web-main": branch}
    assert branch not in run.report.findings["branches"]["web"]
    assert run.report.findings["stopped"] == []
    assert await app_state(lab_docker) == "running"


async def test_deleted_branch_stops_the_playground_when_asked_and_it_stays_stopped(
    lab_world: LabWorld,
    run_phase: PhaseRunner,
    git_origin: GitOrigin,
    busybox_image: str,
    lab_docker: aiodocker.Docker,
) -> None:
    branch = await running_playground(lab_world, run_phase, git_origin, busybox_image)
    set_playground(lab_world, stop_when_branch_gone=True)
    git_origin.delete_branch(branch)

    stopped = await run_phase(fetch_branches, lab_world)
    again = await run_phase(fetch_branches, lab_world)
    reconciled = await run_phase(reconcile_playgrounds, lab_world)

    assert stopped.actions == [f"stop playground web-main (branch {branch} is gone)"]
    assert stopped.report.findings["branch_gone"] == {"web-main": branch}
    assert stopped.report.findings["stopped"] == ["web-main"]
    assert await app_state(lab_docker) == "exited"
    assert again.actions == []
    assert again.report.findings["stopped"] == []
    assert reconciled.actions == [], "reconcile must not bring back what fetch_branches stopped"
    assert reconciled.report.findings["playgrounds"]["web-main"]["state"] == "branch_gone"
    assert await app_state(lab_docker) == "exited"


async def test_dry_run_reports_would_stop_and_changes_nothing(
    lab_world: LabWorld,
    run_phase: PhaseRunner,
    git_origin: GitOrigin,
    busybox_image: str,
    lab_docker: aiodocker.Docker,
) -> None:
    branch = await running_playground(lab_world, run_phase, git_origin, busybox_image)
    set_playground(lab_world, stop_when_branch_gone=True)
    git_origin.delete_branch(branch)

    run = await run_phase(fetch_branches, lab_world, dry_run=True)

    assert run.actions == [f"would stop playground web-main (branch {branch} is gone)"]
    assert await app_state(lab_docker) == "running"
