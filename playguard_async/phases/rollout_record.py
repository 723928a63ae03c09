"""A rollout's record: the one state of a release's way through the fleet, shared by every replica.

One record per scope (a Playspec at a branch, ``playspec@branch``), replaced when a new release
of that scope opens a rollout. It holds what every replica must agree on and nothing that grows
with the fleet beyond the failed Marquees: the target release, the policy and waves as they were
when it opened (each wave a cutoff in the admission order and a size), the current wave, when it
started and when all of it was healthy, the status, the failed Marquees (with their wave) and
the last events (who did what, and why). Which Marquees were verified healthy is counted beside
it (``coordination.rollouts``).

Every change is a new record computed here from the one read (pure functions, no I/O) and
written by compare-and-set, so of two replicas that compute the same step only one writes it.
Times are Redis's clock (``TIME``), the one clock every replica shares.

A record is outside input (anyone with redis-cli may have written it): one not of the written
form, of the wrong types or too large reads as no record, with one log line.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

import structlog
from pydantic import ValidationError

from playguard_async.desired_state.rollout_policy import RolloutPolicy, Wave, wave_of
from playguard_async.kits.revision_shapes import DIGEST, is_commit

log = structlog.get_logger("playguard.rollouts")

Status = Literal["running", "paused", "halted", "aborted", "done"]
STATUSES: tuple[Status, ...] = ("running", "paused", "halted", "aborted", "done")

RECORD_MAX = 64 << 10
"""Bytes of a record that is read at all; a larger one is garbage."""

FAILED_KEPT = 100
"""Failed Marquees named in a record; past it they are counted."""

EVENTS_KEPT = 20
"""Events a record keeps, newest last."""

ABORTED_KEPT = 20
"""Aborted releases of earlier rollouts a record names, newest last."""

SUPERSEDED_KEPT = 20
"""Releases of earlier rollouts (their targets) a record names as replaced, newest last."""

TEXT_MAX = 500
"""Characters of a reason or a name shown from a record."""


LIFTED_BY: dict[Status, tuple[str, tuple[str, ...]]] = {
    "halted": ("halted", ("promote",)),
    "paused": ("pause", ("resume", "promote")),
}
"""A status that only an operator lifts: the event that took it, the actions that lift it."""


class RolloutRefused(Exception):
    """An operator's action that the rollout's status does not allow; says why in words."""


@dataclass(frozen=True)
class Event:
    """Something that happened to a rollout: a wave started, a Marquee failed, an operator's
    action (``by`` user@host, else "playguard"), with why."""

    at: float
    what: str
    by: str
    why: str

    def to_json(self) -> dict[str, object]:
        return {"at": self.at, "what": self.what, "by": self.by, "why": self.why}


@dataclass(frozen=True)
class Failure:
    marquee: str
    wave: int
    why: str


@dataclass(frozen=True)
class Rollout:
    """The rollout of release ``target`` (``commit`` at the branch head) to ``scope``'s cohort."""

    scope: str
    id: str
    target: str
    commit: str | None
    policy: RolloutPolicy
    waves: tuple[Wave, ...]
    wave: int
    started: float
    opened: float
    status: Status = "running"
    healthy_at: float | None = None
    failures: tuple[Failure, ...] = ()
    failed_count: int = 0
    why: str = ""
    events: tuple[Event, ...] = field(default=())
    seq: int = 0
    """How many times the scope's record was written, this one included: what tells a copy
    that Redis lost (a host's, ``phases.rollout_copies``) from one it replaced. Records
    written before it existed read as 0."""
    aborted_before: tuple[str, ...] = ()
    """The releases of the scope's earlier rollouts that were aborted (the last
    ``ABORTED_KEPT``), carried from record to record when a newer release opens, so an abort
    stays the release's whatever rollout is the scope's now. Records written before it
    existed read as none."""
    superseded_before: tuple[str, ...] = ()
    """The targets of the scope's earlier rollouts (the last ``SUPERSEDED_KEPT``), carried from
    record to record: releases the scope has moved past, which no view that lags (a host's
    ``ls-remote`` of a mirror behind, a registry answer from before a push) may open again
    (``RolloutDesk``). Records written before it existed read as none."""

    @property
    def aborted(self) -> frozenset[str]:
        """Every release of the scope known aborted: this record's target when it is, and the
        earlier ones'."""
        return frozenset(self.aborted_so_far())

    def aborted_so_far(self) -> tuple[str, ...]:
        """What a record that replaces this one carries as ``aborted_before``."""
        own = (self.target,) if self.status == "aborted" else ()
        kept = [release for release in self.aborted_before if release not in own]
        return (*kept, *own)[-ABORTED_KEPT:]

    def superseded_so_far(self) -> tuple[str, ...]:
        """What a record that replaces this one carries as ``superseded_before``."""
        return (*self.superseded_before, self.target)[-SUPERSEDED_KEPT:]

    def stored_over(self, was: Rollout | None) -> Rollout:
        """This record as the write that replaces ``was`` (None: no record) stores it: one
        write later than ``was``."""
        return replace(self, seq=(0 if was is None else was.seq) + 1)

    @classmethod
    def open(
        cls,
        scope: str,
        target: str,
        commit: str | None,
        policy: RolloutPolicy,
        waves: Sequence[Wave],
        *,
        now: float,
        after: Rollout | None = None,
    ) -> Rollout:
        """A rollout of ``target`` that replaces ``after`` (the scope's record, None: none),
        whose aborted and superseded releases it carries (``after``'s target among the
        latter)."""
        aborted = () if after is None else after.aborted_so_far()
        superseded = () if after is None else after.superseded_so_far()
        ident = hashlib.sha256(f"{scope}\0{target}\0{now}".encode()).hexdigest()[:16]
        opened = Event(now, "opened", "playguard", f"release {target[:12]} in {len(waves)} waves")
        return cls(scope, ident, target, commit, policy, tuple(waves), 0, now, now,
                   events=(opened,), aborted_before=aborted,
                   superseded_before=superseded)  # fmt: skip

    def rebuilt(self, lost: Rollout | None, now: float) -> Rollout:
        """This record (a copy kept outside Redis, newer than what Redis holds: ``lost``, None
        when it holds none) as written back, one write later, with an event that says so."""
        had = "no record" if lost is None else f"write {lost.seq} of it"
        event = Event(now, "rebuilt", "playguard", f"Redis had {had}; write {self.seq} was kept")
        return replace(self, seq=self.seq + 1, events=self._with(event))

    def with_decisions_of(self, kept: Rollout, now: float) -> Rollout | None:
        """This record (Redis's) with the decisions of ``kept`` (a copy no newer by its write
        count) that it lacks, with an event that says so, or None when it lacks none. Two
        replicas that rebuilt from copies of different ages count on from the same number, so
        a count alone cannot tell a decision Redis lost from one a later write replaced. The
        decisions say it themselves: an abort is final (the release's, whatever record carries
        it), and a halt stands until an operator's promote after it, a pause until a resume or a
        promote, so either comes back unless this record says it was lifted."""
        aborted = [release for release in kept.aborted_so_far() if release not in self.aborted]
        status, why = self.status, self.why
        if self.target in aborted:
            status, why = "aborted", kept.why if kept.id == self.id else self.why
        elif kept.id == self.id and self.status == "running" and kept.status in LIFTED_BY:
            decision, lifts = LIFTED_BY[kept.status]
            taken = max((e.at for e in kept.events if e.what == decision), default=kept.opened)
            if not any(e.what in lifts and e.at >= taken for e in self.events):
                status, why = kept.status, kept.why
        if not aborted and status == self.status:
            return None
        carried = [release for release in aborted if release != self.target]
        lacked: list[str] = [status] if status != self.status else []
        lacked += [f"release {release[:12]} aborted" for release in carried]
        what = f"Redis had write {self.seq} without what a copy kept: {', '.join(lacked)}"
        event = Event(now, "rebuilt", "playguard", what)
        return replace(self, status=status, why=why, events=self._with(event),
                       aborted_before=(*self.aborted_before, *carried)[-ABORTED_KEPT:])  # fmt: skip

    # -- where a Marquee stands -----------------------------------------------------------------

    def wave_of(self, key: str) -> int:
        return wave_of(self.waves, key)

    def failed(self, marquee: str) -> bool:
        return any(failure.marquee == marquee for failure in self.failures)

    def admits(self, key: str, *, at_target: bool) -> bool:
        """Whether a Marquee with admission key ``key`` may run the target release now. A
        running rollout admits the waves up to the current one; a paused or halted one only
        those already at the target (no one new); an aborted one no one; a done one everyone."""
        if self.status == "done":
            return True
        if self.status == "running":
            return self.wave_of(key) <= self.wave
        return at_target and self.status != "aborted"

    def where(self, key: str) -> str:
        """``held by rollout web@main, wave 2 of 3`` and what it waits for, for plan."""
        mine = self.wave_of(key) + 1
        if self.status != "running":
            return f"held by rollout {self.scope}, wave {mine} of {len(self.waves)} ({self.status})"
        return (
            f"held by rollout {self.scope}, wave {mine} of {len(self.waves)} "
            f"(wave {self.wave + 1} runs)"
        )

    # -- the rollout's own steps -----------------------------------------------------------------

    def progressed(self, complete: bool, now: float, *, may_start: bool = True) -> Rollout | None:
        """The record after the steps due now, or None when none is. ``complete``: whether each
        Marquee of the current wave, as the cohort stands now, was verified healthy at the
        target or counted failed (the desk's to judge: ``RolloutDesk``); it is asked only until
        the wave's bake starts. The next wave starts once the bake has passed with no failure
        beyond the budget (that halts instead), and only if it ``may_start`` (replicas of
        different versions share the fleet: ``RolloutDesk``)."""
        if self.status != "running" or (self.healthy_at is None and not complete):
            return None
        rollout = self
        if rollout.healthy_at is None:
            rollout = replace(rollout, healthy_at=now)
        assert rollout.healthy_at is not None
        if now < rollout.healthy_at + self.policy.bake:
            return rollout if rollout is not self else None
        if self.wave + 1 == len(self.waves):
            done = Event(now, "done", "playguard", f"wave {self.wave + 1} baked")
            return replace(rollout, status="done", events=self._with(done))
        if not may_start:
            return rollout if rollout is not self else None
        started = Event(now, f"wave {self.wave + 2} started", "playguard",
                        f"wave {self.wave + 1} healthy for {self.policy.bake:g} s")  # fmt: skip
        return replace(
            rollout, wave=self.wave + 1, started=now, healthy_at=None, events=self._with(started)
        )

    def timed_out(self, now: float) -> bool:
        """Whether the current wave's time is up before it was complete, so its unreported
        Marquees count as failed."""
        return (
            self.status == "running"
            and self.healthy_at is None
            and now >= self.started + self.policy.wave_timeout
        )

    def stalled(self, now: float) -> bool:
        """Whether the current wave is still incomplete a second ``wave_timeout`` after its
        first ran out (its unverified Marquees were then counted failed by the replicas that
        hold them, unless outside their maintenance windows): it halts rather than wait on."""
        return (
            self.status == "running"
            and self.healthy_at is None
            and now >= self.started + 2 * self.policy.wave_timeout
        )

    def with_stall(self, pending: Sequence[str], now: float) -> Rollout:
        """The record halted because the current wave stalled waiting for ``pending``."""
        names = ", ".join(pending[:10]) + (
            f" and {len(pending) - 10} more" if len(pending) > 10 else ""
        )
        reason = (
            f"wave {self.wave + 1} stalled: {len(pending)} Marquee(s) neither verified nor failed "
            f"within 2 x wave_timeout {self.policy.wave_timeout:g} s: {names}"
        )[:TEXT_MAX]
        halted = Event(now, "halted", "playguard", reason)
        return replace(self, status="halted", why=reason, events=self._with(halted))

    def with_failure(self, marquee: str, wave: int, why: str, now: float) -> Rollout | None:
        """The record with ``marquee`` failed (None if it already is), halted when that is more
        failures than the budget allows."""
        if self.failed(marquee) or self.status in ("aborted", "done"):
            return None
        why = why[:TEXT_MAX]
        failures = self.failures
        if len(failures) < FAILED_KEPT:
            failures = (*failures, Failure(marquee, wave, why))
        count = self.failed_count + 1
        event = Event(now, f"{marquee} failed", "playguard", why)
        rollout = replace(self, failures=failures, failed_count=count, events=self._with(event))
        if count > self.policy.max_failures and self.status in ("running", "paused"):
            reason = (
                f"{count} Marquee(s) failed, more than max_failures {self.policy.max_failures}: "
                f"{marquee}: {why}"
            )
            halted = Event(now, "halted", "playguard", reason)
            return replace(rollout, status="halted", why=reason, events=rollout._with(halted))
        return rollout

    # -- operators ------------------------------------------------------------------------------

    def by_operator(self, action: str, who: str, why: str, now: float) -> Rollout:
        """The record after an operator's ``promote``, ``pause``, ``resume`` or ``abort``;
        ``RolloutRefused`` when its status does not allow it."""
        why = why[:TEXT_MAX]
        allowed: dict[str, tuple[Status, ...]] = {
            "promote": ("running", "paused", "halted"),
            "pause": ("running",),
            "resume": ("paused",),
            "abort": ("running", "paused", "halted"),
        }
        if self.status not in allowed[action]:
            raise RolloutRefused(
                f"rollout {self.scope} is {self.status}: {action} applies to a rollout that is "
                + " or ".join(allowed[action])
            )
        event = Event(now, action, who, why)
        rollout = replace(self, events=self._with(event), why=f"{action} by {who}: {why}")
        if action == "pause":
            return replace(rollout, status="paused")
        if action == "resume":
            return replace(rollout, status="running", started=now)
        if action == "abort":
            return replace(rollout, status="aborted")
        # promote: the next wave starts now, whatever its bake; a halted rollout runs again with
        # its failure budget whole (the failed Marquees stay named).
        if self.wave + 1 == len(self.waves):
            return replace(rollout, status="done", failed_count=0)
        return replace(rollout, status="running", wave=self.wave + 1, started=now,
                       healthy_at=None, failed_count=0)  # fmt: skip

    def _with(self, event: Event) -> tuple[Event, ...]:
        return (*self.events, event)[-EVENTS_KEPT:]

    # -- the stored form ------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "scope": self.scope, "id": self.id, "target": self.target, "commit": self.commit,
            "policy": self.policy.model_dump(),
            "waves": [[wave.cutoff, wave.size] for wave in self.waves],
            "wave": self.wave, "started": self.started, "opened": self.opened,
            "status": self.status, "healthy_at": self.healthy_at,
            "failures": [[f.marquee, f.wave, f.why] for f in self.failures],
            "failed_count": self.failed_count, "why": self.why,
            "events": [event.to_json() for event in self.events], "seq": self.seq,
            "aborted_before": list(self.aborted_before),
            "superseded_before": list(self.superseded_before),
        }  # fmt: skip

    def encode(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))

    @classmethod
    def parse(cls, scope: str, raw: bytes | str) -> Rollout | None:
        """The record ``raw`` holds, or None (and one log line) for anything not of the written
        form: too large, not JSON, a field missing or of the wrong type or out of range."""
        if len(raw) > RECORD_MAX:
            reason = f"{len(raw)} bytes, more than {RECORD_MAX}"
        else:
            try:
                return cls._from_json(scope, json.loads(raw))
            except (ValueError, TypeError, KeyError, IndexError, RecursionError) as exc:
                reason = str(exc) if not isinstance(exc, ValidationError) else "policy"
        log.warning("rollout.unreadable", scope=scope[:80], reason=reason[:120],
                    value=repr(raw)[:80])  # fmt: skip
        return None

    @classmethod
    def _from_json(cls, scope: str, fields: Any) -> Rollout:
        if not isinstance(fields, dict) or fields.get("scope") != scope:
            raise ValueError("not a rollout record of this scope")
        waves = tuple(Wave(_text(c), _count(s)) for c, s in _list(fields["waves"]))
        wave = _count(fields["wave"])
        status = fields["status"]
        if not waves or wave >= len(waves) or status not in STATUSES:
            raise ValueError("waves, wave or status out of range")
        target, ident, commit = fields["target"], fields["id"], fields["commit"]
        if not (isinstance(target, str) and DIGEST.fullmatch(target)):
            raise ValueError("target is not a release digest")
        if not (isinstance(ident, str) and len(ident) == 16 and DIGEST.fullmatch(ident * 4)):
            raise ValueError("id is not 16 hex digits")
        if commit is not None and not is_commit(commit):
            raise ValueError("commit is not a commit name")
        return cls(
            scope=scope, id=ident, target=target, commit=commit,
            policy=RolloutPolicy.model_validate(fields["policy"]),
            waves=waves, wave=wave, started=_time(fields["started"]),
            opened=_time(fields["opened"]), status=cast(Status, status),
            healthy_at=None if fields["healthy_at"] is None else _time(fields["healthy_at"]),
            failures=tuple(
                Failure(_text(m), _count(w), _text(y)) for m, w, y in _list(fields["failures"])
            )[:FAILED_KEPT],
            failed_count=_count(fields["failed_count"]), why=_text(fields["why"]),
            events=tuple(
                Event(_time(e["at"]), _text(e["what"]), _text(e["by"]), _text(e["why"]))
                for e in _list(fields["events"])
            )[-EVENTS_KEPT:],
            seq=_count(fields.get("seq", 0)),
            aborted_before=tuple(
                _release(release) for release in _list(fields.get("aborted_before", []))
            )[-ABORTED_KEPT:],
            superseded_before=tuple(
                _release(release) for release in _list(fields.get("superseded_before", []))
            )[-SUPERSEDED_KEPT:],
        )  # fmt: skip


def _list(value: object) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError("a list was expected")
    return value


def _release(value: object) -> str:
    if not (isinstance(value, str) and DIGEST.fullmatch(value)):
        raise ValueError("an aborted or superseded release is not a release digest")
    return value


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError("a string was expected")
    return value[:TEXT_MAX]


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 31:
        raise ValueError("a count was expected")
    return value


def _time(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e11:
        raise ValueError("a time was expected")
    return float(value)
