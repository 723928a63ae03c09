"""``playguard why``: one Marquee's timeline, oldest first, from the cycle that meant a change to
the write its host accepted.

Four sources, joined here and nowhere else:

- the cycle records Redis keeps (``coordination.records``): cycle id, replica, fence, outcome,
  actions and the drift that caused them (``reconcile_playgrounds``'s findings);
- the host's journal (``remote.journal``), read back over a session that cannot write (as
  ``check`` opens one), a bounded tail: what the host accepted, each write named by the cycle
  that made it (and how far that cycle read the change log), so it still shows, marked, when
  Redis lost that cycle's record, and still names the cycle that applied a change;
- what operators did: the actions kept for the Marquee and the fleet
  (``coordination.operator_actions``: pause, resume, pin, unpin, unlock, rollout commands), and
  what Redis still holds of them otherwise: the pause and pins in force, rollout events;
- the desired state's changes: with PostgreSQL, the change log's entries for the Marquee
  (``desired_state.postgres.change_log``); with a YAML file, each new version of it the cycle
  records name (digest, mtime, git commit); each joined to the cycle whose record says it was
  the first to read it (the change-log id its snapshot saw), never by time: that cycle
  ``includes`` it, whether it then acted or not, and a cycle that acted on drift alone includes
  nothing;
- ``extra`` events from elsewhere, taken as they are.

Everything read is outside input: each text is cut to ``TEXT_LIMIT`` characters here, and the
display escapes control characters, so neither a record nor a journal line can flood or steer a
terminal.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import asyncpg
import structlog

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.operator_actions import FLEET, OperatorAction, operator_actions
from playguard_async.coordination.pause import paused
from playguard_async.coordination.pins import read_pins
from playguard_async.coordination.records import CycleRecords
from playguard_async.cycle_record import (
    DesiredVersion,
    PlaygroundFinding,
    StoredRecord,
    describe_version,
    desired_version,
    is_seconds,
    listed,
    mapping,
    notices_of,
    optional,
    playground_findings,
    reads_change,
)
from playguard_async.desired_state.model import DesiredStateUnavailable, Inventory, Marquee
from playguard_async.desired_state.postgres.change_log import ChangeEntry, read_marquee_changes
from playguard_async.desired_state.postgres.connection import DatabaseError, PgAddress
from playguard_async.desired_state.registry import source_kind
from playguard_async.kits.vocabulary import Cause, is_bookkeeping
from playguard_async.operator.fleet import Fleet, OperateError, known_marquee, open_fleet
from playguard_async.operator.rollout import rollouts_of
from playguard_async.phases.causes import CHANGE_NOTICES
from playguard_async.phases.rollout_record import Rollout
from playguard_async.remote import guard
from playguard_async.remote.errors import RemoteError
from playguard_async.remote.journal import JournalEntry, journal_started, parse_journal
from playguard_async.remote.ssh import open_session
from playguard_async.service.wiring import remote_options
from playguard_async.settings import Settings

if TYPE_CHECKING:
    from playguard_async.web.timeline import TimelineReader

log = structlog.get_logger("playguard.why")

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
    read_through: int | None = None
    """The change-log id up to which its cycle read every entry, as the line says."""

    @classmethod
    def from_entry(cls, entry: JournalEntry) -> HostWrite:
        return cls(
            entry.time, entry.fence, bounded(entry.action), entry.cycle_id, entry.read_through
        )

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "fence": self.fence, "action": self.action,
                "cycle": self.cycle_id, "read": self.read_through}  # fmt: skip


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
    """Why the cycle acted: each Playground's drift, rollback, pin or hold, as its finding
    says."""
    actions: tuple[str, ...] = ()
    writes: tuple[HostWrite, ...] = ()
    version: str | None = None
    """For a cycle: the desired state it acted on (``cycle_record.describe_version``)."""
    includes: tuple[str, ...] = ()
    """For a cycle: the inputs it is the first to read (``change`` and ``desired state`` events,
    each joined to the first cycle that read it: ``Event.included_in``)."""
    included_in: str | None = None
    """For an input: the cycle id of the first cycle that read it (``including_cycles``)."""
    read_by_or_before: str | None = None
    """For a change no cycle still recorded is known to be the first to read: the oldest cycle
    recorded that read it (the first may be one before it, whose record is gone)."""
    applied_by: str | None = None
    """For a change whose first reader no record kept: the cycle the host's journal names as
    the first to write having read it (``journal_appliers``)."""
    change_id: int | None = None
    """For a change: its change-log id."""

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at, "kind": self.kind, "text": self.text, "by": self.by,
            "cycle": self.cycle_id, "fence": self.fence, "outcome": self.outcome,
            "causes": list(self.causes), "actions": list(self.actions),
            "writes": [write.to_json() for write in self.writes], "version": self.version,
            "includes": list(self.includes), "included_in": self.included_in,
            "read_by_or_before": self.read_by_or_before, "applied_by": self.applied_by,
            "change": self.change_id,
        }  # fmt: skip


@dataclass(frozen=True)
class HostJournal:
    """The host's journal as read: its writes, oldest first, and when it started if it is whole
    (``journal.journal_started``: None when cut or emptied; 0.0 when the host has none)."""

    writes: list[HostWrite]
    started: float | None

    @property
    def begins(self) -> float | None:
        """The time from which the journal tells every write: when it started if whole, else
        its first write's (None: cut and holding nothing)."""
        if self.started is not None:
            return self.started
        return self.writes[0].at if self.writes else None

    def covers(self, since: float) -> bool:
        """Whether every write the host accepted from ``since`` is in it: it is whole, or its
        first write is older than ``since``."""
        begins = self.begins
        return self.started is not None or (begins is not None and begins <= since)


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
    changes_unread: str | None = None
    """Why PostgreSQL's change log was not read; None when it was, or the source has none."""
    journal: HostJournal | None = None
    """What the host's journal held, when it was read."""

    @property
    def journal_cut(self) -> bool:
        """Whether the host's journal was read but does not reach back to ``since``: cut (by
        its bound, or by a hand) after it, or emptied."""
        return self.journal is not None and not self.journal.covers(self.since)

    @property
    def complete(self) -> bool:
        """Whether every source was read whole back to ``since`` (else ``why`` exits 1)."""
        return self.host_unread is None and self.changes_unread is None and not self.journal_cut

    def to_json(self) -> dict[str, Any]:
        return {
            "marquee": self.marquee, "playground": self.playground, "since": self.since,
            "host_read": self.host_unread is None, "host_unread": self.host_unread,
            "changes_read": self.changes_unread is None, "changes_unread": self.changes_unread,
            "cycles_kept": self.cycles_kept, "playground_wanted": self.playground_wanted,
            "journal_begins": None if self.journal is None else self.journal.begins,
            "journal_started": None if self.journal is None else self.journal.started,
            "journal_cut": self.journal_cut,
            "events": [event.to_json() for event in self.events],
        }  # fmt: skip


@dataclass
class Sources:
    """What was read, before it is joined."""

    records: list[StoredRecord] = field(default_factory=list)
    writes: list[HostWrite] = field(default_factory=list)
    operator_events: list[Event] = field(default_factory=list)
    changes: list[Event] = field(default_factory=list)


async def marquee_timeline(
    settings: Settings,
    name: str,
    *,
    playground: str | None,
    since: float,
    extra: Sequence[Event] = (),
) -> Timeline:
    """``name``'s timeline from ``since`` (Unix seconds), oldest first, for one ``playground``
    or all; ``extra`` events (another source's, already read) join it as they are. Each source
    that cannot be read is said and the others still give the timeline: the host's journal
    (``host_unread``), PostgreSQL's change log (``changes_unread``); a database out of reach
    altogether leaves the host unread too (its address is in the desired state) and the Marquee
    unchecked, and what Redis holds still shows."""
    sources = Sources()
    async with open_fleet(settings) as fleet:
        inventory: Inventory | None = None
        desired_unread: str | None = None
        try:
            inventory = await fleet.inventory()
        except DesiredStateUnavailable as exc:
            desired_unread = bounded(str(exc))
        marquee = None if inventory is None else known_marquee(inventory, name, "the desired state")
        wanted = (
            inventory is None
            or playground is None
            or any(known.name == playground for known in inventory.playgrounds_on(name))
        )
        await _read_redis(fleet, settings, name, inventory, sources)
    changes_unread = desired_unread
    if source_kind(settings.desired_state).database and desired_unread is None:
        keys = None if playground is None else [playground, name]
        try:
            sources.changes = await _change_events(settings, name, since=since, keys=keys)
        except (DatabaseError, asyncpg.PostgresError, asyncpg.InterfaceError, OSError,
                TimeoutError) as exc:  # fmt: skip
            changes_unread = bounded(str(exc) or type(exc).__name__)
    host_unread, journal = None, None
    if marquee is None:
        host_unread = f"its address is in the desired state, not read: {desired_unread}"
    else:
        try:
            journal = await read_host_journal(marquee, settings)
            sources.writes = journal.writes
        except (RemoteError, OSError, TimeoutError) as exc:
            host_unread = bounded(str(exc) or type(exc).__name__)
    events = joined(sources, extra=extra, playground=playground, since=since)
    return Timeline(name, playground, since, events, host_unread, len(sources.records), wanted,
                    changes_unread, journal)  # fmt: skip


def timeline_reader(settings: Settings) -> TimelineReader:
    """``marquee_timeline`` with ``settings``, for the daemon's web view: what stops it from
    reading anything (Redis, an unknown Marquee) raised as ``TimelineUnavailable``, logged
    here with its reason. (The web view's module is imported here, not by ``playguard why``.)"""
    from playguard_async.web.timeline import TimelineUnavailable  # noqa: PLC0415

    async def read(name: str, *, playground: str | None, since: float) -> Timeline:
        try:
            return await marquee_timeline(settings, name, playground=playground, since=since)
        except OperateError as exc:
            log.warning("web.timeline_unavailable", marquee=name, why=bounded(str(exc)))
            raise TimelineUnavailable(name) from exc

    return read


async def _read_redis(
    fleet: Fleet, settings: Settings, name: str, inventory: Inventory | None, sources: Sources
) -> None:
    """What Redis holds of ``name``: its cycle records, the operator actions kept for it and for
    the fleet (rollout commands: of its rollouts only), and what is in force that no kept action
    tells (a pause, pins, rollout events). Without ``inventory`` its rollouts are not known."""
    timeout = settings.redis_socket_timeout
    records = CycleRecords(fleet.redis, history_length=settings.history_length, timeout=timeout)
    sources.records = await records.history(name)
    rollouts = []
    if inventory is not None:
        rollouts = [rollout for rollout, _wave in await rollouts_of(fleet.redis, inventory, name,
                                                                     timeout)]  # fmt: skip
    scopes = {rollout.scope for rollout in rollouts}
    kept = await operator_actions(fleet.redis, name, timeout)
    kept += [
        action
        for action in await operator_actions(fleet.redis, FLEET, timeout)
        if action.target in scopes or not action.action.startswith("rollout ")
    ]
    sources.operator_events = _kept_action_events(kept)
    sources.operator_events += _unkept(
        await _operator_events(fleet.redis, name, timeout) + _rollout_events(rollouts), kept
    )


async def read_host_journal(marquee: Marquee, settings: Settings) -> HostJournal:
    """The tail of the host's journal (``guard.JOURNAL_LIMIT`` bytes at most: the journal's own
    bound), over a session that cannot write: its writes, oldest first, and whether it is whole."""
    options = remote_options(settings)
    async with (
        asyncio.timeout(options.connect_timeout + options.command_timeout),
        open_session(marquee, options, dry_run=True) as session,
    ):
        result = await session.run(guard.read_journal(marquee, guard.JOURNAL_LIMIT))
    writes = [HostWrite.from_entry(entry) for entry in parse_journal(result.stdout)]
    return HostJournal(writes, journal_started(result.stdout))


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


async def _change_events(
    settings: Settings, name: str, *, since: float, keys: list[str] | None
) -> list[Event]:
    """The change log's entries for ``name`` (rows keyed by one of ``keys``, all when None)
    from ``since``, each an event; read with the daemon's own connection settings."""
    entries = await read_marquee_changes(
        PgAddress.parse(settings.desired_state), settings.database_password(),
        settings.desired_state_schema, name, since=since, keys=keys,
        timeout=settings.desired_state_timeout,
    )  # fmt: skip
    return [change_event(entry) for entry in entries]


def change_event(entry: ChangeEntry) -> Event:
    """A change-log entry as an event: ``relation key columns changed``, by its actor as
    claimed and the role that made it (``ChangeEntry.who``)."""
    what = {
        "INSERT": "inserted",
        "DELETE": "deleted",
        "TRUNCATE": "truncated (every row)",
        "PRUNE": "entries cut up to the anchor (seq, hash)",
    }.get(entry.operation, "?")
    if entry.operation == "UPDATE":
        what = f"{', '.join(entry.columns) or 'nothing'} changed"
    key = "?" if entry.key is None else entry.key
    text = f"change {entry.change_id}: {entry.relation} {key}: {what}"
    who = replace(entry, actor=bounded(entry.actor, 200)).who()
    return Event(entry.at, "change", bounded(text), bounded(who), change_id=entry.change_id)


def version_events(records: Sequence[StoredRecord]) -> list[Event]:
    """One ``desired state`` event for each new version of a YAML file that the cycle records
    name, oldest first, at the file's mtime: when a record's version differs from the record
    before it (the first record kept tells no change: nothing before it is known), included
    in that record's cycle, the first that read it."""
    events = []
    previous: DesiredVersion | None = None
    for record in sorted(records, key=_record_start):
        version = desired_version(record.get("desired"))
        if version is None or "change" in version:
            continue  # none recorded, or PostgreSQL's (its change log tells its changes)
        if previous is not None and version != previous:
            at = version.get("mtime", _record_start(record))
            text = f"desired state file changed: {describe_version(version)}"
            cycle_id = record.get("cycle")
            included_in = cycle_id if isinstance(cycle_id, str) else None
            events.append(Event(at, "desired state", text, "file", included_in=included_in))
        previous = version
    return events


def _record_start(record: StoredRecord) -> float:
    finished, duration = record.get("finished_at"), record.get("duration")
    if is_seconds(finished) and is_seconds(duration):
        return float(finished) - float(duration)
    return 0.0


def _kept_action_events(actions: Iterable[OperatorAction]) -> list[Event]:
    """The operator actions kept, each an event of its kind (``pause``, ``pin``, ``rollout``...)
    that says what, to what and why; a rollout command as the rollout's own events say one
    (``<scope>: <command>: <why>``)."""
    events = []
    for action in actions:
        kind, _, command = action.action.partition(" ")
        if kind == "rollout":
            text = f"{action.target}: {command}: {action.reason}"
        else:
            text = f"{action.action} {action.target or action.scope}"
            text += f": {action.reason}" if action.reason else ""
        events.append(Event(action.at, kind, bounded(text), bounded(action.by)))
    return events


def _unkept(events: Iterable[Event], kept: Iterable[OperatorAction]) -> list[Event]:
    """``events`` read from what is in force (a pause, a pin, a rollout's events) but for those
    a kept action already tells: taken at the same time by the same operator."""
    told = {(round(action.at, 3), bounded(action.by)) for action in kept}
    return [event for event in events if (round(event.at, 3), event.by) not in told]


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
    first. A cycle that changed nothing is left out unless it is the one that read an input.
    playguard's own bookkeeping on the host (``kits.vocabulary.is_bookkeeping``) changed nothing
    of the Marquee: no event shows it."""
    writes = [write for write in sources.writes if not is_bookkeeping(write.action)]
    by_cycle: dict[str, list[HostWrite]] = {}
    for write in writes:
        if write.cycle_id is not None:
            by_cycle.setdefault(write.cycle_id, []).append(write)
    inputs = [*sources.changes, *version_events(sources.records)]
    events = list(extra) + sources.operator_events
    recorded = set()
    cycles: list[tuple[Event, DesiredVersion | None]] = []
    for record in sources.records:
        event = _cycle_event(record, by_cycle)
        if event is None:
            continue
        recorded.add(event.cycle_id)
        cycles.append((event, desired_version(record.get("desired"))))
    included, including = including_cycles(inputs, cycles)
    included = journal_appliers(included, writes, recorded)
    events += included + [
        cycle
        for cycle in including
        if cycle.actions or cycle.writes or cycle.includes or cycle.outcome not in QUIET_OUTCOMES
    ]
    for write in writes:
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


def including_cycles(
    inputs: Sequence[Event], cycles: Sequence[tuple[Event, DesiredVersion | None]]
) -> tuple[list[Event], list[Event]]:
    """Each input joined to the cycle that first read it, never by time: a change-log entry to
    the first of ``cycles`` (each with the version its record says it read) whose snapshot saw
    its id (``cycle_record.reads_change``), when a cycle before it read the log without it;
    when none did (the cycles before are no longer recorded), to that cycle "or one before
    it" (``read_by_or_before``). A YAML file's version comes joined (``version_events``).
    The inputs naming their cycle (``included_in``), the cycles (by start) naming their inputs
    (``includes``); an input no cycle read yet names none."""
    by_start = sorted(cycles, key=lambda cycle: cycle[0].at)
    includes: dict[str, list[str]] = {}
    joined_inputs = []
    for event in inputs:
        read = _joined_input(event, by_start)
        if read.included_in is not None:
            includes.setdefault(read.included_in, []).append(read.text.split(":", 1)[0])
        joined_inputs.append(read)
    joined_cycles = [
        replace(cycle, includes=tuple(includes.get(cycle.cycle_id or "", ())))
        for cycle, _version in by_start
    ]
    return joined_inputs, joined_cycles


def journal_appliers(
    inputs: Sequence[Event], writes: Sequence[HostWrite], recorded: set[str | None]
) -> list[Event]:
    """``inputs``, each change no kept record is known to be the first to read naming the cycle
    that applied it (``applied_by``), from the host's journal: the first write (oldest first)
    whose cycle read the log through its id, when that cycle has no record any more. A change a
    recorded cycle is the first to read (``included_in``) keeps its join; one whose oldest
    recorded reader is also the first to journal it stays ``read_by_or_before``."""
    return [_journal_applier(event, writes, recorded) for event in inputs]


def _journal_applier(event: Event, writes: Sequence[HostWrite], recorded: set[str | None]) -> Event:
    change = event.change_id
    if change is None or event.included_in is not None:
        return event
    first = next(
        (
            write
            for write in writes
            if write.read_through is not None and write.read_through >= change
        ),
        None,
    )
    if first is None or first.cycle_id in recorded:
        return event
    return replace(event, applied_by=first.cycle_id, read_by_or_before=None)


def _joined_input(event: Event, by_start: Sequence[tuple[Event, DesiredVersion | None]]) -> Event:
    """``event`` naming the first cycle whose record says it read it, if it is a change: as
    ``included_in`` when a cycle recorded before that one read the log without it, else as
    ``read_by_or_before`` (the one that first read it may be older than every record kept)."""
    if event.change_id is None:
        return event
    read_before = False
    for cycle, version in by_start:
        if reads_change(version, event.change_id):
            if read_before:
                return replace(event, included_in=cycle.cycle_id)
            return replace(event, read_by_or_before=cycle.cycle_id)
        read_before = read_before or (version is not None and "change" in version)
    return event


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
    said = _change_notices(record)
    causes = tuple(
        bounded(f"playground {name}: {cause}")
        for name, finding in playground_findings(record.get("findings")).items()
        for cause in _causes(finding, said.get(name, []))
    ) + tuple(bounded(cause) for cause in _phase_causes(mapping(record.get("findings"))))
    version = desired_version(record.get("desired"))
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
        version=None if version is None else describe_version(version),
    )


def _phase_causes(findings: Mapping[str, Any]) -> list[str]:
    """What other phases' findings say moved the cycle: an image whose tag the registry now
    serves at another digest (``pull_images``), a rollout wave the Marquee took part in
    (``reconcile_playgrounds``). Outside input: what is not of the written shape is passed
    over."""
    causes = []
    for reference, image in mapping(mapping(findings.get("pull_images")).get("images")).items():
        state, digest = mapping(image).get("state"), mapping(image).get("digest")
        if state in ("pulled", "would pull") and isinstance(digest, str):
            short = digest.removeprefix("sha256:")[:12]
            causes.append(f"image {reference}: its tag now names {short} ({state})")
    for scope, rollout in mapping(
        mapping(findings.get("reconcile_playgrounds")).get("rollouts")
    ).items():
        wave, waves = mapping(rollout).get("wave"), mapping(rollout).get("waves")
        status = mapping(rollout).get("status")
        if isinstance(wave, int) and isinstance(waves, int) and isinstance(status, str):
            causes.append(f"rollout {scope}: wave {wave} of {waves}, {status}")
    return causes


def _change_notices(record: StoredRecord) -> dict[str, list[tuple[Cause, str]]]:
    """Playground -> why the cycle changed it, in the glossary's words, as its notices say
    (``phases.causes``); outside input: notices not of the written shape are passed over."""
    causes = {notice: cause for cause, notice in CHANGE_NOTICES.items()}
    said: dict[str, list[tuple[Cause, str]]] = {}
    try:
        for _, kind, subject, detail in notices_of(record):
            if kind in causes:
                said.setdefault(subject, []).append((causes[kind], detail))
    except (KeyError, TypeError, ValueError, AttributeError):
        return {}
    return said


def _causes(finding: PlaygroundFinding, said: list[tuple[Cause, str]]) -> list[str]:
    """What moved the cycle for a Playground, each cause in the glossary's words: a release or
    drift (as its notices say), a rollback, a pin, a rollout's hold, inputs held back."""
    causes = [f"{cause.word}: {detail}" for cause, detail in said]
    if finding.rollback is not None:
        causes.append(f"{Cause.ROLLBACK.word}: {finding.rollback}")
    if finding.pinned is not None:
        causes.append(f"{Cause.PIN.word}: {finding.pinned}")
    elif finding.held_by is not None:
        causes.append(f"{Cause.HOLD.word}: {finding.held_by}")
    if finding.held is not None:
        causes.append(f"held back: {finding.held}")
    if finding.rollback_blocked is not None:
        causes.append(f"not rolled back: {finding.rollback_blocked}")
    return causes


def _about(event: Event, playground: str | None) -> bool:
    """Whether ``event`` concerns ``playground`` (every event does when None): a cycle that acted
    on it or found it drifted, a write to it, a pin of it; a pause or a rollout of the Marquee."""
    if playground is None or event.kind in ("pause", "resume", "rollout", "unlock", "change",
                                            "desired state"):  # fmt: skip
        return True
    named = re.compile(rf"playground {re.escape(playground)}(?![\w.-])")
    texts: Iterable[str] = (
        event.text, *event.causes, *event.actions, *(write.action for write in event.writes),
    )  # fmt: skip
    return any(named.search(text) for text in texts)
