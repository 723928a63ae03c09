"""sync_git against the lab: a real origin, cloned and updated over SSH on the lab's host."""

from __future__ import annotations

import pytest

from playguard_async.lab import GitOrigin
from playguard_async.phases.sync_git import sync_git
from playguard_async.remote.errors import RemoteCommandFailed
from tests.support.playgrounds import checkout_head, checkout_of, set_playground, use_own_branch
from tests.support.world import LabWorld, PhaseRunner

pytestmark = pytest.mark.integration


def origin_head(git_origin: GitOrigin, branch: str) -> str:
    return git_origin.git("rev-parse", f"refs/heads/{branch}", cwd=git_origin.path).strip()


async def test_fresh_clone_converges_then_costs_nothing(
    lab_world: LabWorld, run_phase: PhaseRunner, git_origin: GitOrigin, busybox_image: str
) -> None:
    branch = use_own_branch(lab_world, git_origin, busybox_image)

    first = await run_phase(sync_git, lab_world)
    second = await run_phase(sync_git, lab_world)

    head = origin_head(git_origin, branch)
    assert first.actions == [f"clone {git_origin.url} branch {branch} for playground web-main"]
    assert checkout_head(git_origin, lab_world) == head
    assert first.report.findings == {"heads": {"web-main": head}, "branch_gone": {}}
    assert second.actions == []
    assert second.report.findings == first.report.findings


async def test_new_commit_in_origin_is_picked_up(
    lab_world: LabWorld, run_phase: PhaseRunner, git_origin: GitOrigin, busybox_image: str
) -> None:
    branch = use_own_branch(lab_world, git_origin, busybox_image)
    await run_phase(sync_git, lab_world)
    old = checkout_head(git_origin, lab_world)
    (checkout_of(lab_world) / "compose.yaml").write_text("edited on the host\n")
    new = git_origin.commit(branch, {"NOTES": "second commit\n"}, "Second commit")

    updated = await run_phase(sync_git, lab_world)
    again = await run_phase(sync_git, lab_world)

    assert updated.actions == [f"update playground web-main from {old[:12]} to {new[:12]}"]
    assert checkout_head(git_origin, lab_world) == new
    assert (checkout_of(lab_world) / "NOTES").read_text() == "second commit\n"
    assert "edited on the host" not in (checkout_of(lab_world) / "compose.yaml").read_text()
    assert updated.report.findings["heads"] == {"web-main": new}
    assert again.actions == []


async def test_deleted_branch_is_reported_and_checkout_kept(
    lab_world: LabWorld, run_phase: PhaseRunner, git_origin: GitOrigin, busybox_image: str
) -> None:
    branch = use_own_branch(lab_world, git_origin, busybox_image)
    await run_phase(sync_git, lab_world)
    head = checkout_head(git_origin, lab_world)
    git_origin.delete_branch(branch)

    gone = await run_phase(sync_git, lab_world)

    assert gone.actions == []
    assert gone.report.findings == {
        "heads": {"web-main": head},
        "branch_gone": {"web-main": branch},
    }
    assert checkout_head(git_origin, lab_world) == head


async def test_dry_run_reports_would_and_changes_nothing(
    lab_world: LabWorld, run_phase: PhaseRunner, git_origin: GitOrigin, busybox_image: str
) -> None:
    branch = use_own_branch(lab_world, git_origin, busybox_image)

    fresh = await run_phase(sync_git, lab_world, dry_run=True)
    assert fresh.actions == [
        f"would clone {git_origin.url} branch {branch} for playground web-main"
    ]
    assert not checkout_of(lab_world).exists()

    await run_phase(sync_git, lab_world)
    old = checkout_head(git_origin, lab_world)
    new = git_origin.commit(branch, {"NOTES": "second commit\n"}, "Second commit")
    behind = await run_phase(sync_git, lab_world, dry_run=True)

    assert behind.actions == [f"would update playground web-main from {old[:12]} to {new[:12]}"]
    assert checkout_head(git_origin, lab_world) == old


async def test_repo_that_does_not_exist_fails_naming_host_status_and_stderr(
    lab_world: LabWorld, run_phase: PhaseRunner, tmp_path_factory: pytest.TempPathFactory
) -> None:
    missing = tmp_path_factory.mktemp("no-repo") / "missing.git"
    lab_world.data["playspecs"][0]["repo"] = missing.as_uri()
    set_playground(lab_world, branch="main")

    with pytest.raises(RemoteCommandFailed) as failed:
        await run_phase(sync_git, lab_world)

    assert failed.value.argv[:2] == ["git", "ls-remote"]
    assert failed.value.exit_status == 128
    assert "does not appear to be a git repository" in failed.value.stderr_tail
    assert "edge-1" in str(failed.value)
    assert "exited 128" in str(failed.value)
    assert not checkout_of(lab_world).exists()
