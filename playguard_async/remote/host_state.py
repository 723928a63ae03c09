"""The host's state a converged cycle needs, read in a constant number of round trips, and
compose's answers asked only when what they depend on changed.

A converged Marquee used to cost four commands per Playground per cycle (``rev-parse``, ``cat``
of the override, ``config --services``, ``config --hash``; compose is a Python program, and
bench/README.md has what that cost the host). Now:

- ``playground_files``: ONE command reads, for every Playground of the Marquee, the commit its
  checkout is at, a digest of its working tree's changes against that commit (tracked and
  untracked files, by content), and the SHA-256 of its compose file, our override and the
  project's ``.env``. The answer serves every phase of the cycle until the session's next write.
- ``images_digest``: ONE Engine API call lists the host's images (compose 1.29 puts the image's
  ID into the config hash, so a re-pulled tag must count as a change).
- ``ComposeState``: a Playground's ``config --services`` and ``config --hash`` answers, from the
  replica's ``ComposeMemo`` when the digest of everything they are computed from is the one they
  were computed for, else from compose (and remembered). That digest covers the compose command,
  the project's name, directory and files, the checkout's commit and changes, the compose file,
  the override, ``.env``, the host's images and the IDs of the project's containers. So a changed
  file, a changed or deleted override, a new commit, a local edit, a re-pulled image or a
  replaced container asks compose again; a missing or exited container, or one whose config-hash
  label differs from the answer, is drift as before, whatever the memo holds.

Not covered (compose reads them, but nothing here sees them change): files outside the checkout
that the compose file names (an ``env_file`` by absolute path), ignored files other than
``.env``, the SSH user's environment, and an upgrade of compose itself. Restarting the replica,
or ``compose_memo_size = 0``, asks compose every cycle again.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from playguard_async.remote.compose import (
    ComposeProject,
    parse_config_hashes,
    parse_services,
)
from playguard_async.remote.docker import docker_config_dir, query
from playguard_async.remote.errors import RemoteCommandFailed
from playguard_async.remote.memo import ComposeAnswer
from playguard_async.remote.ssh import RemoteSession

ABSENT = "-"

# $@: the checkouts, "--", then the files to hash. Per checkout one line
# "<.git present: 1|0> <commit or -> <clean | digest of the changes>": `git status` (no optional
# locks: it must not even refresh the index) gives the commit and whether anything changed; only
# then are the changes (diff against HEAD, untracked files' content) hashed. Then "files" and
# sha256sum's "<digest>  <path>" lines for the files that exist.
_READ_SCRIPT = r"""
export GIT_OPTIONAL_LOCKS=0
nl='
'
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    c=$1; shift
    [ -e "$c/.git" ] && g=1 || g=0
    if s=$(git -C "$c" --git-dir=.git status --porcelain=v2 --branch \
           --untracked-files=all 2>/dev/null); then
        h=${s#\# branch.oid }; h=${h%%"$nl"*}
        case "$nl$s" in
        *"$nl"[!#]*)
            d=$( { printf '%s\n' "$s"; git -C "$c" --git-dir=.git diff --binary HEAD --;
                   cd "$c" && git --git-dir=.git ls-files -z --others --exclude-standard \
                   | xargs -0r cat --; } 2>&1 | sha256sum); d=${d%% *} ;;
        *) d=clean ;;
        esac
        printf '%s %s %s\n' "$g" "$h" "$d"
    else
        printf '%s - -\n' "$g"
    fi
done
shift
echo files
[ $# -eq 0 ] || sha256sum -- "$@" 2>/dev/null
exit 0
"""

_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_DIGEST = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class PlaygroundFiles:
    """What one Playground's files on the host are now."""

    git_present: bool
    head: str | None
    """The checkout's commit; None when there is no usable checkout (no .git, no commit)."""
    changes: str
    """``clean``, or a digest of the working tree's changes against ``head``."""
    digests: dict[str, str]
    """Path -> SHA-256, for the compose file, the override and ``.env`` where they exist."""

    def digest(self, path: str) -> str:
        return self.digests.get(path, ABSENT)


def _env_path(project: ComposeProject) -> str:
    return f"{project.checkout}/.env"


async def playground_files(
    session: RemoteSession, projects: Sequence[ComposeProject]
) -> dict[str, PlaygroundFiles]:
    """Playground -> its files, for all ``projects`` in one command, once per cycle until the
    session writes. Raises ``RemoteCommandFailed`` on an answer not of the expected form."""
    key = ("playground-files", tuple((p.checkout, p.compose_path, p.override) for p in projects))

    async def read() -> dict[str, PlaygroundFiles]:
        if not projects:
            return {}
        files = [path for p in projects for path in (p.compose_path, p.override, _env_path(p))]
        argv = ["sh", "-c", _READ_SCRIPT, "sh", *(p.checkout for p in projects), "--", *files]
        result = await session.run(argv)
        try:
            return _parse_files(projects, result.stdout)
        except ValueError as exc:
            raise RemoteCommandFailed(
                session.host, argv, result.exit_status, str(exc), what="read playground files"
            ) from None

    return await session.read_once(key, read)


def _parse_files(projects: Sequence[ComposeProject], output: str) -> dict[str, PlaygroundFiles]:
    """The read script's answer; ``ValueError`` naming the line that is not of its form."""
    lines = output.splitlines()
    if len(lines) <= len(projects) or lines[len(projects)] != "files":
        raise ValueError(f"unexpected answer {output[:200]!r}")
    digests: dict[str, str] = {}
    for line in lines[len(projects) + 1 :]:
        digest, separator, path = line.partition("  ")
        if not separator or not _DIGEST.fullmatch(digest):
            raise ValueError(f"unexpected file digest line {line[:200]!r}")
        digests[path] = digest
    found: dict[str, PlaygroundFiles] = {}
    for project, line in zip(projects, lines, strict=False):
        fields = line.split(" ")
        if (
            len(fields) != 3
            or fields[0] not in ("0", "1")
            or not (fields[1] in (ABSENT, "(initial)") or _COMMIT.fullmatch(fields[1]))
            or not (fields[2] in (ABSENT, "clean") or _DIGEST.fullmatch(fields[2]))
        ):
            raise ValueError(f"unexpected checkout state of {project.playground}: {line[:200]!r}")
        paths = (project.compose_path, project.override, _env_path(project))
        found[project.playground] = PlaygroundFiles(
            git_present=fields[0] == "1",
            head=fields[1] if _COMMIT.fullmatch(fields[1]) else None,
            changes=fields[2],
            digests={path: digests[path] for path in paths if path in digests},
        )
    return found


async def host_images(session: RemoteSession) -> list[dict[str, Any]]:
    """The host's images (``images/json``), once per cycle until the session writes: one Engine
    API call shared by the readers below."""

    async def read() -> list[dict[str, Any]]:
        return list(await query(session, "images/json"))

    return list(await session.read_once("images", read))


async def images_digest(session: RemoteSession) -> str:
    """A digest of the host's images (ID, tags, digests)."""
    listed = sorted(
        json.dumps([str(image.get(field)) for field in ("Id", "RepoTags", "RepoDigests")])
        for image in await host_images(session)
    )
    return hashlib.sha256("\n".join(listed).encode()).hexdigest()


async def image_ids(session: RemoteSession, references: Sequence[str]) -> dict[str, str]:
    """Reference -> the ID of the image behind it on the host (``-`` where it has none); a
    reference without a tag or digest means ``:latest``, as for docker."""
    found: dict[str, str] = {}
    for image in await host_images(session):
        for name in [*(image.get("RepoTags") or []), *(image.get("RepoDigests") or [])]:
            found[str(name)] = str(image.get("Id"))
    return {
        reference: found.get(reference) or found.get(f"{reference}:latest") or ABSENT
        for reference in references
    }


async def pinned_references(session: RemoteSession, ids: Sequence[str]) -> dict[str, str]:
    """Image ID -> a reference that names exactly that image: its first repo digest
    (``repo@sha256:...``), else the ID itself (an image never pushed nor pulled has none)."""
    digests = {
        str(image.get("Id")): sorted(image.get("RepoDigests") or [])
        for image in await host_images(session)
    }
    return {image_id: (digests.get(image_id) or [image_id])[0] for image_id in ids}


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class ComposeState:
    """One Playground's compose answers for one cycle; see the module's docstring."""

    def __init__(
        self,
        session: RemoteSession,
        project: ComposeProject,
        files: PlaygroundFiles,
        images: str,
        container_ids: Sequence[str],
    ) -> None:
        self._session = session
        self._project = project
        self._files = files
        self._images = images
        self._container_ids = sorted(container_ids)
        self._override = files.digest(project.override)
        self._key = (session.marquee.name, project.name)
        self._remembered = session.compose_memo.get(self._key, self._inputs())
        self._services: list[str] | None = None

    def _inputs(self) -> str:
        project, files = self._project, self._files
        return _sha256(
            json.dumps(
                [
                    project.compose_command, project.name, project.checkout,
                    project.compose_path, project.override,
                    project.marquee.docker_socket, docker_config_dir(project.marquee),
                    files.git_present, files.head, files.changes,
                    files.digest(project.compose_path), self._override,
                    files.digest(_env_path(project)), self._images, self._container_ids,
                ]
            )
        )  # fmt: skip

    async def services(self) -> list[str] | None:
        """The project's service names; None when it has no checkout (``config --services``
        failed and there is no ``.git``). Raises ``RemoteCommandFailed`` otherwise."""
        if self._remembered is not None:
            return list(self._remembered.services)
        if self._services is None:
            listing = await self._session.run(self._project.services(), check=False)
            if listing.exit_status != 0:
                if not self._files.git_present:
                    return None
                raise RemoteCommandFailed(
                    self._session.host, listing.argv, listing.exit_status, listing.stderr
                )
            self._services = parse_services(listing.stdout)
        return list(self._services)

    def file_digests(self) -> dict[str, str]:
        """The SHA-256 of the compose file and ``.env`` on the host (``-`` where absent): the
        files of the Playground's input set (``remote.last_good``)."""
        return {
            "compose": self._files.digest(self._project.compose_path),
            "env": self._files.digest(_env_path(self._project)),
        }

    def override_current(self, content: str) -> bool:
        """Whether the host's override is ``content``."""
        return self._override == _sha256(content)

    def override_written(self, content: str) -> None:
        """The override on the host is ``content`` now (unless in dry-run, which wrote nothing)."""
        if not self._session.dry_run:
            self._override = _sha256(content)

    async def config_hashes(self) -> dict[str, str]:
        """Service -> the config hash compose computes now; remembered with the digest of the
        inputs as they are (after any override written this cycle)."""
        if self._remembered is not None:
            return dict(self._remembered.hashes)
        result = await self._session.run(self._project.config_hashes())
        hashes = parse_config_hashes(result.stdout)
        services = await self.services()
        if services is not None:
            self._session.compose_memo.put(
                self._key,
                ComposeAnswer(self._inputs(), tuple(services), tuple(sorted(hashes.items()))),
            )
        return hashes


async def compose_states(
    session: RemoteSession,
    projects: Sequence[ComposeProject],
    containers_of: dict[str, list[dict[str, Any]]],
) -> dict[str, ComposeState]:
    """Playground -> its ``ComposeState``, from one read of the files and one of the images."""
    files = await playground_files(session, projects)
    images = await images_digest(session)
    return {
        project.playground: ComposeState(
            session,
            project,
            files[project.playground],
            images,
            [str(container["Id"]) for container in containers_of.get(project.playground, [])],
        )
        for project in projects
    }
