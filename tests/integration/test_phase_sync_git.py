"""sync_git against the lab: a real origin, cloned and updated over SSH on the lab's host."""

from __future__ import annotations

import pytest

from playguard_async.phases.sync_git import sync_git
from playguard_async.remote.errors import RemoteCommandFailed
from tests.support.edge import LabEdge
from tests.support.playgrounds import checkout_head, checkout_of, set_playground

pytestmark = pytest.mark.integration


def origin_head(edge: LabEdge, branch: str) -> str:
    return edge.origin.git("rev-parse", f"refs/heads/{branch}", cwd=edge.origin.path).strip()


async def test_fresh_clone_converges_then_costs_nothing(edge: LabEdge) -> None:
    branch = edge.own_branch()

    first = await edge.run(sync_git)
    second = await edge.run(sync_git)

    head = origin_head(edge, branch)
    assert first.actions == [f"clone {edge.origin.url} branch {branch} for playground web-main"]
    assert checkout_head(edge.origin, edge.world) == head
    assert first.report.findings == {
        "heads": {"web-main": head},
        "branch_gone": {},
        "held": {},
        "unheld": {},
    }
    assert second.actions == []
    assert second.report.findings == first.report.findings


async def test_new_commit_in_origin_is_picked_up(edge: LabEdge) -> None:
    branch = edge.own_branch()
    await edge.run(sync_git)
    old = checkout_head(edge.origin, edge.world)
    (checkout_of(edge.world) / "compose.yaml").write_text("edited on the host\n")
    new = edge.origin.commit(branch, {"NOTES": "second commit\n"}, "Second commit")

    updated = await edge.run(sync_git)
    again = await edge.run(sync_git)

    assert updated.actions == [f"update playground web-main from {old[:12]} to {new[:12]}"]
    assert checkout_head(edge.origin, edge.world) == new
    assert (checkout_of(edge.world) / "NOTES").read_text() == "second commit\n"
    assert "edited on the host" not in (checkout_of(edge.world) / "compose.yaml").read_text()
    assert updated.report.findings["heads"] == {"web-main": new}
    assert again.actions == []


async def test_deleted_branch_is_reported_and_checkout_kept(edge: LabEdge) -> None:
    branch = edge.own_branch()
    await edge.run(sync_git)
    head = checkout_head(edge.origin, edge.world)
    edge.origin.delete_branch(branch)

    gone = await edge.run(sync_git)

    assert gone.actions == []
    assert gone.report.findings == {
        "heads": {"web-main": head},
        "branch_gone": {"web-main": branch},
        "held": {},
        "unheld": {},
    }
    assert checkout_head(edge.origin, edge.world) == head


async def test_dry_run_reports_would_and_changes_nothing(edge: LabEdge) -> None:
    branch = edge.own_branch()

    fresh = await edge.run(sync_git, dry_run=True)
    assert fresh.actions == [
        f"would clone {edge.origin.url} branch {branch} for playground web-main"
    ]
    assert not checkout_of(edge.world).exists()

    await edge.run(sync_git)
    old = checkout_head(edge.origin, edge.world)
    new = edge.origin.commit(branch, {"NOTES": "second commit\n"}, "Second commit")
    behind = await edge.run(sync_git, dry_run=True)

    assert behind.actions == [f"would update playground web-main from {old[:12]} to {new[:12]}"]
    assert checkout_head(edge.origin, edge.world) == old


async def test_repo_that_does_not_exist_fails_naming_host_status_and_stderr(
    edge: LabEdge,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    missing = tmp_path_factory.mktemp("no-repo") / "missing.git"
    edge.world.data["playspecs"][0]["repo"] = missing.as_uri()
    set_playground(edge.world, branch="main")

    with pytest.raises(RemoteCommandFailed) as failed:
        await edge.run(sync_git)

    assert failed.value.argv[:2] == ["git", "ls-remote"]
    assert failed.value.exit_status == 128
    assert "does not appear to be a git repository" in failed.value.stderr_tail
    assert "edge-1" in str(failed.value)
    assert "exited 128" in str(failed.value)
    assert not checkout_of(edge.world).exists()
