"""The host's copies of the pauses that hold its Marquee back (``remote.kept``), so that a pause
holds until its end when Redis forgets it and every replica restarts with it (a FLUSHALL, a
restart of Redis without persistence, a failover).

``pause`` and ``resume`` put their decision on the hosts before they report
(``operator.pause``): a Marquee's own on its host (``pause.json``), the fleet's on every
launchable Marquee's host (``pause-fleet.json``). A lift is a copy too (``lifted``), so that an
older pause's copy never comes back after a ``resume``: of two copies the one decided later
(``at``, wall clock) wins, and an operator's action writes only over an older one.

A replica reads them in the first cycle of a Marquee in its process, before any phase
(``engine.cycle_lease.pause_from_host``), in one command with the Marquee's pins copy
(``phases.decision_copies``), which then needs no read of its own; a pause copy unexpired and
not lifted is written back to Redis (``coordination.pause.restore_pause``) and the cycle ends
``paused``. A cycle in sync with Redis reads no copy.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import structlog

from playguard_async.coordination.pause import FLEET, Pause, is_time
from playguard_async.phases.decision_copies import MEMORY, PINS_COPY, learn_pins_copy
from playguard_async.remote.kept import keep, read_kept
from playguard_async.remote.ssh import RemoteSession

log = structlog.get_logger("playguard.decisions")

PAUSE_COPY = "pause.json"
"""The host's copy of its Marquee's own pause (or of its lifting)."""

FLEET_PAUSE_COPY = "pause-fleet.json"
"""The host's copy of the fleet's pause (or of its lifting)."""


def pause_copy(scope: str) -> str:
    """The copy a pause of ``scope`` (a Marquee, or ``FLEET``) is kept under on a host."""
    return FLEET_PAUSE_COPY if scope == FLEET else PAUSE_COPY


@dataclass(frozen=True)
class PauseCopy:
    """A pause of ``scope`` decided at ``at`` (Unix seconds): taken (``pause``), or lifted
    (``pause`` None)."""

    scope: str
    at: float
    pause: Pause | None

    @classmethod
    def taken(cls, pause: Pause) -> PauseCopy:
        return cls(pause.scope, pause.since, pause)

    @classmethod
    def lifted(cls, scope: str, at: float | None = None) -> PauseCopy:
        return cls(scope, time.time() if at is None else at, None)

    def encode(self) -> str:
        pause = None if self.pause is None else json.loads(self.pause.encode())
        return json.dumps({"at": self.at, "lifted": self.pause is None, "pause": pause},
                          separators=(",", ":"))  # fmt: skip

    @classmethod
    def parse(cls, scope: str, raw: str) -> PauseCopy | None:
        """The copy a host keeps, or None (and one log line) when not of the written form."""
        try:
            fields = json.loads(raw)
            at, lifted = fields["at"], fields["lifted"]
            if is_time(at) and lifted is True:
                return cls(scope, float(at), None)
            if is_time(at) and lifted is False:
                pause = Pause.parse(scope, json.dumps(fields["pause"]))
                if pause.known:
                    return cls(scope, float(at), pause)
        except (ValueError, TypeError, KeyError, RecursionError):
            pass
        log.warning("decisions.copy_unreadable", copy=pause_copy(scope), value=raw[:80])
        return None

    def replaces(self, there: PauseCopy | None) -> bool:
        """Whether this copy is written over ``there`` (the host's, None: none or unreadable):
        only over one decided earlier."""
        return there is None or there.at < self.at

    def holds(self, now: float) -> Pause | None:
        """The pause this copy keeps while it has not ended; None once ended or lifted."""
        return self.pause if self.pause is not None and self.pause.until > now else None


async def kept_pauses(session: RemoteSession, marquee: str) -> list[Pause]:
    """The pauses the host's copies keep that have not ended and were not lifted: the
    Marquee's own first, then the fleet's. Read in one command with the Marquee's pins copy
    when this process has not read that yet (it is then learnt, ``learn_pins_copy``)."""
    names = [PAUSE_COPY, FLEET_PAUSE_COPY]
    pins_due = MEMORY.host_read_due(marquee, PINS_COPY, None, None)
    found = await read_kept(session, [*names, PINS_COPY] if pins_due else names)
    if pins_due:
        learn_pins_copy(marquee, found.get(PINS_COPY))
    now, held = time.time(), []
    for scope, name in ((marquee, PAUSE_COPY), (FLEET, FLEET_PAUSE_COPY)):
        copy = None if name not in found else PauseCopy.parse(scope, found[name])
        if copy is not None and (pause := copy.holds(now)) is not None:
            held.append(pause)
    return held


async def put_pause_copy(session: RemoteSession, copy: PauseCopy) -> bool:
    """``copy`` written to the host where the host's copy of its scope was decided earlier (or
    is absent, or unreadable); whether it was written."""
    name = pause_copy(copy.scope)
    raw = (await read_kept(session, [name])).get(name)
    there = None if raw is None else PauseCopy.parse(copy.scope, raw)
    if not copy.replaces(there):
        return False
    await keep(session, name, copy.encode(), None)  # ordered by when decided, just read
    return True
