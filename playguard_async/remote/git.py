"""Git command lines for a Marquee, and where a playground's files live there: no I/O here.

Every command on a checkout runs as ``git -C <checkout> --git-dir=.git ...``: with the repository
named explicitly, git never walks up into an enclosing repository, so a checkout that lost its
``.git`` can never turn a ``reset --hard`` against whatever repository holds the workdir. Values
come from the validated inventory (no leading '-', shell-inert characters); ``--`` ends the options
anyway wherever git allows it.
"""

from __future__ import annotations

from playguard_async.desired_state.model import Marquee


def playground_dir(marquee: Marquee, playground: str) -> str:
    """Everything of one playground on the host lives under this directory."""
    return f"{marquee.workdir}/playgrounds/{playground}"


def checkout_dir(marquee: Marquee, playground: str) -> str:
    return f"{playground_dir(marquee, playground)}/checkout"


def ls_remote_heads(repo: str) -> list[str]:
    """Lists every branch head of ``repo``; only reads."""
    return ["git", "ls-remote", "--heads", "--", repo]


def parse_heads(listing: str) -> dict[str, str]:
    """``ls-remote --heads`` output as branch name -> commit."""
    heads: dict[str, str] = {}
    for line in listing.splitlines():
        commit, _, ref = line.partition("\t")
        if ref.startswith("refs/heads/"):
            heads[ref.removeprefix("refs/heads/")] = commit
    return heads


def clone(repo: str, branch: str, checkout: str) -> list[str]:
    """A full clone (all branches fetched), so a later change of branch is a fetch away."""
    return ["git", "clone", "--quiet", "--branch", branch, "--", repo, checkout]


def update(checkout: str, repo: str, branch: str) -> list[str]:
    """One command (one fenced write) that points origin at ``repo`` again (the playspec's repo
    may have moved since the clone), fetches, and makes the working tree exactly the fetched
    ``origin/<branch>``, discarding local edits; it stops at the first step that fails."""
    script = (
        'c=$1 repo=$2 branch=$3; g() { git -C "$c" --git-dir=.git "$@"; }; '
        'g remote set-url -- origin "$repo" && g fetch --quiet --prune origin '
        '&& g reset --quiet --hard "origin/$branch" --'
    )
    return ["sh", "-c", script, "sh", checkout, repo, branch]


def check_out(checkout: str, repo: str, commit: str) -> list[str]:
    """One write that makes the working tree exactly ``commit`` (a full commit name, checked by
    the caller), not the branch head: fetched only when the checkout does not have it yet, so a
    Playground held at a revision costs no fetch per cycle; by name when no branch has it (any
    commit the origin serves, as ``remote.rollback_check`` asks). Local edits are discarded."""
    script = (
        'c=$1 repo=$2 commit=$3; g() { git -C "$c" --git-dir=.git "$@"; }; '
        'has() { g cat-file -e "$commit^{commit}" 2>/dev/null; }; '
        '{ has || { g remote set-url -- origin "$repo" && g fetch --quiet --prune origin '
        '&& { has || g fetch --quiet origin "$commit"; }; }; } '
        '&& g reset --quiet --hard "$commit" --'
    )
    return ["sh", "-c", script, "sh", checkout, repo, commit]
