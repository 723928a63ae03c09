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
    Playground held at a revision costs no fetch per cycle. Local edits are discarded.

    The branches are fetched first; a commit no branch reaches (force-pushed away, but not yet
    collected by the origin) is then asked for by name, as ``commit_on_origin`` asks, so what
    ``pin`` found on the origin can be checked out. One the origin does not have ends it with
    ``not on origin`` in its last line of stderr, the checkout untouched. (``commit_on_origin``
    asks the same before a pin is stored, ``remote.rollback_check`` before a rollback.)"""
    script = (
        'c=$1 repo=$2 commit=$3; g() { git -C "$c" --git-dir=.git "$@"; }; '
        'have() { g cat-file -e "$commit^{commit}" 2>/dev/null; }; '
        'have || { g remote set-url -- origin "$repo" && g fetch --quiet --prune origin; } '
        "|| exit; "
        'have || g fetch --quiet --no-tags origin "$commit" 2>/dev/null || '
        '{ echo "commit $commit is not on origin $repo" >&2; exit 1; }; '
        'g reset --quiet --hard "$commit" --'
    )
    return ["sh", "-c", script, "sh", checkout, repo, commit]


# ``commit_on_origin``'s exit statuses, apart from any a shell or git exits with by itself.
ORIGIN_LACKS = 10
"""The origin answered, without that commit."""
ORIGIN_AWAY = 11
"""The origin did not answer."""
NOT_A_COMMIT = 12
"""The origin has an object of that name, but it is no commit."""

# $1 the repo, $2 the commit (``remote.rollback_check`` runs it inside its own probe). A scratch
# bare repository (removed on the way out, also on a TERM from the host's `timeout`) takes the
# commit alone (depth 1, no trees where the origin can filter them); the branches are listed
# first, so that an origin that does not answer is told from one that answers without the commit.
COMMIT_ON_ORIGIN = f"""
repo=$1 commit=$2
export GIT_TERMINAL_PROMPT=0
d=$(mktemp -d) || exit
trap 'rm -rf -- "$d"' EXIT
trap 'exit 143' TERM INT HUP
git init --quiet --bare "$d" >/dev/null || exit
git -C "$d" ls-remote --heads -- "$repo" >/dev/null || exit {ORIGIN_AWAY}
git -C "$d" fetch --quiet --depth=1 --no-tags --filter=tree:0 -- "$repo" "$commit" \
  || exit {ORIGIN_LACKS}
git -C "$d" cat-file -e "$commit^{{commit}}" 2>/dev/null || exit {NOT_A_COMMIT}
"""


def commit_on_origin(repo: str, commit: str) -> list[str]:
    """A read that asks ``repo`` for ``commit`` by name, as ``check_out`` does when no branch
    reaches it, and exits 0 when the origin has it (else ``ORIGIN_LACKS``, ``ORIGIN_AWAY`` or
    ``NOT_A_COMMIT``). It runs on the Marquee, with the Marquee's credentials for the origin,
    the way every git command of a cycle reaches it; it changes nothing there but a scratch
    directory it removes. ``ls-remote`` alone cannot say: it lists branch heads, not commits."""
    return ["sh", "-c", COMMIT_ON_ORIGIN, "sh", repo, commit]
