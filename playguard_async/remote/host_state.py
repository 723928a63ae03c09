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
``.env``, the SSH user's environment, and an upgrade of compose itself. ``compose_memo_size = 0``
asks compose every cycle again.

A cycle that runs ``up`` remembers compose's answer for the containers ``up`` left
(``learn_after_up``): the inputs' digest names them, and an answer asked before ``up`` names those
it replaced. The hashes asked before ``up`` serve when the containers it left carry them; else
``config --hash`` is asked once after it, where the next cycle would have asked it anyway.

The answers are kept on the host as well (``keep_answers``, read back in ``playground_files``'s
command), so a fresh process starts as warm as the replica that learned them.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from playguard_async.desired_state.model import Marquee
from playguard_async.kits.image_reference import normalized
from playguard_async.kits.vocabulary import KEEP_COMPOSE_ANSWERS
from playguard_async.remote.compose import (
    CONFIG_HASH_LABEL,
    SERVICE_LABEL,
    ComposeProject,
    parse_config_hashes,
    parse_services,
)
from playguard_async.remote.docker import PLAYGROUND, docker_config_dir, query
from playguard_async.remote.errors import RemoteCommandFailed
from playguard_async.remote.guard import state_dir
from playguard_async.remote.memo import KEPT_LIMIT, ComposeAnswer, encode_kept, parse_kept
from playguard_async.remote.ssh import RemoteSession

log = structlog.get_logger("playguard.remote")

ABSENT = "-"

# $1: the file of kept compose answers (``memo.encode_kept``), $2 how many bytes of it to read;
# then the checkouts, "--", then the
# files to hash. Per checkout one line
# "<.git present: 1|0> <commit or -> <clean | digest of the changes>": `git status` (no optional
# locks: it must not even refresh the index) gives the commit and whether anything changed; only
# then are the changes (diff against HEAD, untracked files' content) hashed. Then "files" and
# sha256sum's "<digest>  <path>" lines for the files that exist, then "kept" and the start of the
# kept file, if there is one (``memo.KEPT_LIMIT`` bytes at most, so that no file there can push
# the lines above out of what the session keeps of the output).
_READ_SCRIPT = r"""
export GIT_OPTIONAL_LOCKS=0
nl='
'
m=$1; k=$2; shift 2
case $m in "~/"*) m=$HOME/${m#"~/"} ;; esac
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
echo kept
[ -f "$m" ] && head -c "$k" -- "$m" 2>/dev/null
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


@dataclass(frozen=True)
class _HostRead:
    files: dict[str, PlaygroundFiles]
    kept: dict[str, ComposeAnswer]


KEPT_FILE = "compose-answers.json"
"""The file of compose answers in a Marquee's fenced state directory (``memo.encode_kept``)."""


def kept_path(marquee: Marquee) -> str:
    return f"{state_dir(marquee)}/{KEPT_FILE}"


async def _read_host(session: RemoteSession, projects: Sequence[ComposeProject]) -> _HostRead:
    """The playgrounds' files and the compose answers kept on the host, in one command, once
    per cycle until the session writes."""
    key = ("playground-files", tuple((p.checkout, p.compose_path, p.override) for p in projects))

    async def read() -> _HostRead:
        if not projects:
            return _HostRead({}, {})
        files = [path for p in projects for path in (p.compose_path, p.override, _env_path(p))]
        argv = [
            "sh", "-c", _READ_SCRIPT, "sh", kept_path(session.marquee), str(KEPT_LIMIT),
            *(p.checkout for p in projects), "--", *files,
        ]  # fmt: skip
        result = await session.run(argv)
        try:
            return _parse_read(projects, result.stdout)
        except ValueError as exc:
            raise RemoteCommandFailed(
                session.host, argv, result.exit_status, str(exc), what="read playground files"
            ) from None

    return await session.read_once(key, read)


async def playground_files(
    session: RemoteSession, projects: Sequence[ComposeProject]
) -> dict[str, PlaygroundFiles]:
    """Playground -> its files, for all ``projects`` in one command, once per cycle until the
    session writes. Raises ``RemoteCommandFailed`` on an answer not of the expected form."""
    return (await _read_host(session, projects)).files


def _parse_read(projects: Sequence[ComposeProject], output: str) -> _HostRead:
    """The read script's answer; ``ValueError`` naming the line that is not of its form. The
    kept answers are host output too: ``parse_kept`` drops what is not of their form."""
    files, separator, kept = output.partition("\nkept\n")
    if not separator:
        raise ValueError(f"unexpected answer {output[-200:]!r}")
    return _HostRead(_parse_files(projects, files), parse_kept(kept.partition("\n")[0]))


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
    """Reference -> the ID of the image behind it on the host (``-`` where it has none),
    matched as docker reads both (``kits.image_reference``: ``busybox`` is the host's
    ``busybox:latest``, a reference with a digest its repo digest)."""
    found: dict[str | None, str] = {}
    for image in await host_images(session):
        for name in [*(image.get("RepoTags") or []), *(image.get("RepoDigests") or [])]:
            found[normalized(str(name))] = str(image.get("Id"))
    found.pop(None, None)
    return {reference: found.get(normalized(reference)) or ABSENT for reference in references}


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
        *,
        kept: ComposeAnswer | None = None,
    ) -> None:
        self._session = session
        self._project = project
        self._files = files
        self._images = images
        self._container_ids = sorted(container_ids)
        self._override = files.digest(project.override)
        self._key = (session.marquee.name, project.name)
        self.kept = kept
        """The answer the host kept for this project, whatever inputs it was for."""
        memo, inputs = session.compose_memo, self._inputs()
        self._remembered = memo.get(self._key, inputs)
        if self._remembered is None and memo.size and kept is not None and kept.inputs == inputs:
            self._remembered = kept
            memo.put(self._key, kept)
        self.answer = self._remembered
        """Compose's answer for the inputs as they are, once known (remembered or asked)."""
        self._services: list[str] | None = None

    def planned(
        self,
        commit: str,
        *,
        compose_digest: str,
        services: Sequence[str],
        hashes: Mapping[str, str],
    ) -> ComposeState:
        """This state as the cycle will find it once its checkout is at ``commit`` (a clean
        working tree, the compose file of that digest, the same override and ``.env``), with
        compose's answers for it (``remote.planned``, in a dry run)."""
        path = self._project.compose_path
        files = PlaygroundFiles(
            git_present=True,
            head=commit,
            changes="clean",
            digests={**self._files.digests, path: compose_digest},
        )
        state = ComposeState(self._session, self._project, files, self._images, self._container_ids)
        state.answer = state._remembered = ComposeAnswer(
            state._inputs(), tuple(services), tuple(sorted(hashes.items()))
        )
        return state

    @property
    def project_name(self) -> str:
        return self._project.name

    @property
    def commit(self) -> str | None:
        """The commit the checkout is at (None where it has no usable one)."""
        return self._files.head

    @property
    def env_path(self) -> str:
        return _env_path(self._project)

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

    async def learn_after_up(self, labels: Mapping[str, Mapping[str, str]]) -> None:
        """Compose's answer for the project as ``up`` left it, remembered for the containers it
        left (``labels``: container ID -> labels, as Docker showed them after ``up``): the answer
        asked before ``up`` names the containers it replaced, so without this the next cycle of
        any process would ask compose again.

        The hashes are compose's, never read from the labels alone (a container replaced by hand
        since ``up`` would then pass for compose's answer): those known before ``up`` when every
        container it left carries them (``up`` labels what it creates with the hash compose
        computes), else ``config --hash`` asked once now. Bookkeeping: nothing is learned when the
        services are not known, or compose's answer fails; the next cycle asks compose then.
        """
        services = self._remembered.services if self._remembered else self._services
        if services is None:
            return
        ours = {
            container: own
            for container, own in labels.items()
            if own.get(PLAYGROUND) == self._project.playground
        }
        hashes = dict(self.answer.hashes) if self.answer is not None else {}
        if not hashes or any(
            own.get(CONFIG_HASH_LABEL) != hashes.get(own.get(SERVICE_LABEL, ""))
            for own in ours.values()
        ):
            try:
                result = await self._session.run(self._project.config_hashes())
            except RemoteCommandFailed as exc:
                log.warning("compose.answer_unlearned", error=str(exc)[:300])
                return
            hashes = parse_config_hashes(result.stdout)
        self._container_ids = sorted(ours)
        self.answer = ComposeAnswer(self._inputs(), tuple(services), tuple(sorted(hashes.items())))
        self._session.compose_memo.put(self._key, self.answer)

    async def config_hashes(self) -> dict[str, str]:
        """Service -> the config hash compose computes now; remembered with the digest of the
        inputs as they are (after any override written this cycle)."""
        if self._remembered is not None:
            return dict(self._remembered.hashes)
        result = await self._session.run(self._project.config_hashes())
        hashes = parse_config_hashes(result.stdout)
        services = await self.services()
        if services is not None:
            self.answer = ComposeAnswer(
                self._inputs(), tuple(services), tuple(sorted(hashes.items()))
            )
            self._session.compose_memo.put(self._key, self.answer)
        return hashes


async def compose_states(
    session: RemoteSession,
    projects: Sequence[ComposeProject],
    containers_of: dict[str, list[dict[str, Any]]],
) -> dict[str, ComposeState]:
    """Playground -> its ``ComposeState``, from one read of the files (with the answers kept on
    the host) and one of the images."""
    read = await _read_host(session, projects)
    images = await images_digest(session)
    return {
        project.playground: ComposeState(
            session,
            project,
            read.files[project.playground],
            images,
            [str(container["Id"]) for container in containers_of.get(project.playground, [])],
            kept=read.kept.get(project.name),
        )
        for project in projects
    }


async def keep_answers(session: RemoteSession, states: Sequence[ComposeState]) -> bool:
    """Keep compose's answers on the host when this cycle learned one the host did not have:
    the next cycle of any process (a restarted daemon, another replica, ``cycle``, ``plan``)
    then asks compose as rarely as this replica's memo does. Written through the fence guard
    (``RemoteSession.keep_file``: no action, nothing in dry-run); whether it was written.

    Why a kept answer can never make a cycle skip a real change: it is used only for inputs whose
    digest is the one it was computed from (the compose command, project, files, ``.env``, the
    override, the checkout's commit and changes, the host's images, the project's containers),
    exactly as the replica's memo is; compose's answer is a function of those inputs, so any
    change among them is a different digest and compose is asked again (one remembered after
    ``up`` is compose's too, ``learn_after_up``). And what it answers is still held against the
    containers' config-hash labels: a wrong hash is drift, not a skip."""
    if not session.compose_memo.size or session.dry_run:
        return False
    learned = [state for state in states if state.answer is not None and state.answer != state.kept]
    if not learned:
        return False
    answers = {
        state.project_name: answer
        for state in states
        if (answer := state.answer or state.kept) is not None
    }
    try:
        await session.keep_file(
            KEEP_COMPOSE_ANSWERS, kept_path(session.marquee), encode_kept(answers)
        )
    except RemoteCommandFailed as exc:  # bookkeeping: the next cycle asks compose again
        log.warning("compose.answers_unkept", error=str(exc)[:300])
        return False
    return True
