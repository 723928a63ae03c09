"""``playguard why``: one Marquee's timeline, oldest first, from the cycle that meant a change to
the write its host accepted.

Four sources, joined here and nowhere else:

- the cycle records Redis keeps (``coordination.records``): cycle id, replica, fence, outcome,
  actions and the drift that caused them (``reconcile_playgrounds``'s findings);
- the host's journal (``remote.journal``), read back over a session that cannot write (as
  ``check`` opens one), a bounded tail: what the host accepted, each write named by the cycle
  that made it, so it still shows, marked, when Redis lost that cycle's record;
- what operators did that Redis still holds: the pause, pins (who, why, since), rollout events;
- ``extra`` events from elsewhere (a database's change log), taken as they are.

Everything read is outside input: each text is cut to ``TEXT_LIMIT`` characters here, and the
display escapes control characters, so neither a record nor a journal line can flood or steer a
terminal.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.pause import paused
from playguard_async.coordination.pins import read_pins
from playguard_async.coordination.records import CycleRecords
from playguard_async.cycle_record import (
    StoredRecord,
    is_seconds,
    listed,
    mapping,
    optional,
    playground_findings,
)
from playguard_async.desired_state.model import Marquee
from playguard_async.operator.fleet import known_marquee, open_fleet
from playguard_async.operator.rollout import rollouts_of
from playguard_async.phases.rollout_record import Rollout
from playguard_async.remote import guard
from playguard_async.remote.errors import RemoteError
from playguard_async.remote.journal import JournalEntry, parse_journal
from playguard_async.remote.ssh import open_session
from playguard_async.service.wiring import remote_options
from playguard_async.settings import Settings

TEXT_LIMIT = 300
"""Characters of any one text (an action, a reason, a who) the timeline keeps."""

QUIET_OUTCOMES = ("ok", "locked", "paused")
"""Outcomes of a cycle that, with no action and no host write, changed nothing: left out."""

NO_CYCLE_RECORD = "no cycle record"
"""How a host write whose cycle Redis no longer holds (or never did) is marked."""


def bounded(text: str, limit: int = TEXT_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class HostWrite:
    """A write the host's guard accepted, as its journal holds it."""

    at: float
    fence: int
    action: str
    cycle_id: str | None

    @classmethod
    def from_entry(cls, entry: JournalEntry) -> HostWrite:
        return cls(entry.time, entry.fence, bounded(entry.action), entry.cycle_id)

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "fence": self.fence, "action": self.action, "cycle": self.cycle_id}


@dataclass(frozen=True)
class Event:
    """One line of the timeline: a cycle (with the host writes it made), a host write with no
    cycle record, or something an operator or the desired state did.

    ``kind`` says which (``cycle``, ``host write``, ``pause``, ``pin``, ``rollout``, or what an
    ``extra`` source names); ``by`` who or what did it; ``text`` what, with why."""

    at: float
    kind: str
    text: str
    by: str = ""
    cycle_id: str | None = None
    fence: int | None = None
    outcome: str | None = None
    causes: tuple[str, ...] = ()
    """Why the cycle acted: each Playground's drift, as its finding says."""
    actions: tuple[str, ...] = ()
    writes: tuple[HostWrite, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at, "kind": self.kind, "text": self.text, "by": self.by,
            "cycle": self.cycle_id, "fence": self.fence, "outcome": self.outcome,
            "causes": list(self.causes), "actions": list(self.actions),
            "writes": [write.to_json() for write in self.writes],
        }  # fmt: skip


@dataclass(frozen=True)
class Timeline:
    marquee: str
    playground: str | None
    since: float
    events: list[Event]
    host_unread: str | None = None
    """Why the host's journal was not read; None when it was."""
    cycles_kept: int = 0
    """How many cycle records Redis held for the Marquee, the quiet ones too."""
    playground_wanted: bool = True
    """False when ``playground`` is not in the desired state now (a typo, or one removed: its
    past still shows)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "marquee": self.marquee, "playground": self.playground, "since": self.since,
            "host_read": self.host_unread is None, "host_unread": self.host_unread,
            "cycles_kept": self.cycles_kept, "playground_wanted": self.playground_wanted,
            "events": [event.to_json() for event in self.events],
        }  # fmt: skip


@dataclass
class Sources:
    """What was read, before it is joined."""

    records: list[StoredRecord] = field(default_factory=list)
    writes: list[HostWrite] = field(default_factory=list)
    operator_events: list[Event] = field(default_factory=list)


async def marquee_timeline(
    settings: Settings,
    name: str,
    *,
    playground: str | None,
    since: float,
    extra: Sequence[Event] = (),
) -> Timeline:
    """``name``'s timeline from ``since`` (Unix seconds), oldest first, for one ``playground``
    or all; ``extra`` events (another source's, already read) join it as they are. The host's
    journal is read last: when it cannot be, the timeline still holds what Redis had, and
    ``host_unread`` says why."""
    sources = Sources()
    timeout = settings.redis_socket_timeout
    async with open_fleet(settings) as fleet:
        inventory = await fleet.inventory()
        marquee = known_marquee(inventory, name, "the desired state")
        wanted = playground is None or any(
            known.name == playground for known in inventory.playgrounds_on(name)
        )
        records = CycleRecords(fleet.redis, history_length=settings.history_length, timeout=timeout)
        sources.records = await records.history(name)
        sources.operator_events = await _operator_events(fleet.redis, name, timeout)
        rollouts = await rollouts_of(fleet.redis, inventory, name, timeout)
        sources.operator_events.extend(_rollout_events(rollout for rollout, _wave in rollouts))
    host_unread = None
    try:
        sources.writes = await read_host_writes(marquee, settings)
    except (RemoteError, OSError, TimeoutError) as exc:
        host_unread = bounded(str(exc) or type(exc).__name__)
    events = joined(sources, extra=extra, playground=playground, since=since)
    return Timeline(name, playground, since, events, host_unread, len(sources.records), wanted)


async def read_host_writes(marquee: Marquee, settings: Settings) -> list[HostWrite]:
    """The writes in the tail of the host's journal (``guard.JOURNAL_LIMIT`` bytes at most: the
    journal's own bound), oldest first, over a session that cannot write."""
    options = remote_options(settings)
    async with (
        asyncio.timeout(options.connect_timeout + options.command_timeout),
        open_session(marquee, options, dry_run=True) as session,
    ):
        result = await session.run(guard.read_journal(marquee, guard.JOURNAL_LIMIT))
    return [HostWrite.from_entry(entry) for entry in parse_journal(result.stdout)]


async def _operator_events(redis: RedisClient, name: str, timeout: float) -> list[Event]:
    """The pause and the pins Redis holds for ``name``, each as the event of its taking."""
    events = []
    pause = await paused(redis, name, timeout)
    if pause is not None and pause.known:
        events.append(Event(pause.since, "pause", bounded(pause.describe()), bounded(pause.by)))
    for pin in (await read_pins(redis, name, timeout)).values():
        text = f"pin playground {pin.playground}: {pin.describe()}"
        events.append(Event(pin.since, "pin", bounded(text), bounded(pin.by)))
    return events


def _rollout_events(rollouts: Iterable[Rollout]) -> list[Event]:
    """The events of ``rollouts``: waves, failures, and what operators did to them, with why."""
    return [
        Event(
            event.at,
            "rollout",
            bounded(f"{rollout.scope}: {event.what}: {event.why}"),
            bounded(event.by),
        )
        for rollout in rollouts
        for event in rollout.events
    ]


def joined(
    sources: Sources, *, extra: Sequence[Event], playground: str | None, since: float
) -> list[Event]:
    """The cycles with the host writes they made (joined on cycle id), the host writes of no
    recorded cycle, and the other events: from ``since``, about ``playground`` (or all), oldest
    first."""
    by_cycle: dict[str, list[HostWrite]] = {}
    for write in sources.writes:
        if write.cycle_id is not None:
            by_cycle.setdefault(write.cycle_id, []).append(write)
    events = list(extra) + sources.operator_events
    recorded = set()
    for record in sources.records:
        event = _cycle_event(record, by_cycle)
        if event is None:
            continue
        recorded.add(event.cycle_id)
        if event.actions or event.writes or event.outcome not in QUIET_OUTCOMES:
            events.append(event)
    for write in sources.writes:
        if write.cycle_id is None or write.cycle_id not in recorded:
            events.append(
                Event(
                    write.at,
                    "host write",
                    write.action,
                    NO_CYCLE_RECORD,
                    write.cycle_id,
                    write.fence,
                    writes=(write,),
                )
            )
    kept = [e for e in events if e.at >= since and _about(e, playground)]
    return sorted(kept, key=lambda event: event.at)


def _cycle_event(record: StoredRecord, by_cycle: dict[str, list[HostWrite]]) -> Event | None:
    """A recorded cycle as an event at its start, with its host writes; None for a record not
    of the written shape."""
    cycle_id, finished = record.get("cycle"), record.get("finished_at")
    duration = record.get("duration")
    if not isinstance(cycle_id, str) or not is_seconds(finished) or not is_seconds(duration):
        return None
    try:
        fence = optional(record.get("fence"), int)
    except ValueError:
        fence = None
    actions = tuple(
        bounded(action)
        for done in mapping(record.get("actions")).values()
        for action in listed(done)
        if isinstance(action, str)
    )
    causes = tuple(
        bounded(f"playground {name}: {'; '.join(finding.drift)}")
        for name, finding in playground_findings(record.get("findings")).items()
        if finding.drift
    )
    outcome, replica = record.get("outcome"), record.get("replica")
    outcome = bounded(outcome) if isinstance(outcome, str) else "?"
    reason = record.get("reason")
    text = f"cycle {bounded(cycle_id, 40)} {outcome}"
    if isinstance(reason, str) and reason:
        text += f": {bounded(reason)}"
    return Event(
        at=float(finished) - float(duration),
        kind="cycle",
        text=text,
        by=f"replica {bounded(replica, 100)}" if isinstance(replica, str) else "replica ?",
        cycle_id=cycle_id,
        fence=fence,
        outcome=outcome,
        causes=causes,
        actions=actions,
        writes=tuple(by_cycle.get(cycle_id, ())),
    )


def _about(event: Event, playground: str | None) -> bool:
    """Whether ``event`` concerns ``playground`` (every event does when None): a cycle that acted
    on it or found it drifted, a write to it, a pin of it; a pause or a rollout of the Marquee."""
    if playground is None or event.kind in ("pause", "rollout"):
        return True
    named = re.compile(rf"playground {re.escape(playground)}(?![\w.-])")
    texts: Iterable[str] = (
        event.text, *event.causes, *event.actions, *(write.action for write in event.writes),
    )  # fmt: skip
    return any(named.search(text) for text in texts)
