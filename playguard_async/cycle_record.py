"""The cycle record: the one shape of what a cycle did, and the one way it is read back.

The engine writes it (``CycleResult.to_record``); Redis keeps it for operators
(``coordination.records``, which may leave empty fields out and cut an oversized one, counting
the cuts in ``truncated``); PostgreSQL receives it as the observed state
(``desired_state.postgres.observed_state``); status, describe and history read it back
(``operator.status``, ``operator.describe``). A record read back is outside input (anything with
access to Redis may have written the key), so readers take it as a ``StoredRecord`` and read its
fields through the functions here, which refuse what is not of the written type.

One phase's findings are read by other layers too: ``reconcile_playgrounds`` writes one
``PlaygroundFinding`` per Playground, which the observed-state write-back
(``desired_state.postgres.observed_state``) and the readers of a Marquee
(``coordination.marquee_reads``) take back. Its shape is here, below all three, with its one encoder
(``PlaygroundFinding.to_json``) and its one decoder (``playground_findings``), so that no reader
knows the keys.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict, TypeGuard, TypeVar

from playguard_async.kits.revision_shapes import COMMIT, DIGEST, PINNED_IMAGE

ABSENT_FILE = "-"
"""The digest of a file that does not exist, in a revision."""


class NoticeKind(enum.StrEnum):
    """What a notice asks an operator to look at."""

    DRIFT = "drift"
    """A playground was (or in dry-run would be) changed because its host moved away from what
    was applied; the detail says what differed."""
    RELEASE = "release"
    """A playground was (or would be) changed because its desired state moved: a new commit, an
    image behind a tag, a setting, a first deploy, a stop; the detail says what moved."""
    PIN = "pin"
    """A playground was (or would be) changed to the revision an operator pinned it at."""
    HOLD = "hold"
    """A playground was (or would be) changed as a rollout holds it."""
    BRANCH_GONE = "branch_gone"
    """A playground's branch is gone from its repo; the detail names the branch."""
    FAILED = "failed"
    """An item of the phase (a registry, an image, a chat) failed; the detail is the error."""
    UNHEALTHY = "unhealthy"
    """A playground is not healthy, or runs held back from inputs that were not; the detail
    names the services and their last health log line."""
    ROLLED_BACK = "rolled_back"
    """A playground was rolled back to its last good state: ``rolled back to <digests>
    because <reason>``."""
    ROLLBACK_BLOCKED = "rollback_blocked"
    """A rollback was due and a part of its revision cannot be had, so nothing was changed:
    the detail names what is missing. Told once per Playground, revision and missing parts."""
    ROLLOUT_HALTED = "rollout_halted"
    """This cycle's failure halted a rollout fleet-wide (subject: its scope): told once."""


class RolloutFinding(TypedDict):
    """A rollout a cycle took part in, as its reconcile_playgrounds finding ``rollouts`` keeps
    it (scope -> this): its status and wave then, its release, whether the Marquee was held,
    whether this cycle's failure was counted and, when it halted the rollout, why."""

    status: str
    wave: int
    waves: int
    release: str
    held: bool
    failed_here: bool
    halted_here: str | None


class NoticeRecord(TypedDict):
    """A phase's ``Notice`` as written: what an operator should look at."""

    kind: str
    subject: str
    detail: str


class DesiredVersion(TypedDict, total=False):
    """Which desired state a cycle read: for a YAML file, the start of its SHA-256 (``digest``),
    its mtime (Unix seconds) and, when it is in a git work tree, that tree's HEAD ``commit``; for
    PostgreSQL, the highest change-log id its snapshot saw (``change``) and the ids below it
    that the snapshot did not see (``unseen``: a longer transaction's, still open, or one rolled
    back; at most ``UNSEEN_KEPT``). A few hundred bytes at most: a record stays small however
    large the file or the log."""

    digest: str
    mtime: float
    commit: str
    change: int
    unseen: list[int]


UNSEEN_KEPT = 32
"""Ids below a snapshot's highest that a version names as not seen, at most (the highest ones):
a change whose id is among them was read by a later cycle, not this one."""


VERSION_DIGEST = 12
"""Hex digits of a YAML file's SHA-256 a version keeps: enough to tell edits apart."""


def desired_version(value: object) -> DesiredVersion | None:
    """``value`` (a record's ``desired``, outside input) as a version when each field it has is
    of its shape, else None."""
    if not isinstance(value, Mapping) or not value:
        return None
    version: DesiredVersion = {}
    digest, mtime = value.get("digest"), value.get("mtime")
    commit, change = value.get("commit"), value.get("change")
    if digest is not None:
        if not (isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{1,64}", digest)):
            return None
        version["digest"] = digest[:VERSION_DIGEST]
    if mtime is not None:
        if not is_seconds(mtime):
            return None
        version["mtime"] = float(mtime)
    if commit is not None:
        if not (isinstance(commit, str) and COMMIT.fullmatch(commit)):
            return None
        version["commit"] = commit
    if change is not None:
        if not (isinstance(change, int) and not isinstance(change, bool) and change >= 0):
            return None
        version["change"] = change
        unseen = value.get("unseen", [])
        if not (
            isinstance(unseen, list)
            and len(unseen) <= UNSEEN_KEPT
            and all(isinstance(i, int) and not isinstance(i, bool) and 0 < i < change
                    for i in unseen)
        ):  # fmt: skip
            return None
        if unseen:
            version["unseen"] = sorted(unseen)
    return version or None


def reads_change(version: DesiredVersion | None, change_id: int) -> bool:
    """Whether a cycle that read ``version`` saw the change-log entry ``change_id``."""
    if version is None or "change" not in version:
        return False
    return change_id <= version["change"] and change_id not in version.get("unseen", ())


def read_through(version: DesiredVersion | None) -> int | None:
    """The change-log id up to which a cycle that read ``version`` saw every entry: its highest,
    or the one below the lowest it did not see (``unseen``), so that every change at or below
    it was surely read. None for a YAML file's version (a file has no ids) or none."""
    if version is None or "change" not in version:
        return None
    unseen = version.get("unseen")
    return min(unseen) - 1 if unseen else version["change"]


def describe_version(version: DesiredVersion) -> str:
    """A version in one line: ``file sha256 <digest> (commit <commit>)`` or ``change log up to
    id <n>``."""
    if "change" in version:
        unseen = version.get("unseen")
        but = f" except {', '.join(map(str, unseen))} (uncommitted then)" if unseen else ""
        return f"change log up to id {version['change']}{but}"
    text = f"file sha256 {version.get('digest', '?')}"
    if "commit" in version:
        return f"{text} (commit {version['commit'][:SHORT]})"
    return text


class CycleRecord(TypedDict):
    """A cycle's record as the engine writes it: every field present."""

    marquee: str
    cycle: str
    outcome: str
    fence: int | None
    host_fence: int | None
    phase: str | None
    reason: str | None
    durations: dict[str, float]
    """Phase -> seconds it ran, in the order the phases ran."""
    actions: dict[str, list[str]]
    """Phase -> what it did, for the phases that did something."""
    findings: dict[str, dict[str, Any]]
    notices: dict[str, list[NoticeRecord]]
    replica: str
    dry_run: bool
    finished_at: float
    """Wall-clock time (for display only)."""
    waited: float
    duration: float
    trace: str | None
    """The cycle's trace ID when traces are exported (``trace_of`` reads it back)."""
    desired: DesiredVersion | None
    """The desired state the cycle acted on (``desired_version`` reads it back)."""


KEPT_FIELDS = ("marquee", "cycle", "outcome", "finished_at", "duration")
"""Fields every stored record has, even a cut one: readers need them."""

StoredRecord = Mapping[str, Any]
"""A record read back from Redis: the written shape at best, anything at worst."""

_T = TypeVar("_T")


def typed(value: object, kind: type[_T]) -> _T:
    """``value`` if it is a ``kind`` (a bool is no int here), else ValueError."""
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"expected {kind.__name__}, found {type(value).__name__}")
    return value


def optional(value: object, kind: type[_T]) -> _T | None:
    return None if value is None else typed(value, kind)


def seconds(value: object) -> float:
    """A finite, non-negative number of seconds (JSON has no NaN, but Python's json reads one)."""
    if not is_seconds(value):
        raise ValueError(f"not a time: {value!r}")
    return float(value)


def is_seconds(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e12


def mapping(value: object) -> Mapping[str, Any]:
    """A field that should hold an object; anything else reads as empty."""
    return value if isinstance(value, Mapping) else {}


def listed(value: object) -> list[Any]:
    """A field that should hold a list; anything else reads as empty."""
    return value if isinstance(value, list) else []


TRACE_ID = re.compile(r"[0-9a-f]{32}")
"""An OpenTelemetry trace ID as written: 32 lowercase hex digits."""


def trace_of(record: StoredRecord) -> str | None:
    """The record's trace ID, or None where it has none or one not of the written shape."""
    trace = record.get("trace")
    return trace if isinstance(trace, str) and TRACE_ID.fullmatch(trace) else None


def notices_of(record: StoredRecord) -> Iterator[tuple[str, NoticeKind, str, str]]:
    """(phase, kind, subject, detail) of each notice the record holds, whichever phase wrote it;
    ValueError or TypeError for one not in the shape written."""
    for phase, notices in (record.get("notices") or {}).items():
        for notice in notices:
            yield (
                typed(phase, str),
                NoticeKind(notice["kind"]),
                typed(notice["subject"], str),
                typed(notice["detail"], str),
            )


PLAYGROUND_FINDINGS = "playgrounds"
"""The key of a phase's findings that holds its ``PlaygroundFinding``s, by Playground name."""


class RevisionRecord(TypedDict):
    """A Playground's revision in full (``remote.revision.Revision``): the commit of its
    checkout (null where not known), service -> image by repo digest (for a release that failed
    its gate, which never ran healthy: the Playspec's image reference -> the image behind it),
    and the SHA-256 of its ``.env`` and our override (``-`` for a file that does not exist)."""

    commit: str | None
    images: dict[str, str]
    env: str
    override: str


def revision_record(value: object) -> RevisionRecord | None:
    """``value`` as a revision when every field of it is of its shape (``kits.revision_shapes``),
    else None: the one check of a revision read back, wherever from."""
    if not isinstance(value, Mapping):
        return None
    commit, images = value.get("commit"), value.get("images")
    env, override = value.get("env"), value.get("override")
    if (
        (commit is not None and not (isinstance(commit, str) and COMMIT.fullmatch(commit)))
        or not (_file_digest(env) and _file_digest(override))
        or not isinstance(images, Mapping)
        or not all(
            isinstance(service, str) and isinstance(image, str) and PINNED_IMAGE.fullmatch(image)
            for service, image in images.items()
        )
    ):
        return None
    return {"commit": commit, "images": dict(images), "env": env, "override": override}


SHORT = 12
"""Characters of a commit or digest that tables show of it."""


def revision_short(revision: RevisionRecord) -> str:
    """A revision in one short line for tables: its commit, each service's image digest and
    the digests of ``.env`` and our override, cut to ``SHORT`` characters (JSON has them whole)."""
    commit = "?" if revision["commit"] is None else revision["commit"][:SHORT]
    images = [
        f"{service}={_short_image(image)}" for service, image in sorted(revision["images"].items())
    ]
    env, override = revision["env"][:SHORT], revision["override"][:SHORT]
    return " ".join([commit, *images, f"env={env}", f"override={override}"])


def _short_image(image: str) -> str:
    name, at, digest = image.rpartition("@sha256:")
    if not at:
        return image.removeprefix("sha256:")[:SHORT]
    return f"{name.rsplit('/', 1)[-1]}@{digest[:SHORT]}"


def _file_digest(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and (value == ABSENT_FILE or DIGEST.fullmatch(value) is not None)


class PlaygroundFindingRecord(TypedDict):
    """A ``PlaygroundFinding`` as written in a cycle record: the fields it has no value for are
    left out. ``state`` is always there (null only for a finding read back without one)."""

    state: str | None
    drift: list[str]
    actions: list[str]
    last_good: NotRequired[str]
    rollback: NotRequired[str]
    health: NotRequired[str]
    unhealthy: NotRequired[dict[str, str]]
    rollback_health: NotRequired[str]
    held: NotRequired[str]
    revision: NotRequired[RevisionRecord]
    last_good_revision: NotRequired[RevisionRecord]
    pinned: NotRequired[str]
    held_by: NotRequired[str]
    rollback_blocked: NotRequired[str]


@dataclass(frozen=True)
class PlaygroundFinding:
    """What one cycle's ``reconcile_playgrounds`` found of and did to one Playground."""

    state: str | None
    """``running``, ``stopped``, ``branch_gone``, ``expired``, ``no_checkout`` when sync_git
    has not cloned it yet, or ``not_held`` when sync_git could not put its checkout at the
    commit it is held at (it runs as it was). The phase always says; None is a record read
    back that did not."""
    drift: tuple[str, ...] = ()
    """Why it was (or in dry-run would be) changed."""
    actions: tuple[str, ...] = ()
    """What was done for it, in order."""
    last_good: str | None = None
    """Its last good state (``service=repo@sha256:...``), as its health record holds it."""
    rollback: str | None = None
    """``rolled back to <digests> because <reason>``, while it runs its last good state."""
    health: str | None = None
    """What the health gate said, when it ran: ``healthy``, ``pending``, ``unhealthy``; or
    ``held`` (its inputs failed, and it is left as it is)."""
    unhealthy: Mapping[str, str] | None = None
    """Service -> ``state: detail`` for each service the gate found not healthy."""
    rollback_health: str | None = None
    """What the health gate said of the rollback this cycle made: ``healthy``, ``pending`` or
    ``unhealthy``."""
    held: str | None = None
    """Why its failed inputs were not tried again."""
    revision: RevisionRecord | None = None
    """The revision it runs, where the cycle knows it."""
    last_good_revision: RevisionRecord | None = None
    """Its last good revision, as its health record holds it."""
    pinned: str | None = None
    """Why it is held at a revision that is not its branch head, when an operator pinned it."""
    held_by: str | None = None
    """Who holds it, in a few words: ``pinned at <commit> by <who>`` for a pin, ``held by
    rollout <scope>, wave k of n (...)`` for a rollout that has not admitted it yet."""
    rollback_blocked: str | None = None
    """What a rollback due this cycle needs and cannot have (it changed nothing)."""

    def to_json(self) -> PlaygroundFindingRecord:
        """The finding as a cycle record holds it: the one encoder of the shape, whose output
        ``playground_findings`` decodes."""
        encoded: PlaygroundFindingRecord = {
            "state": self.state,
            "drift": list(self.drift),
            "actions": list(self.actions),
        }
        if self.last_good is not None:
            encoded["last_good"] = self.last_good
        if self.rollback is not None:
            encoded["rollback"] = self.rollback
        if self.health is not None:
            encoded["health"] = self.health
        if self.unhealthy is not None:
            encoded["unhealthy"] = dict(self.unhealthy)
        if self.rollback_health is not None:
            encoded["rollback_health"] = self.rollback_health
        if self.held is not None:
            encoded["held"] = self.held
        if self.revision is not None:
            encoded["revision"] = self.revision
        if self.last_good_revision is not None:
            encoded["last_good_revision"] = self.last_good_revision
        if self.pinned is not None:
            encoded["pinned"] = self.pinned
        if self.held_by is not None:
            encoded["held_by"] = self.held_by
        if self.rollback_blocked is not None:
            encoded["rollback_blocked"] = self.rollback_blocked
        return encoded


def playground_findings(findings: object) -> dict[str, PlaygroundFinding]:
    """Playground -> its finding, from a record's ``findings`` (phase -> that phase's findings),
    whichever phase wrote them. A record read back is outside input: what is not in the written
    shape reads as absent, never as an error: a finding that is not an object, a field of another
    type (a list field keeps its strings only)."""
    found: dict[str, PlaygroundFinding] = {}
    for phase_findings in mapping(findings).values():
        for name, value in mapping(mapping(phase_findings).get(PLAYGROUND_FINDINGS)).items():
            finding = _playground_finding(value)
            if isinstance(name, str) and finding is not None:
                found[name] = finding
    return found


def _playground_finding(value: object) -> PlaygroundFinding | None:
    if not isinstance(value, Mapping):
        return None
    fields: Mapping[str, Any] = value
    return PlaygroundFinding(
        state=_string(fields.get("state")),
        drift=_strings(fields.get("drift")),
        actions=_strings(fields.get("actions")),
        last_good=_string(fields.get("last_good")),
        rollback=_string(fields.get("rollback")),
        health=_string(fields.get("health")),
        unhealthy=_string_map(fields.get("unhealthy")),
        rollback_health=_string(fields.get("rollback_health")),
        held=_string(fields.get("held")),
        revision=revision_record(fields.get("revision")),
        last_good_revision=revision_record(fields.get("last_good_revision")),
        pinned=_string(fields.get("pinned")),
        held_by=_string(fields.get("held_by")),
        rollback_blocked=_string(fields.get("rollback_blocked")),
    )


def _string(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _strings(value: object) -> tuple[str, ...]:
    return tuple(item for item in listed(value) if isinstance(item, str))


def _string_map(value: object) -> dict[str, str] | None:
    if not isinstance(value, Mapping):
        return None
    return {
        key: text for key, text in value.items() if isinstance(key, str) and isinstance(text, str)
    }
