"""The fleet's decisions kept outside Redis: what a replica remembers of them and what each host
keeps (``remote.kept``), so that Redis losing its data never widens a release or lifts a pin.

Every write of a decision carries a sequence number one higher than the one it replaces (a
rollout's record: ``Rollout.seq``; a Marquee's pins: ``PinsRead.seq``). A copy with a higher
number than Redis's (or a copy where Redis holds nothing) is one Redis lost: the cycle writes it
back (compare-and-set over what it read, so of two replicas one does) and says so in one log
line, ``decisions.rebuilt``. A copy with a lower number is stale and is replaced.

Two copies back Redis:

- this replica's memory: the newest record of each rollout scope and each Marquee's pins it read
  (``DecisionMemory``), so a FLUSHALL under a running replica is caught at its next cycle of the
  Marquee, with no host read;
- each host's: a copy of the records that concern it (its Playgrounds' rollouts, its pins),
  written when the replica knows the host's copy to be older, so a replica that starts after
  Redis forgot (or with it) rebuilds from the hosts. A host's copy is read at the first cycle
  of the Marquee in a process, and again at each cycle that finds Redis's record (of the
  scope, of the Marquee's pins) absent or older than the one this replica knows (what another
  replica wrote to the host since, an abort or pins this one never read, is then learnt before
  anything is admitted or written back: ``DecisionMemory.host_read_due``), and at the next
  cycle of each Marquee after the replica's tick found Redis changed (a failover or a restart
  may have taken it back to exactly a record this replica knows, losing what came after:
  ``coordination.identity``, ``DecisionMemory.forget_hosts``); never in an in-sync cycle (but
  in every cycle of a staged scope that never had a rollout: Redis has no record of it until
  the first opens), and written only when a decision changed: an in-sync cycle costs no host
  round trip and no Redis command more (the tick, one). A copy is written only over one of a
  lower write count, as the host compares it (``remote.kept.keep``): a step a replica took
  from a record Redis went back to (a wave started after a lost abort) never replaces the
  host's newer decision of the same count; the replica learns that decision instead. A
  replica that learns a decision writes it to the host of each Marquee it cycles, so every
  host of the scope carries it after a cycle of it.

An operator's rollout action is put on the hosts of its scope before the command reports
(``operator.rollout_hosts``), so it is not lost with Redis before any replica read it; what a
copy still cannot save is in the table of operations/high-availability.md in the docs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

import structlog

from playguard_async.coordination.pins import PinsRead
from playguard_async.phases.rollout_record import Rollout
from playguard_async.remote.kept import keep, read_kept
from playguard_async.remote.ssh import RemoteSession

log = structlog.get_logger("playguard.decisions")

REMEMBERED = 100_000
"""Decisions a replica remembers at most; past it, it forgets them all and reads the hosts'
copies again (one read per Marquee)."""

_Copy = TypeVar("_Copy", Rollout, PinsRead)

PINS_COPY = "pins.json"
"""The host's copy of its Marquee's pins (``{"seq": n, "pins": {playground: pin JSON}}``)."""


def rollout_copy(playground: str) -> str:
    """The host's copy of the rollout record of ``playground``'s scope."""
    return f"rollout-{playground}.json"


@dataclass
class DecisionMemory:
    """What one replica knows of the decisions: the newest record of each rollout scope and of
    each Marquee's pins it saw, and the sequence number of each host's copy (0: none)."""

    rollouts: dict[str, Rollout] = field(default_factory=dict)
    pins: dict[str, PinsRead] = field(default_factory=dict)
    on_host: dict[tuple[str, str], int] = field(default_factory=dict)

    def forget(self) -> None:
        """Forget everything, as a process that starts: the hosts' copies are read again."""
        self.rollouts.clear()
        self.pins.clear()
        self.on_host.clear()

    def _bounded(self) -> None:
        if len(self.rollouts) + len(self.pins) + len(self.on_host) > REMEMBERED:
            self.forget()

    def forget_hosts(self) -> None:
        """Read every host's copies again at its next cycle, keeping the records remembered (so
        nothing older is written back): Redis may have lost writes (a failover, a restart
        without persistence: ``coordination.identity``), and a record it went back to may be
        one this replica knows, which its cycles would take for in sync."""
        self.on_host.clear()

    def saw_rollout(self, rollout: Rollout | None, *, wins_a_tie: bool = False) -> None:
        """``rollout`` read or written: remembered when newer than what is (or as new:
        ``wins_a_tie``, a host's copy that refused a write of the same count), with the
        decisions of what is that it lacks (``Rollout.with_decisions_of``: an abort always), as
        the desk would put them back at the next cycle: a step written after an abort this
        replica learnt in the same cycle does not make it forget the abort."""
        if rollout is None:
            return
        known = self.rollouts.get(rollout.scope)
        if known is None or rollout.seq > known.seq or (wins_a_tie and rollout.seq == known.seq):
            self._bounded()
            lacking = None if known is None else rollout.with_decisions_of(known, time.time())
            self.rollouts[rollout.scope] = lacking or rollout

    def host_read_due(
        self, marquee: str, copy: str, recorded: int | None, known: Rollout | PinsRead | None
    ) -> bool:
        """Whether ``marquee``'s host copy ``copy`` must be read (again): this process never
        read it, or Redis's record (its write count, ``recorded``: -1 none it can read, None
        not read) may lack what the host keeps: there is none, or it is older than the one
        this replica knows (``known``). Another replica may have written a newer decision to
        the host since (an abort, pins this one never read), which is then learnt before
        anything older is written back. Never in a cycle in sync with Redis."""
        if (marquee, copy) not in self.on_host:
            return True
        if recorded is None:
            return False
        return recorded < 0 or (known is not None and recorded < known.seq)

    def saw_pins(self, pins: PinsRead) -> None:
        known = self.pins.get(pins.marquee)
        if known is None or pins.seq > known.seq:
            self._bounded()
            self.pins[pins.marquee] = pins


MEMORY = DecisionMemory()
"""This process's memory of the decisions (one per replica, as ``rollout_desk``'s parse cache)."""


async def kept_rollouts(
    session: RemoteSession,
    scopes: Mapping[str, str],
    recorded: Mapping[str, int],
    memory: DecisionMemory = MEMORY,
) -> dict[str, Rollout]:
    """Scope -> the newest record known outside Redis, for the scopes of ``scopes``
    (Playground -> its scope). ``recorded`` is what Redis holds now: scope -> its record's
    write count (-1: none it can read; a scope absent: Redis was not read).

    The host's copies are read first (one command) where this process has not read them yet,
    and again where Redis's record is absent or older than the newest this replica knows:
    Redis forgot or went back, and another replica may have written a newer decision to this
    host since this process read it (an abort this replica never saw). A cycle in sync with
    Redis reads no copy."""
    marquee = session.marquee.name
    unread = [
        pg
        for pg in scopes
        if memory.host_read_due(
            marquee, rollout_copy(pg), recorded.get(scopes[pg]), memory.rollouts.get(scopes[pg])
        )
    ]
    if unread:
        copies = await read_kept(session, [rollout_copy(pg) for pg in unread])
        for playground in unread:
            raw = copies.get(rollout_copy(playground))
            copy = None if raw is None else Rollout.parse(scopes[playground], raw)
            memory.on_host[marquee, rollout_copy(playground)] = 0 if copy is None else copy.seq
            memory.saw_rollout(copy)
    return {
        scope: memory.rollouts[scope] for scope in set(scopes.values()) if scope in memory.rollouts
    }


async def keep_rollouts(
    session: RemoteSession,
    records: Mapping[str, Rollout],
    memory: DecisionMemory = MEMORY,
) -> None:
    """Remember ``records`` (Playground -> its scope's record as the cycle read or wrote it),
    and write each to the host where the host's copy is older."""
    marquee = session.marquee.name
    for playground, record in records.items():
        memory.saw_rollout(record)
        known = memory.rollouts.get(record.scope, record)
        rollout = known if known.seq == record.seq else record  # with what it lacked
        copy = rollout_copy(playground)
        if rollout.seq > memory.on_host.get((marquee, copy), 0):
            parse = partial(Rollout.parse, rollout.scope)
            held = await _put(session, copy, rollout.encode(), rollout.seq, parse)
            if held is not None:
                memory.saw_rollout(held, wins_a_tie=True)
            if not session.dry_run:
                memory.on_host[marquee, copy] = rollout.seq if held is None else held.seq


async def _put(
    session: RemoteSession, copy: str, text: str, seq: int, parse: Callable[[str], _Copy | None]
) -> _Copy | None:
    """``text`` (write count ``seq``) written over the host's ``copy`` (``remote.kept.keep``),
    or the copy there when the host left it as of the same or a higher count: a record this
    replica did not know, so Redis lost it and this replica took its step from an older one
    (the caller learns it: an abort or a halt there wins by ``Rollout.with_decisions_of`` at
    the next cycle). A copy there this replica cannot read is written over, as it always was:
    garbage never blocks the host's copy."""
    held = await keep(session, copy, text, seq)
    if held is None:
        return None
    found = parse(held)
    if found is None:
        await keep(session, copy, text, None)
        return None
    log.warning("decisions.copy_ahead", marquee=session.marquee.name, copy=copy,
                host_seq=found.seq, written_seq=seq)  # fmt: skip
    return found


def encode_pins(pins: PinsRead) -> str:
    return json.dumps({"seq": pins.seq, "pins": dict(sorted(pins.raw.items()))},
                      separators=(",", ":"))  # fmt: skip


def parse_pins(marquee: str, raw: str) -> PinsRead | None:
    """A host's copy of its pins, or None (and one log line) when not of the written form."""
    try:
        fields = json.loads(raw)
        seq, pins = fields["seq"], fields["pins"]
        if (
            isinstance(seq, int)
            and not isinstance(seq, bool)
            and seq >= 0
            and isinstance(pins, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in pins.items())
        ):
            return PinsRead.of(marquee, seq, pins)
    except (ValueError, TypeError, KeyError, RecursionError):
        pass
    log.warning("decisions.copy_unreadable", marquee=marquee, copy=PINS_COPY, value=raw[:80])
    return None


async def kept_pins(
    session: RemoteSession, recorded: int, memory: DecisionMemory = MEMORY
) -> PinsRead | None:
    """The newest record of the Marquee's pins known outside Redis. ``recorded`` is the write
    count of the pins Redis holds now (0: none). The host's copy is read when this process has
    not read it yet, and again when Redis's count is below the one this replica knows, by the
    rule of the rollouts' copies (``DecisionMemory.host_read_due``): another replica may have
    written newer pins there since, which must win over this replica's older ones."""
    marquee = session.marquee.name
    if memory.host_read_due(marquee, PINS_COPY, recorded, memory.pins.get(marquee)):
        learn_pins_copy(marquee, (await read_kept(session, [PINS_COPY])).get(PINS_COPY), memory)
    return memory.pins.get(marquee)


def learn_pins_copy(marquee: str, raw: str | None, memory: DecisionMemory = MEMORY) -> None:
    """What the host's pins copy says (``raw``, None: it keeps none), remembered as read: by
    ``kept_pins``, or with the pause copies in one command (``phases.pause_copies``)."""
    copy = None if raw is None else parse_pins(marquee, raw)
    memory.on_host[marquee, PINS_COPY] = 0 if copy is None else copy.seq
    if copy is not None:
        memory.saw_pins(copy)


async def keep_pins(
    session: RemoteSession, pins: PinsRead, memory: DecisionMemory = MEMORY
) -> None:
    """Remember ``pins`` and write them to the host where its copy is older."""
    memory.saw_pins(pins)
    marquee = session.marquee.name
    if pins.seq > memory.on_host.get((marquee, PINS_COPY), 0):
        held = await _put(
            session, PINS_COPY, encode_pins(pins), pins.seq, lambda raw: parse_pins(marquee, raw)
        )
        if held is not None:
            memory.saw_pins(held)
        if not session.dry_run:
            memory.on_host[marquee, PINS_COPY] = pins.seq if held is None else held.seq
