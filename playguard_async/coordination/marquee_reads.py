"""What a Marquee looks like from Redis, read one way for every reader: its lock now, its last
cycle as a typed ``LastCycle``, that cycle phase by phase, its recent cycles.

``playguard status``, ``describe`` and ``history`` print it; the daemon's web view
(``web.view``) serves it. Both read through here, so there is one reader of the records
and one understanding of what a malformed one means (outcome ``unknown``, never an error).

A key of another Redis type than playguard writes there (``foreign``) is that Marquee's news
alone: it reads as absent (a pause key of another type as a pause, a lock key as held by it) and
is named in ``unreadable``, one line per key; nothing is written over it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeGuard

from playguard_async.coordination.containers_seen import SeenRead
from playguard_async.coordination.foreign import ForeignType, read_typed
from playguard_async.coordination.keys import (
    cycle_history_key,
    fence_key,
    last_cycle_key,
    marquee_lock_name,
)
from playguard_async.coordination.lock_state import LockState, read_lock
from playguard_async.coordination.pause import Pause, paused
from playguard_async.coordination.records import CycleRecords
from playguard_async.cycle_record import (
    NoticeKind,
    RevisionRecord,
    StoredRecord,
    is_seconds,
    listed,
    mapping,
    notices_of,
    optional,
    playground_findings,
    revision_short,
    seconds,
    trace_of,
    typed,
)
from playguard_async.kits.aio import bounded
from playguard_async.kits.vocabulary import Cause, fence_words


def holder_json(state: LockState) -> dict[str, Any]:
    """A held lock for scripts; the token stays out, as nothing outside the lock needs it. A key
    holding something else has ``known`` false, null holder fields and its value in ``record``
    (or, a key of another type, an empty ``record`` and what it holds in ``foreign``)."""
    holder = state.holder
    return {
        "name": state.name,
        "known": holder is not None,
        "replica": holder and holder.replica,
        "host": holder and holder.host,
        "pid": holder and holder.pid,
        "acquired_at": holder and holder.acquired_at,
        "fence": state.fence,
        "ttl_left": state.ttl_left,
        "record": None if holder else _record_shown(state),
        "foreign": None if state.foreign is None else state.foreign.describe(),
    }


def _record_shown(state: LockState) -> str:
    return "" if state.foreign is not None else shown_record(state.record)


def unknown_holder(state: LockState) -> str:
    """A lock value this project did not write, as an operator sees it: the value shown, or
    what type the key holds."""
    if state.foreign is not None:
        return f"unknown record: {state.foreign.describe()}"
    return f"unknown record {shown_record(state.record)}"


def shown_record(raw: bytes) -> str:
    """A lock value this project did not write, bounded, with anything unprintable escaped."""
    text = raw[:RECORD_SHOWN].decode("utf-8", "backslashreplace")
    text = text.encode("unicode_escape").decode("ascii")
    return repr(text) + (f" (+{len(raw) - RECORD_SHOWN} bytes)" if len(raw) > RECORD_SHOWN else "")


RECORD_SHOWN = 120
"""Bytes of an unknown lock value shown to an operator."""


def _by_subject(
    notices: list[tuple[str, NoticeKind, str, str]], *kinds: NoticeKind
) -> dict[str, list[str]]:
    """Subject -> the details of its notices of ``kinds``, in the order written."""
    found: dict[str, list[str]] = {}
    for _, kind, subject, detail in notices:
        if kind in kinds:
            found.setdefault(subject, []).append(detail)
    return found


def fence_shown(fence: int | None, last: LastCycle | None) -> str:
    """``fence`` (Redis's counter, or a lock's fence) beside the one its host was last seen to
    hold, which only a cycle's write shows: ``fence 20 (host 20)``, or why the host's is not
    known."""
    if last is None:
        return fence_words(fence, None, host_unknown="no cycle recorded")
    return fence_words(fence, last.host_fence, host_unknown="its last cycle wrote nothing")


@dataclass(frozen=True)
class LastCycle:
    """A Marquee's last recorded cycle, with what its findings ask an operator to look at:
    ``drift`` (playground -> why it was or would be changed), ``branch_gone`` (playground ->
    branch) and ``failed`` ("phase: item" for each registry, image or chat that failed)."""

    cycle: str
    outcome: str
    phase: str | None
    reason: str | None
    fence: int | None
    host_fence: int | None
    """The highest fence the Marquee itself was seen to hold in that cycle (None: no write)."""
    finished_at: float | None
    duration: float | None
    actions: int
    drift: dict[str, list[str]]
    branch_gone: dict[str, str]
    failed: list[str]
    replica: str | None = None
    """The replica that ran it (records older than this field: None)."""
    dry_run: bool = False
    """A dry run changes nothing: an ``ok`` one with drift is not a converged Marquee."""
    waited: float | None = None
    """Seconds it waited for its start offset and a slot before taking the lock."""
    unhealthy: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    """Playground -> what its health gate reported: unhealthy services, held-back inputs,
    ``rolled back to <digests> because <reason>``."""
    trace: str | None = None
    """Its trace ID, when traces were exported (one not of the written shape reads as None)."""
    changed: dict[str, dict[str, list[str]]] = dataclasses.field(default_factory=dict)
    """The glossary's word for why (``release``, ``pin``, ``hold``) -> playground -> what moved,
    for the Playgrounds it changed (or would) for another cause than ``drift``."""

    def change_lines(self) -> list[str]:
        """What it changed, one line a Playground and cause, in the glossary's words:
        ``released web-1: commit 81fc54f -> 3491e24``, ``fixed drift web-1: app: missing``;
        a dry run's say what is still to be done."""
        causes = [(Cause(word), by) for word, by in self.changed.items()]
        causes.append((Cause.DRIFT, self.drift))
        return [
            f"{cause.pending if self.dry_run else cause.done} {name}: {', '.join(why)}"
            for cause, by in causes
            for name, why in by.items()
        ]

    @classmethod
    def from_record(cls, record: StoredRecord) -> LastCycle:
        """The record as written by the engine; anything else (Redis is outside input: a field
        missing, of another type, a record of another program) reads as outcome ``unknown``."""
        try:
            return cls._parse(record)
        except (KeyError, TypeError, ValueError, AttributeError):
            return cls(
                cycle="?", outcome="unknown", phase=None, fence=None, host_fence=None,
                finished_at=None,
                duration=None, actions=0, drift={}, branch_gone={}, failed=[],
                reason="the cycle record is not one playguard wrote",
            )  # fmt: skip

    @classmethod
    def _parse(cls, record: StoredRecord) -> LastCycle:
        notices = list(notices_of(record))
        return cls(
            cycle=typed(record["cycle"], str),
            outcome=typed(record["outcome"], str),
            phase=optional(record.get("phase"), str),
            reason=optional(record.get("reason"), str),
            fence=optional(record.get("fence"), int),
            host_fence=optional(record.get("host_fence"), int),
            finished_at=seconds(record["finished_at"]),
            duration=seconds(record["duration"]),
            actions=sum(len(taken) for taken in (record.get("actions") or {}).values()),
            replica=optional(record.get("replica"), str),
            dry_run=optional(record.get("dry_run"), bool) or False,
            waited=None if record.get("waited") is None else seconds(record["waited"]),
            drift=_by_subject(notices, NoticeKind.DRIFT),
            branch_gone={
                subject: detail
                for _, kind, subject, detail in notices
                if kind is NoticeKind.BRANCH_GONE
            },
            failed=[
                f"{phase}: {subject}"
                for phase, kind, subject, _ in notices
                if kind is NoticeKind.FAILED
            ],
            unhealthy=_by_subject(notices, NoticeKind.UNHEALTHY, NoticeKind.ROLLED_BACK),
            trace=trace_of(record),
            changed={
                kind.value: found
                for kind in (NoticeKind.RELEASE, NoticeKind.PIN, NoticeKind.HOLD)
                if (found := _by_subject(notices, kind))
            },
        )

    def to_json(self, now: float) -> dict[str, Any]:
        age = None if self.finished_at is None else round(max(0.0, now - self.finished_at), 3)
        return {**dataclasses.asdict(self), "age": age}


@dataclass(frozen=True)
class PlaygroundRevisions:
    """One Playground's revisions as a cycle record holds them: the one it runs, its last good
    one, why an operator pinned it, and who holds it (each None where the record does not say)."""

    running: RevisionRecord | None
    last_good: RevisionRecord | None
    pinned: str | None
    held_by: str | None = None

    @property
    def hold(self) -> str | None:
        """Who holds it, in a few words (``pinned at <commit> by <who>``, ``held by rollout
        <scope>, wave k of n``); a record written before it said so, its ``pinned`` words."""
        return self.held_by or self.pinned

    def to_json(self) -> dict[str, Any]:
        return {
            "running": self.running,
            "last_good": self.last_good,
            "pinned": self.pinned,
            "held_by": self.hold,
        }

    def short(self) -> str:
        """In one line for tables: short forms (``cycle_record.revision_short``)."""
        running = "?" if self.running is None else revision_short(self.running)
        good = "none" if self.last_good is None else revision_short(self.last_good)
        held = "" if self.hold is None else f"; {self.hold}"
        return f"runs {running}; last good {good}{held}"


@dataclass(frozen=True)
class MarqueeStatus:
    name: str
    launchable: bool
    lock: LockState | None
    last: LastCycle | None
    mode: str = "apply"
    pause: Pause | None = None
    """The pause that holds it back now (its own, else the fleet's), if any."""
    unreadable: tuple[str, ...] = ()
    """One line per key of it that holds another type than playguard writes there."""
    revisions: dict[str, PlaygroundRevisions] = dataclasses.field(default_factory=dict)
    """Playground -> its revisions as the last cycle found them."""

    def to_json(self, now: float) -> dict[str, Any]:
        """Stable keys for scripts; ``age`` is seconds since the last cycle ended at ``now``."""
        return {
            "name": self.name,
            "launchable": self.launchable,
            "mode": self.mode,
            "paused": None if self.pause is None else self.pause.to_json(),
            "unreadable": list(self.unreadable),
            "lock": None if self.lock is None else holder_json(self.lock),
            "last": None if self.last is None else self.last.to_json(now),
            "revisions": {name: shown.to_json() for name, shown in self.revisions.items()},
        }


PHASE_ITEMS_SHOWN = 20
"""Actions or notices listed per phase; past it, a count of the rest."""


@dataclass(frozen=True)
class PhaseStep:
    """What one phase of a cycle did: its time, its actions, its notices as
    ``(kind, subject, detail)``."""

    phase: str
    seconds: float | None
    actions: list[str]
    notices: list[tuple[str, str, str]]
    more: int
    """Actions and notices left out past ``PHASE_ITEMS_SHOWN``."""


@dataclass(frozen=True)
class WantedPlayground:
    """What the desired state asks of one Playground of a Marquee, beside what its cycles
    found: the Playspec (its repo, its images by tag), the branch, the state, when it expires,
    and its agent chats (name -> image, state)."""

    name: str
    playspec: str
    repo: str
    branch: str
    state: str
    images: tuple[str, ...] = ()
    expires_at: datetime | None = None
    chats: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class MarqueeStory:
    name: str
    lock: LockState | None
    fence_counter: int | None
    """The last fence Redis handed out for this Marquee (None: never, or not a number)."""
    last: LastCycle | None
    steps: list[PhaseStep]
    history: list[LastCycle]
    last_good: dict[str, str] = dataclasses.field(default_factory=dict)
    """Playground -> its last good state (``service=repo@sha256:...``) as the last cycle found
    it on the host."""
    revisions: dict[str, PlaygroundRevisions] = dataclasses.field(default_factory=dict)
    """Playground -> the revision it runs and its last good one, as the last cycle found them."""
    mode: str = "apply"
    pause: Pause | None = None
    """The pause that holds it back now (its own, else the fleet's), if any."""
    windows: int = 0
    """How many maintenance windows apply to it (its own, else the fleet's)."""
    next_opening: datetime | None = None
    """When its windows next allow changes (now, when they do); None: none found ahead."""
    unreadable: tuple[str, ...] = ()
    """One line per key of it that holds another type than playguard writes there."""
    wanted: tuple[WantedPlayground, ...] = ()
    """Its Playgrounds as the desired state asks for them now (none when the story is told
    without the desired state)."""
    seen: SeenRead | None = None
    """What its last cycles saw running on its host (``coordination.containers_seen``); None:
    not read (the story told without the desired state)."""

    @property
    def fence(self) -> str:
        """Its fence, the one way every surface says it (``kits.vocabulary.fence_words``)."""
        return fence_shown(self.fence_counter, self.last)

    def windows_text(self, now: datetime) -> str:
        """Its maintenance windows in words: none, open now, or when they next open."""
        if not self.windows:
            return "none (changes allowed at any time)"
        if self.next_opening is None:
            return f"{self.windows}, closed; no opening found ahead"
        if self.next_opening <= now:
            return f"{self.windows}, open now (changes allowed)"
        opens = f"{self.next_opening:%Y-%m-%d %H:%M:%S} UTC"
        return f"{self.windows}, closed (cycles run as detect); next opens {opens}"

    @property
    def still_wrong(self) -> list[str]:
        """What the last cycle left wrong: failed items, gone branches, and drift a dry run saw."""
        if self.last is None:
            return []
        wrong = [f"failed {item}" for item in self.last.failed]
        wrong += [
            f"branch gone: {name} ({branch})" for name, branch in self.last.branch_gone.items()
        ]
        if self.last.dry_run:
            wrong += self.last.change_lines()
        wrong += [f"{name}: {'; '.join(why)}" for name, why in self.last.unhealthy.items()]
        if self.last.outcome not in ("ok", "locked"):
            wrong.insert(0, f"{self.last.outcome}: {self.last.reason or 'no reason recorded'}")
        return wrong

    @property
    def fixed(self) -> list[str]:
        """What the last cycle changed (released, fixed drift, ...), unless it was a dry run."""
        if self.last is None or self.last.dry_run:
            return []
        return self.last.change_lines()

    def to_json(self, now: float) -> dict[str, Any]:
        return {
            "name": self.name,
            "mode": self.mode,
            "paused": None if self.pause is None else self.pause.to_json(),
            "unreadable": list(self.unreadable),
            "windows": self.windows,
            "next_opening": None if self.next_opening is None else self.next_opening.isoformat(),
            "lock": None if self.lock is None else holder_json(self.lock),
            "fence_counter": self.fence_counter,
            "host_fence": None if self.last is None else self.last.host_fence,
            "last": None if self.last is None else self.last.to_json(now),
            "phases": [dataclasses.asdict(step) for step in self.steps],
            "still_wrong": self.still_wrong,
            "last_good": self.last_good,
            "revisions": {name: shown.to_json() for name, shown in self.revisions.items()},
            "fixed": self.fixed,
            "history": [cycle.to_json(now) for cycle in self.history],
        }


def phase_steps(record: StoredRecord) -> list[PhaseStep]:
    """The phases of a stored record in the order they ran; what is not in the engine's shape is
    left out."""
    durations = mapping(record.get("durations"))
    actions = mapping(record.get("actions"))
    notices = mapping(record.get("notices"))
    steps = []
    for phase, took in durations.items():
        taken = [str(action) for action in listed(actions.get(phase))]
        found = [
            (str(notice.get("kind")), str(notice.get("subject")), str(notice.get("detail")))
            for notice in listed(notices.get(phase))
            if isinstance(notice, Mapping)
        ]
        shown_actions = taken[:PHASE_ITEMS_SHOWN]
        shown_notices = found[:PHASE_ITEMS_SHOWN]
        steps.append(
            PhaseStep(
                phase=str(phase),
                seconds=float(took) if is_seconds(took) else None,
                actions=shown_actions,
                notices=shown_notices,
                more=len(taken) - len(shown_actions) + len(found) - len(shown_notices),
            )
        )
    return steps


def last_good_states(record: StoredRecord) -> dict[str, str]:
    """Playground -> its last good state, from the Playground findings of a stored record; what
    is not in the written shape is left out."""
    return {
        name: found.last_good
        for name, found in playground_findings(record.get("findings")).items()
        if found.last_good is not None
    }


def playground_revisions(record: StoredRecord) -> dict[str, PlaygroundRevisions]:
    """Playground -> its revisions, from the Playground findings of a stored record (whose
    decoder leaves out what is not of the written shape)."""
    return {
        name: PlaygroundRevisions(
            found.revision, found.last_good_revision, found.pinned, found.held_by
        )
        for name, found in playground_findings(record.get("findings")).items()
        if found.revision is not None
        or found.last_good_revision is not None
        or found.held_by is not None
    }


def _is_counter(value: object) -> TypeGuard[bytes]:
    """A fence counter as INCR writes it (anything else was set by hand or by another tool)."""
    return isinstance(value, bytes) and 0 < len(value) <= 20 and value.isdigit()


def _unreadable(lock: LockState | None, pause: Pause | None, *read: object) -> tuple[str, ...]:
    """The lines of ``unreadable``: each key of another type among what was read."""
    lines = []
    if lock is not None and lock.foreign is not None:
        lines.append(lock.foreign.describe())
    if pause is not None and pause.foreign is not None:
        lines.append(f"{pause.foreign.describe()} (read as paused)")
    return (*lines, *(item.describe() for item in read if isinstance(item, ForeignType)))


async def _last(records: CycleRecords, name: str) -> StoredRecord | ForeignType | None:
    key = last_cycle_key(name)
    return await read_typed(
        records.redis, "last-cycle key", key, records.timeout, records.last(name)
    )


async def read_status(
    records: CycleRecords, name: str, *, launchable: bool, mode: str = "apply"
) -> MarqueeStatus:
    """``name``'s lock now, its last cycle and the pause holding it back, read concurrently;
    ``launchable`` and ``mode`` are the desired state's. A key of another type is named in
    ``unreadable`` (the module's doc)."""
    (lock, fence), last, pause = await asyncio.gather(
        read_lock(records.redis, marquee_lock_name(name), timeout=records.timeout),
        _last(records, name),
        paused(records.redis, name, records.timeout),
    )
    record = None if last is None or isinstance(last, ForeignType) else last
    return MarqueeStatus(
        name=name,
        launchable=launchable,
        lock=lock,
        last=None if record is None else LastCycle.from_record(record),
        mode=mode,
        pause=pause,
        unreadable=_unreadable(lock, pause, fence, last),
        revisions={} if record is None else playground_revisions(record),
    )


async def read_story(
    records: CycleRecords,
    name: str,
    *,
    limit: int,
    mode: str = "apply",
    windows: int = 0,
    next_opening: datetime | None = None,
) -> MarqueeStory:
    """``name``'s lock, fences, pause, last cycle and up to ``limit`` recent cycles, newest
    first; its ``mode`` and maintenance windows are the desired state's, told by the caller. A
    key of another type is named in ``unreadable`` (the module's doc)."""
    redis = records.redis
    counter_key = fence_key(marquee_lock_name(name))
    history_key = cycle_history_key(name)
    (lock, _), counter, last, history, pause = await asyncio.gather(
        read_lock(redis, marquee_lock_name(name), timeout=records.timeout),
        read_typed(
            redis, "fence counter", counter_key, records.timeout,
            bounded(records.timeout, redis.get(counter_key)),
        ),
        _last(records, name),
        read_typed(
            redis, "history key", history_key, records.timeout,
            records.history(name, limit=limit),
        ),
        paused(redis, name, records.timeout),
    )  # fmt: skip
    record = None if isinstance(last, ForeignType) else last
    cycles = [] if isinstance(history, ForeignType) else history
    return MarqueeStory(
        name=name,
        lock=lock,
        fence_counter=int(counter) if _is_counter(counter) else None,
        last=None if record is None else LastCycle.from_record(record),
        steps=[] if record is None else phase_steps(record),
        last_good={} if record is None else last_good_states(record),
        revisions={} if record is None else playground_revisions(record),
        history=[LastCycle.from_record(entry) for entry in cycles],
        mode=mode,
        pause=pause,
        windows=windows,
        next_opening=next_opening,
        unreadable=_unreadable(lock, pause, counter, last, history),
    )
