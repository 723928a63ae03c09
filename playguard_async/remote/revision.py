"""A Playground's revision: the whole input set of a release, named by what cannot move under it.

A release can break a Playground through its compose file, its ``.env``, a command, a port, a
volume or an image; a revision names all of them at once, so a rollback can restore all of them:

- ``commit``: the git commit of the checkout (which fixes the compose file and everything tracked);
- ``images``: service -> the image it ran, by repo digest (``repo@sha256:...``; the image ID where
  the image was never pushed nor pulled), never by tag;
- ``env``: the SHA-256 of the project's ``.env`` (``-`` where it has none). The file itself may
  hold secrets: its content never leaves the host (a copy is kept in the fenced state directory,
  ``kept_env_path``), only its digest is shown;
- ``override``: the SHA-256 of our compose override as the revision had it.

Every value here is read back from somewhere outside this process (the host's record, Redis, the
PostgreSQL write-back), so every reader goes through ``revision_of`` / ``commit_of``: a value not of
its shape reads as absent, with one log line, never as an error and never into a command.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import structlog

from playguard_async.cycle_record import (
    ABSENT_FILE,
    RevisionRecord,
    revision_record,
    revision_short,
)
from playguard_async.desired_state.model import Marquee
from playguard_async.kits.revision_shapes import COMMIT
from playguard_async.remote.guard import state_dir

log = structlog.get_logger("playguard.revision")


@dataclass(frozen=True)
class Revision:
    commit: str | None
    """None for a record written before revisions had one (its commit is not known)."""
    images: Mapping[str, str] = field(default_factory=dict)
    env: str = ABSENT_FILE
    override: str = ABSENT_FILE

    def to_json(self) -> RevisionRecord:
        return {
            "commit": self.commit,
            "images": dict(sorted(self.images.items())),
            "env": self.env,
            "override": self.override,
        }

    def short(self) -> str:
        """One line for tables and notices (``cycle_record.revision_short``)."""
        return revision_short(self.to_json())


def commit_of(value: object, *, source: str) -> str | None:
    """``value`` when it is a full commit name, else None and one log line naming ``source``."""
    if isinstance(value, str) and COMMIT.fullmatch(value):
        return value
    if value is not None:
        log.warning("revision.commit_unreadable", source=source, value=_shown(value))
    return None


def revision_of(value: object, *, source: str) -> Revision | None:
    """A revision from its JSON form (``Revision.to_json``), or None (and one log line naming
    ``source``) when anything in it is not of its shape."""
    if value is None:
        return None
    record = revision_record(value)
    if record is None:
        log.warning("revision.unreadable", source=source, value=_shown(value))
        return None
    return Revision(record["commit"], record["images"], record["env"], record["override"])


def _shown(value: object) -> str:
    return repr(value)[:80]


def kept_env_path(marquee: Marquee, playground: str) -> str:
    """Where the host keeps the ``.env`` of the Playground's last good revision: in the fenced
    state directory, mode 0600, so a rollback can restore it without it ever leaving the host."""
    return f"{state_dir(marquee)}/playgrounds/{playground}.env"


# $1 the checkout, $2 the kept .env, $3 "1" when the revision had a .env (restored from $2 when
# that exists: a .env git tracks is already the commit's) or "0" (removed).
_RESTORE_ENV_SCRIPT = r"""
c=$1 kept=$2 had=$3
case $kept in "~/"*) kept=$HOME/${kept#"~/"} ;; esac
if [ "$had" = 0 ]; then rm -f -- "$c/.env"; exit; fi
[ ! -f "$kept" ] || { cp -- "$kept" "$c/.env.playguard" && mv -f -- "$c/.env.playguard" "$c/.env"; }
"""


def restore_env(checkout: str, kept_env: str, had_env: bool) -> list[str]:
    """One write that puts the ``.env`` of a revision back into the checkout, from the copy the
    host kept of it (``kept_env_path``); its content never passes through playguard."""
    return ["sh", "-c", _RESTORE_ENV_SCRIPT, "sh", checkout, kept_env, "1" if had_env else "0"]
