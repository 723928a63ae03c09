"""What a dry run's host would be after the writes it only listed, so that the phases after
them plan what the cycle will do, not what it would do on a host left as it is.

A cycle's ``sync_git`` moves a checkout (a new commit on the branch, a hold at a commit) and
``pull_images`` moves an image behind a tag before ``reconcile_playgrounds`` reads the host; a
dry run writes neither, so a plan that read the host as it is listed the ``update`` or the
``pull`` and not the ``compose up`` that follows it.

- A checkout the dry run would move (``RemoteSession.planned_commits``): ``planned_states`` asks
  the host, with ONE read per such checkout, for the compose file at that commit and compose's
  answers for it (``config --services``, ``config --hash``). The commit's objects come from the
  checkout's own repository where it has them, else from the origin, fetched by name (as
  ``git.COMMIT_ON_ORIGIN`` does) into a scratch bare repository that borrows the checkout's
  objects (``objects/info/alternates``) and is removed on the way out: the checkout, its refs
  and its working tree are not touched. (Fetching into the checkout's remote refs would have
  done as well for the cycle, which fetches anyway, but it is a write outside the fence, and a
  plan changes nothing.) Compose reads the copy of the file with the checkout as its project
  directory, so relative paths and the checkout's ``.env`` (untracked: the cycle's ``reset
  --hard`` keeps it) resolve as they will after the update.
- An image the dry run would pull (``RemoteSession.pulled``): its ID after the pull is not known
  before it (the registry names the manifest, the host names the image), so
  ``planned_image_ids`` gives it a stand-in no image has: the Playground's inputs then differ
  from its last verified ones, as they will, and the containers created from that reference run
  another image than the one it names, which ``container_drift.image_drift`` finds, as it finds
  the pulled image's in the cycle: the plan's ``compose up`` is the cycle's, under compose 1.29
  and v2 alike.

What a plan cannot foretell is said in the docs (concepts/steering.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from playguard_async.remote.compose import ComposeProject, parse_config_hashes, parse_services
from playguard_async.remote.errors import RemoteCommandFailed
from playguard_async.remote.host_state import ComposeState
from playguard_async.remote.registry import was_pulled
from playguard_async.remote.ssh import RemoteSession

# $1 the checkout, $2 the repo, $3 the commit, $4 the compose file (relative to the checkout),
# $5 the override; then the project's compose command (``ComposeProject.command``). Prints the
# SHA-256 of the compose file at that commit, the services, "hashes", then the config hashes, or
# "hashes-failed" when compose cannot give them (an override written for other services: the
# cycle rewrites it, and ``up``s, whatever the hashes).
_PLANNED_SCRIPT = r"""
c=$1 repo=$2 commit=$3 file=$4 override=$5; shift 5
export GIT_TERMINAL_PROMPT=0
d=$(mktemp -d) || exit
trap 'rm -rf -- "$d"' EXIT
trap 'exit 143' TERM INT HUP
git init --quiet --bare "$d/git" >/dev/null || exit
[ -d "$c/.git/objects" ] && printf '%s\n' "$c/.git/objects" > "$d/git/objects/info/alternates"
git -C "$d/git" cat-file -e "$commit^{commit}" 2>/dev/null \
  || git -C "$d/git" fetch --quiet --no-tags -- "$repo" "$commit" || exit
git -C "$d/git" show "$commit:$file" > "$d/compose" || exit
sha256sum < "$d/compose" | cut -d' ' -f1
"$@" -f "$d/compose" config --services || exit
echo hashes
"$@" -f "$d/compose" -f "$override" config --hash='*' 2>/dev/null || echo hashes-failed
exit 0
"""


async def planned_states(
    session: RemoteSession,
    states: Mapping[str, ComposeState],
    projects: Sequence[ComposeProject],
    repos: Mapping[str, str],
) -> dict[str, ComposeState]:
    """``states`` with those of the checkouts this dry run would move as the cycle will find
    them (the others, and all of them outside a dry run, as they are); ``repos`` playground ->
    its repo. Raises ``RemoteCommandFailed`` when the commit or its compose file cannot be had
    (the cycle's own update would fail on the same)."""
    planned = dict(states)
    if not session.dry_run:
        return planned
    for project in projects:
        commit = session.planned_commits.get(project.playground)
        if commit is None:
            continue
        argv = [
            "sh", "-c", _PLANNED_SCRIPT, "sh", project.checkout, repos[project.playground],
            commit, project.compose_file, project.override, *project.command(),
        ]  # fmt: skip
        result = await session.run(argv)
        digest, _, rest = result.stdout.partition("\n")
        services, _, hashes = rest.partition("hashes\n")
        if len(digest) != 64:
            raise RemoteCommandFailed(
                session.host, argv, result.exit_status, result.stdout[-300:],
                what="read the compose file at the commit the checkout would be at",
            )  # fmt: skip
        planned[project.playground] = states[project.playground].planned(
            commit,
            compose_digest=digest,
            services=parse_services(services),
            hashes={} if hashes.startswith("hashes-failed") else parse_config_hashes(hashes),
        )
    return planned


def planned_image_ids(session: RemoteSession, now: Mapping[str, str]) -> dict[str, str]:
    """``now`` (reference -> the ID of the image behind it on the host) as the cycle will find
    it: in a dry run, a reference it would pull stands for an image not known yet."""
    if not session.dry_run:
        return dict(now)
    return {ref: f"pulled {ref}" if was_pulled(session, ref) else id_ for ref, id_ in now.items()}
