"""The cycle record: the one shape of what a cycle did, and the one way it is read back.

The engine writes it (``CycleResult.to_record``); Redis keeps it for operators
(``coordination.records``, which may leave empty fields out and cut an oversized one, counting
the cuts in ``truncated``); PostgreSQL receives it as the observed state
(``desired_state.observed_state``); status, describe and history read it back
(``operator.fleet``, ``operator.describe``). A record read back is outside input (anything with
access to Redis may have written the key), so readers take it as a ``StoredRecord`` and read its
fields through the functions here, which refuse what is not of the written type.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from typing import Any, TypedDict, TypeGuard, TypeVar


class NoticeKind(enum.StrEnum):
    """What a notice asks an operator to look at."""

    DRIFT = "drift"
    """A playground was (or in dry-run would be) changed; the detail says why."""
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


class NoticeRecord(TypedDict):
    """A phase's ``Notice`` as written: what an operator should look at."""

    kind: str
    subject: str
    detail: str


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
