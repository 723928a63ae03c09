"""A Playground's last good state and the input set that failed, kept on its host.

Each Playground has one small JSON file, ``<state_dir>/playgrounds/<playground>.json``, under the
fenced state directory (``remote.guard``): written only through the session's fenced door, so
only the lease the host accepts can change it, and read back by every replica, so it survives a
restart of all of them. It holds:

- ``last_good``: the last state verified healthy: the digest of the whole input set, the compose
  file's SHA-256, and its revision (``remote.revision``): the checkout's commit, the image each
  service actually ran by repo digest (never by tag), and the digests of ``.env`` and our
  override. Beside the record the host keeps a copy of that ``.env`` (``kept_env_path``), so a
  rollback restores it without its content ever leaving the host;
- ``failed``: the release that last failed its health check, and why: the digest of its input set,
  the commit it was and the digest of the images behind the Playspec's tags then, so it is not
  tried again until the branch head or an image behind a tag moves (no flapping on a bad release).

The input set is what the desired state makes of a Playground: its compose file, ``.env`` and our
override as the host has them, and the ID of the image behind each of its Playspec's image
references (so a tag pushed again counts as a change).

The file is host output like any other: what the session keeps of it is capped, and one that is
not of the written form reads as no record (the next healthy state writes a good one).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import structlog

from playguard_async.cycle_record import ABSENT_FILE
from playguard_async.kits.revision_shapes import DIGEST
from playguard_async.remote.guard import state_dir
from playguard_async.remote.revision import (
    Revision,
    commit_of,
    kept_env_path,
    revision_of,
)
from playguard_async.remote.ssh import RemoteSession

log = structlog.get_logger("playguard.remote")

# $1 state directory ("~/..." is the SSH user's home), then the Playgrounds. One line per record
# that exists: "<playground> <the file's first line>" (a record is one line). Shell builtins only:
# no process per Playground. The session caps what it keeps of the output.
_READ_SCRIPT = """
d=$1; shift
case $d in "~/"*) d=$HOME/${d#"~/"} ;; esac
for p; do
    f="$d/playgrounds/$p.json"
    if [ -f "$f" ] && IFS= read -r line <"$f"; then printf '%s %s\\n' "$p" "$line"; fi
done
exit 0
"""


@dataclass(frozen=True)
class LastGood:
    inputs: str
    compose: str
    revision: Revision
    release: str | None = None
    """The release it was verified at, as rollouts name one (``phases.rollout_gate``); None in
    a record written before rollouts existed."""

    @property
    def images(self) -> Mapping[str, str]:
        """Service -> the image it ran, by repo digest (or image ID)."""
        return self.revision.images

    def shown(self) -> str:
        """``service=reference`` pairs, as status and describe show them."""
        return ", ".join(f"{service}={image}" for service, image in sorted(self.images.items()))


@dataclass(frozen=True)
class Failed:
    inputs: str
    reason: str
    commit: str | None = None
    """The commit the failed release was; None in a record written before releases had one."""
    tags: str | None = None
    """The digest of the images behind the Playspec's references then (``tags_digest``)."""

    def is_release(self, head: str | None, tags: str) -> bool:
        """Whether the release at branch ``head`` with the images ``tags`` is the one that
        failed: neither the branch head nor an image behind a tag moved since."""
        return self.commit is not None and self.commit == head and self.tags == tags


@dataclass(frozen=True)
class HealthRecord:
    last_good: LastGood | None = None
    failed: Failed | None = None
    previous: LastGood | None = None
    """The last good revision before ``last_good`` (kept when a new one replaced it), which an
    aborted rollout takes a Marquee back to (``phases.rollout_gate``)."""

    def replaced_by(self, good: LastGood) -> HealthRecord:
        """The record once ``good`` is verified: it is the last good revision; the one it
        replaces (when another revision) is the previous."""
        was = self.last_good
        moved = was is not None and was.revision != good.revision
        return HealthRecord(last_good=good, previous=was if moved else self.previous)

    def to_json(self) -> str:
        document: dict[str, Any] = {
            "last_good": _good_json(self.last_good),
            "failed": None if self.failed is None else asdict(self.failed),
        }
        if self.previous is not None:
            document["previous"] = _good_json(self.previous)
        return json.dumps(document, sort_keys=True, separators=(",", ":"))

    @classmethod
    def parse(cls, text: str) -> HealthRecord:
        """A record as written; ValueError (or TypeError) for anything else. A revision, commit
        or digest not of its shape reads as absent (``remote.revision``)."""
        data = json.loads(text)
        failed = data.get("failed")
        last_good, previous = _good_of(data.get("last_good")), _good_of(data.get("previous"))
        return cls(
            last_good=last_good,
            previous=previous,
            failed=None
            if failed is None
            else Failed(
                inputs=_text(failed["inputs"]),
                reason=_text(failed["reason"]),
                commit=commit_of(failed.get("commit"), source="the host's health record"),
                tags=_digest(failed.get("tags")),
            ),
        )


def _good_json(good: LastGood | None) -> dict[str, Any] | None:
    if good is None:
        return None
    release = {} if good.release is None else {"release": good.release}
    return {"inputs": good.inputs, "compose": good.compose, **good.revision.to_json(), **release}


def _good_of(good: Any) -> LastGood | None:
    if good is None:
        return None
    revision = revision_of(
        {"commit": None, "env": ABSENT_FILE} | good, source="the host's health record"
    )
    if revision is None:
        return None
    return LastGood(
        _text(good["inputs"]), _text(good["compose"]), revision, _digest(good.get("release"))
    )


def _digest(value: object) -> str | None:
    return value if isinstance(value, str) and DIGEST.fullmatch(value) else None


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, found {type(value).__name__}")
    return value


def record_path(session: RemoteSession, playground: str) -> str:
    return f"{state_dir(session.marquee)}/playgrounds/{playground}.json"


async def read_records(
    session: RemoteSession, playgrounds: Sequence[str]
) -> dict[str, HealthRecord]:
    """Playground -> its record (empty where it has none or an unreadable one), for all of
    ``playgrounds`` in one command, once per cycle until the session writes."""

    async def read() -> dict[str, HealthRecord]:
        if not playgrounds:
            return {}
        argv = ["sh", "-c", _READ_SCRIPT, "sh", state_dir(session.marquee), *playgrounds]
        output = (await session.run(argv)).stdout
        records: dict[str, HealthRecord] = {}
        for line in output.splitlines():
            name, _, text = line.partition(" ")
            if name in playgrounds:
                try:
                    records[name] = HealthRecord.parse(text)
                except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
                    log.warning("health_record.unreadable", playground=name, value=text[:80])
                    records[name] = HealthRecord()
        return {name: records.get(name, HealthRecord()) for name in playgrounds}

    return await session.read_once(("health-records", tuple(playgrounds)), read)


# $1 the record, $2 the checkout's .env, $3 where its copy is kept; the record comes on stdin.
# With $2 given, the .env of the revision just verified is kept (or its copy removed where the
# checkout has none) before the record names it, so no record names a .env the host lacks.
_WRITE_SCRIPT = """
f=$1 env=$2 kept=$3
case $f in "~/"*) f=$HOME/${f#"~/"} ;; esac
case $kept in "~/"*) kept=$HOME/${kept#"~/"} ;; esac
umask 077 && mkdir -p -- "$(dirname -- "$f")" || exit
if [ -n "$env" ]; then
    if [ -f "$env" ]; then
        cp -- "$env" "$kept.tmp" && mv -f -- "$kept.tmp" "$kept" || exit
    else
        rm -f -- "$kept" || exit
    fi
fi
cat >"$f.tmp" && mv -f -- "$f.tmp" "$f"
"""


async def write_record(
    session: RemoteSession, playground: str, record: HealthRecord, *, env: str | None = None
) -> None:
    """The Playground's record on the host, through the fenced door, in one write; with ``env``
    (the checkout's ``.env`` path) when the record names a new last good revision, whose
    ``.env`` the host then keeps."""
    argv = ["sh", "-c", _WRITE_SCRIPT, "sh", record_path(session, playground), env or "",
            kept_env_path(session.marquee, playground)]  # fmt: skip
    await session.change(
        f"record the health of playground {playground}", argv, stdin=record.to_json() + "\n"
    )


def tags_digest(images: Mapping[str, str]) -> str:
    """The digest of ``images`` (Playspec reference -> the image ID behind it now)."""
    return hashlib.sha256(json.dumps(dict(sorted(images.items()))).encode()).hexdigest()


def input_digest(files: Mapping[str, str], override: str, images: Mapping[str, str]) -> str:
    """The digest of a Playground's input set: ``files`` (name -> SHA-256 on the host), the
    override it should have, and ``images`` (reference -> image ID behind it)."""
    document: dict[str, Any] = {
        "files": dict(sorted(files.items())),
        "override": hashlib.sha256(override.encode()).hexdigest(),
        "images": dict(sorted(images.items())),
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()
