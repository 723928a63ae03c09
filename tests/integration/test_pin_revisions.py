"""A pin's commit against the lab's real git origin, sshd and dockerd: ``pin --revision COMMIT``
stores nothing unless the Playspec's origin has that commit (asked from the Marquee), and a pin
whose commit vanished from the origin afterwards fails its Playground alone: the Marquee's other
Playground converges in the same cycle, which ends ``unhealthy``, not ``phase_failed``."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiodocker
import pytest
from redis import Redis as SyncRedis

from playguard_async.coordination.keys import pins_key, rollback_blocked_key
from playguard_lab import GitOrigin, LabCommandFailed
from tests.support.cli import EXIT_NOT_OK, LAB_SETTINGS, Playguard
from tests.support.playgrounds import checkout_of, compose_yaml, project_containers
from tests.support.world import LabWorld

SECOND = "web-two"
SETTINGS = {**LAB_SETTINGS, "record_max_bytes": 65_536}
"""Two Playgrounds' findings and notices, whole in each cycle record."""


def head_of(git_origin: GitOrigin, world: LabWorld, playground: str) -> str:
    return git_origin.git("-C", str(checkout_of(world, playground)), "rev-parse", "HEAD").strip()


def vanish(git_origin: GitOrigin, branch: str, commit: str) -> None:
    """Force-push ``branch`` back to its parent (what a rewritten history does to ``commit``),
    then let the origin collect what no branch reaches, as its gc does in time."""
    origin = str(git_origin.path)
    git_origin.git("--git-dir", origin, "update-ref", f"refs/heads/{branch}", f"{commit}~1")
    git_origin.git("--git-dir", origin, "gc", "--quiet", "--prune=now")
    with pytest.raises(LabCommandFailed):
        git_origin.git("--git-dir", origin, "cat-file", "-e", commit)


def unreachable_commit(git_origin: GitOrigin, branch: str) -> str:
    """A commit the origin still has but no branch reaches: force-pushed away, not collected."""
    commit = git_origin.commit(branch, {"NOTES": "soon rewritten\n"}, "Rewritten soon")
    origin = str(git_origin.path)
    git_origin.git("--git-dir", origin, "update-ref", f"refs/heads/{branch}", f"{commit}~1")
    return commit


def collected_commit(git_origin: GitOrigin, branch: str) -> str:
    commit = git_origin.commit(branch, {"NOTES": "collected soon\n"}, "Collected soon")
    vanish(git_origin, branch, commit)
    return commit


def tree_of_head(git_origin: GitOrigin, branch: str) -> str:
    return git_origin.git("--git-dir", str(git_origin.path), "rev-parse", f"{branch}^{{tree}}")


def branch_head(git_origin: GitOrigin, branch: str) -> str:
    return git_origin.git("ls-remote", git_origin.url, branch).split()[0]


NOT_ON_ORIGIN = "commit {commit}: not on origin {origin} (pin refused; asked from marquee edge-1"

# revision kind -> (how to name it, exit status, what stderr says; {commit}, {origin} filled in)
REVISIONS: dict[str, tuple[Callable[[GitOrigin, str], str], int, str]] = {
    "missing, 40 hex": (lambda origin, branch: "deadbeef" * 5, 1, NOT_ON_ORIGIN),
    "missing, 64 hex": (lambda origin, branch: "ab" * 32, 1, NOT_ON_ORIGIN),
    "force-pushed away and collected": (collected_commit, 1, NOT_ON_ORIGIN),
    "a tree, not a commit": (tree_of_head, 1, "has an object of that name, but not a commit"),
    "its branch head": (branch_head, 0, ""),
    "force-pushed away, not collected yet": (unreachable_commit, 0, ""),
    "last-good": (lambda origin, branch: "last-good", 0, ""),
}


@pytest.mark.parametrize("kind", REVISIONS)
def test_pin_stores_a_commit_only_when_the_origin_has_it(
    playguard: Playguard, lab: LabWorld, git_origin: GitOrigin, store: SyncRedis, kind: str
) -> None:
    name, status, said = REVISIONS[kind]
    branch = lab.data["playgrounds"][0]["branch"]
    revision = name(git_origin, branch).strip()

    done = playguard("pin", "edge-1", "web-main", "--revision", revision, "--reason", "hold it")

    assert done.returncode == status, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    stored = store.hget(pins_key("edge-1"), "web-main")
    if status == 0:
        assert done.stdout.startswith(f"edge-1/web-main: pinned at {revision} by ")
        assert json.loads(stored or b"{}")["revision"] == revision
    else:
        assert done.stderr.startswith("Error: edge-1/web-main: "), done.stderr
        assert said.format(commit=revision, origin=git_origin.url) in done.stderr
        assert stored is None
        assert done.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ("origin gone", "cannot tell: origin {origin} does not answer from marquee edge-1"),
        ("marquee away", "marquee edge-1, which asks the origin, cannot be used: "),
    ],
)
def test_pin_refuses_a_commit_it_cannot_check_and_says_why(
    playguard: Playguard, lab: LabWorld, git_origin: GitOrigin, store: SyncRedis, tmp_path: Path,
    change: str, said: str,
) -> None:  # fmt: skip
    commit = git_origin.git("ls-remote", git_origin.url, "main").split()[0]
    origin = git_origin.url
    if change == "origin gone":
        origin = (tmp_path / "no-such-origin.git").as_uri()
        lab.data["playspecs"][0]["repo"] = origin
    else:
        lab.data["marquees"][0]["identity_file"] = str(tmp_path / "no-such-key")
    playguard.configure(lab.data, **LAB_SETTINGS)

    done = playguard("pin", "edge-1", "web-main", "--revision", commit, "--reason", "hold it")

    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith(f"Error: edge-1/web-main: commit {commit}: "), done.stderr
    assert said.format(origin=origin) in done.stderr
    assert "Traceback" not in done.stderr
    assert store.hget(pins_key("edge-1"), "web-main") is None


def last_record(store: SyncRedis) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(store.get("playguard:cycles:{edge-1}:last") or b"{}")
    return record


async def test_a_pin_whose_commit_vanished_fails_its_playground_and_the_other_converges(
    playguard: Playguard, lab: LabWorld, git_origin: GitOrigin, store: SyncRedis,
    lab_docker: aiodocker.Docker, busybox_image: str,
) -> None:  # fmt: skip
    """Two Playgrounds of one Marquee on one branch; web-main pinned at a commit that exists
    when the pin is taken, then is force-pushed away and collected; the branch head moves. The
    next cycle moves web-two to the new head and brings it up; web-main keeps its checkout and
    its container, its reason noticed, and the cycle ends ``unhealthy`` (exit 4); the cycle
    after that is the same and changes nothing more."""
    branch = lab.data["playgrounds"][0]["branch"]
    lab.data["playgrounds"].append(
        {"name": SECOND, "playspec": "web", "marquee": "edge-1", "branch": branch}
    )
    playguard.configure(lab.data, **SETTINGS)
    first = playguard("cycle", "edge-1", timeout=180.0)
    assert first.returncode == 0, first.stdout + first.stderr
    was = head_of(git_origin, lab, "web-main")
    [before] = await project_containers(lab_docker)
    doomed = git_origin.commit(f"{branch}-doomed", {"NOTES": "doomed\n"}, "Doomed")
    pinned = playguard("pin", "edge-1", "web-main", "--revision", doomed, "--reason", "try it")
    assert pinned.returncode == 0, pinned.stdout + pinned.stderr
    vanish(git_origin, f"{branch}-doomed", doomed)
    new_head = git_origin.commit(
        branch, {"compose.yaml": compose_yaml(busybox_image, sleep="86401")}, "Move the head"
    )

    failing = playguard("cycle", "edge-1", timeout=180.0)
    record = last_record(store)
    again = playguard("cycle", "edge-1", timeout=180.0)
    [after] = await project_containers(lab_docker)
    [second] = await project_containers(lab_docker, SECOND)

    assert failing.returncode == EXIT_NOT_OK, failing.stdout + failing.stderr
    assert record["outcome"] == "unhealthy"
    assert record["phase"] == "sync_git"
    assert record["reason"] == "playground web-main not at the revision it is held at"
    [failed] = [n for n in record["notices"]["sync_git"] if n["kind"] == "failed"]
    assert failed["subject"] == "web-main"
    assert failed["detail"].startswith(
        f"cannot be held at {doomed[:12]} (pinned at {doomed[:12]} by "
    )
    assert f"commit {doomed} is not on origin {git_origin.url}" in failed["detail"]
    assert record["findings"]["sync_git"]["heads"] == {"web-main": was, SECOND: new_head}
    found = record["findings"]["reconcile_playgrounds"]["playgrounds"]
    assert found["web-main"]["state"] == "not_held"
    assert found["web-main"]["actions"] == []
    assert found[SECOND]["state"] == "running"
    assert found[SECOND]["health"] == "healthy"
    assert f"compose up playground {SECOND}" in failing.stdout
    assert head_of(git_origin, lab, SECOND) == new_head
    assert second["Config"]["Cmd"] == ["sleep", "86401"]
    assert head_of(git_origin, lab, "web-main") == was
    assert (after["Id"], after["State"]["StartedAt"]) == (
        before["Id"],
        before["State"]["StartedAt"],
    )
    assert again.returncode == EXIT_NOT_OK, again.stdout + again.stderr
    assert "0 actions taken" in again.stdout
    assert "Traceback" not in failing.stdout + failing.stderr + again.stdout + again.stderr


async def test_a_rollback_to_a_commit_gone_from_origin_and_host_fails_its_playground_alone(
    playguard: Playguard, lab: LabWorld, git_origin: GitOrigin, store: SyncRedis,
    lab_docker: aiodocker.Docker, busybox_image: str,
) -> None:  # fmt: skip
    """Under ``rollback: auto``: web-main's branch is rewritten to a release that fails its
    gate, its last good commit collected from the origin, and its checkout made again (a host
    rebuilt), so that commit is nowhere; web-two's head moves meanwhile. The cycle brings the
    bad release up, finds before the rollback's first write that its commit cannot be had,
    changes nothing for it and says so; web-two converges, and the cycle ends ``unhealthy``;
    so does the next, which finds the same. A one-off ``cycle`` tells no one (no webhook), so
    each shows the notice and neither records it as told: the daemon's next cycle tells it,
    once (``test_revision_rollback.py``)."""
    lab.data["playspecs"][0].update(rollback="auto", health_timeout=8)
    branch = lab.data["playgrounds"][0]["branch"]
    other = f"{branch}-two"
    git_origin.commit(other, {"compose.yaml": compose_yaml(busybox_image)}, "Second branch")
    lab.data["playgrounds"].append(
        {"name": SECOND, "playspec": "web", "marquee": "edge-1", "branch": other}
    )
    playguard.configure(lab.data, **SETTINGS)
    first = playguard("cycle", "edge-1", timeout=180.0)
    assert first.returncode == 0, first.stdout + first.stderr
    good = head_of(git_origin, lab, "web-main")
    bad = git_origin.commit(
        f"{branch}-bad", {"compose.yaml": compose_yaml(busybox_image, healthcheck=True)}, "Bad"
    )
    origin = str(git_origin.path)
    git_origin.git("--git-dir", origin, "update-ref", f"refs/heads/{branch}", bad)
    git_origin.delete_branch(f"{branch}-bad")
    git_origin.git("--git-dir", origin, "gc", "--quiet", "--prune=now")
    shutil.rmtree(checkout_of(lab, "web-main"))
    new_head = git_origin.commit(other, {"NOTES": "moved\n"}, "Move the second head")

    failing = playguard("cycle", "edge-1", timeout=180.0)
    record = last_record(store)
    again = playguard("cycle", "edge-1", timeout=180.0)
    later = last_record(store)

    assert failing.returncode == EXIT_NOT_OK, failing.stdout + failing.stderr
    assert record["outcome"] == "unhealthy", record
    assert record["phase"] == "reconcile_playgrounds"
    missing = f"commit {good[:12]} is neither in the checkout nor served by its origin"
    assert record["reason"] == f"playground web-main not rolled back: {missing}"
    found = record["findings"]["reconcile_playgrounds"]["playgrounds"]
    assert found["web-main"]["rollback_blocked"] == missing
    assert not any(
        "compose up playground web-main (roll back" in a for a in found["web-main"]["actions"]
    )
    assert found[SECOND]["state"] == "running"
    assert head_of(git_origin, lab, SECOND) == new_head
    assert head_of(git_origin, lab, "web-main") == bad
    assert again.returncode == EXIT_NOT_OK, again.stdout + again.stderr
    assert later["outcome"] == "unhealthy"
    told = [
        [(n["subject"], n["detail"]) for n in each["notices"]["reconcile_playgrounds"]
         if n["kind"] == "rollback_blocked"]
        for each in (record, later)
    ]  # fmt: skip
    assert told == [[("web-main", missing)]] * 2, "shown by each one-off cycle, told by none"
    assert not store.exists(rollback_blocked_key("edge-1")), "recorded as told by no cycle"
    assert "Traceback" not in failing.stdout + failing.stderr + again.stdout + again.stderr
