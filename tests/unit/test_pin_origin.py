"""Whether an origin has a commit, the pieces without a Marquee: the two git scripts run here
against a local bare origin (real git, the commands a Marquee runs), and what the pin command
makes of the check's answer, whatever the host printed."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from playguard_async.operator.pin_origin import origin_problem
from playguard_async.remote import git
from playguard_async.remote.ssh import CommandResult
from playguard_lab import GitOrigin

ENV = {
    **os.environ,
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
}


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=60, check=False)


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> GitOrigin:
    """One origin for the module: each test's commits are pushed to ``main`` and force-pushed
    away again, so ``main`` stays where it was."""
    return GitOrigin(tmp_path_factory.mktemp("git"), "registry.invalid/app:1")


def rewritten(origin: GitOrigin, *, collected: bool) -> str:
    """A commit pushed to ``main``, then force-pushed away; ``collected``: gone from the origin
    too, as its gc does in time."""
    commit = origin.commit("main", {"NOTES": "rewritten\n"}, "Rewritten soon")
    origin.git("--git-dir", str(origin.path), "update-ref", "refs/heads/main", f"{commit}~1")
    if collected:
        origin.git("--git-dir", str(origin.path), "gc", "--quiet", "--prune=now")
    return commit


CASES: dict[str, tuple[Callable[[GitOrigin], tuple[str, str]], int]] = {
    "a branch head": (lambda o: (o.url, o.git("--git-dir", str(o.path), "rev-parse", "main")), 0),
    "on no branch, not collected": (lambda o: (o.url, rewritten(o, collected=False)), 0),
    "on no branch, collected": (lambda o: (o.url, rewritten(o, collected=True)), git.ORIGIN_LACKS),
    "never made, 40 hex": (lambda o: (o.url, "deadbeef" * 5), git.ORIGIN_LACKS),
    "never made, 64 hex": (lambda o: (o.url, "ab" * 32), git.ORIGIN_LACKS),
    "a tree": (
        lambda o: (o.url, o.git("--git-dir", str(o.path), "rev-parse", "main^{tree}")),
        git.NOT_A_COMMIT,
    ),
    "no origin there": (
        lambda o: ((o.workdir / "none.git").as_uri(), "deadbeef" * 5),
        git.ORIGIN_AWAY,
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_commit_on_origin_tells_each_kind_of_commit_apart_and_leaves_no_scratch(
    origin: GitOrigin, tmp_path: Path, case: str
) -> None:
    name, status = CASES[case]
    repo, commit = name(origin)
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    done = subprocess.run(
        git.commit_on_origin(repo, commit.strip()),
        capture_output=True, text=True, env={**ENV, "TMPDIR": str(scratch)}, timeout=60,
        check=False,
    )  # fmt: skip

    assert done.returncode == status, done.stderr
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize("collected", [False, True])
def test_check_out_fetches_a_commit_no_branch_reaches_and_refuses_one_the_origin_lacks(
    origin: GitOrigin, tmp_path: Path, collected: bool
) -> None:
    """A clone made before the commit was pushed: it gets one the origin still has by name; one
    the origin collected ends it with one line saying so, its checkout where it was."""
    checkout = tmp_path / "checkout"
    run(["git", "clone", "--quiet", "--branch", "main", "--", origin.url, str(checkout)])
    was = run(["git", "-C", str(checkout), "rev-parse", "HEAD"]).stdout.strip()
    commit = rewritten(origin, collected=collected)

    done = run(git.check_out(str(checkout), origin.url, commit))
    now = run(["git", "-C", str(checkout), "rev-parse", "HEAD"]).stdout.strip()

    if collected:
        assert done.returncode != 0
        assert done.stderr.splitlines()[-1] == f"commit {commit} is not on origin {origin.url}"
        assert now == was
    else:
        assert done.returncode == 0, done.stderr
        assert now == commit


REPO = "ssh://git@git.example/shop.git"

ANSWERS = [
    (0, "warning: filtering not recognized by server, ignoring", None),
    (git.ORIGIN_LACKS, "fatal: git upload-pack: not our ref d",
     f"not on origin {REPO} (pin refused; asked from marquee m1: fatal: git upload-pack: not our "
     "ref d)"),
    (git.NOT_A_COMMIT, "", f"origin {REPO} has an object of that name, but not a commit"),
    (git.ORIGIN_AWAY, "fatal: Could not read from remote repository.\n\nPlease make sure\n",
     f"cannot tell: origin {REPO} does not answer from marquee m1: Please make sure"),
    (127, "sh: 1: git: not found",
     f"cannot tell whether origin {REPO} has it: the check on marquee m1 exited 127: sh: 1: git: "
     "not found"),
    (None, "", "the check on marquee m1 exited None: no message"),
]  # fmt: skip


@pytest.mark.parametrize(("status", "stderr", "said"), ANSWERS)
def test_origin_problem_names_the_origin_and_what_git_said_last(
    status: int | None, stderr: str, said: str | None
) -> None:
    problem = origin_problem(CommandResult([], status, "", stderr), REPO, "m1")

    if said is None:
        assert problem is None
    else:
        assert problem is not None
        assert said in problem


@given(
    status=st.sampled_from([git.ORIGIN_LACKS, git.ORIGIN_AWAY, 1, 128, None]),
    stderr=st.text(max_size=2000),
)
def test_origin_problem_is_one_bounded_line_whatever_the_host_printed(
    status: int | None, stderr: str
) -> None:
    problem = origin_problem(CommandResult([], status, "", stderr), REPO, "m1")

    assert problem is not None
    assert problem.splitlines() == [problem]
    assert len(problem) <= 400
