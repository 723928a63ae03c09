"""A Playground's last good state and the input set that failed, kept on its host.

Each Playground has one small JSON file, ``<state_dir>/playgrounds/<playground>.json``, under the
fenced state directory (``remote.guard``): written only through ``RemoteSession.write_file``, so
only the lease the host accepts can change it, and read back by every replica, so it survives a
restart of all of them. It holds:

- ``last_good``: the inputs of the last state verified healthy: the digest of the whole input set,
  the compose file's and override's SHA-256, and the image each service actually ran, by repo
  digest (``repo@sha256:...``; the image ID where the image has none), never by tag;
- ``failed``: the digest of the input set that last failed its health check, and why, so that
  set is not tried again until an input changes (no flapping on a bad release).

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

from playguard_async.remote.guard import state_dir
from playguard_async.remote.ssh import RemoteSession

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
    override: str
    images: dict[str, str]
    """Service -> the image it ran, by repo digest (or image ID)."""

    def shown(self) -> str:
        """``service=reference`` pairs, as status and describe show them."""
        return ", ".join(f"{service}={image}" for service, image in sorted(self.images.items()))


@dataclass(frozen=True)
class Failed:
    inputs: str
    reason: str


@dataclass(frozen=True)
class HealthRecord:
    last_good: LastGood | None = None
    failed: Failed | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def parse(cls, text: str) -> HealthRecord:
        """A record as written; ValueError (or TypeError) for anything else."""
        data = json.loads(text)
        good, failed = data.get("last_good"), data.get("failed")
        return cls(
            last_good=None
            if good is None
            else LastGood(
                inputs=_text(good["inputs"]),
                compose=_text(good["compose"]),
                override=_text(good["override"]),
                images={_text(key): _text(value) for key, value in good["images"].items()},
            ),
            failed=None
            if failed is None
            else Failed(inputs=_text(failed["inputs"]), reason=_text(failed["reason"])),
        )


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
                except (ValueError, TypeError, KeyError, AttributeError):
                    records[name] = HealthRecord()
        return {name: records.get(name, HealthRecord()) for name in playgrounds}

    return await session.read_once(("health-records", tuple(playgrounds)), read)


async def write_record(session: RemoteSession, playground: str, record: HealthRecord) -> None:
    """The Playground's record on the host, through the fenced door."""
    await session.write_file(
        f"record the health of playground {playground}",
        record_path(session, playground),
        record.to_json() + "\n",
    )


def input_digest(files: Mapping[str, str], override: str, images: Mapping[str, str]) -> str:
    """The digest of a Playground's input set: ``files`` (name -> SHA-256 on the host), the
    override it should have, and ``images`` (reference -> image ID behind it)."""
    document: dict[str, Any] = {
        "files": dict(sorted(files.items())),
        "override": hashlib.sha256(override.encode()).hexdigest(),
        "images": dict(sorted(images.items())),
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()
