"""Pauses: an operator's "hands off" for one Marquee or the whole fleet, kept in Redis.

A pause lives in its own key (``keys.pause_key``, ``keys.FLEET_PAUSE_KEY``) with a PX expiry, so
it ends by itself. A Marquee's key shares its lock's slot and is that lock's hold key
(``TokenLock(hold_key=pause_key(marquee))``): the lock's scripts read it, so every replica sees it
at its next cycle start and at each phase boundary of a cycle already running, in the round trips
that take and renew the lease; what held the lock back reads as a pause here (``Pause.from_held``).
The fleet's key is read at most once per ``fleet_pause_read_interval`` per replica
(``FleetPauseWatch``). The desired state is left as it is: a pause is for incidents, not for
changing what should run.

A key's value is outside input (anyone with redis-cli may have written it): a value this module
did not write still pauses (the key is there, so someone meant it), and reads as an unknown
record, never as an error. So does a key of another type than a string (a hash, a list...), for
the lock (whose scripts hold back on any hold key they cannot read, ``lock_scripts.HOLD_OF``)
and for every reader here alike: it pauses, shown as what it holds (``foreign.ForeignType``), and
no reader writes over it; ``resume`` deletes it.
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
import time
from dataclasses import dataclass
from typing import Any

import structlog
from redis.exceptions import ResponseError

from playguard_async.coordination.client import RedisClient, sender_for
from playguard_async.coordination.foreign import ForeignType, is_wrong_type, type_of
from playguard_async.coordination.keys import FLEET_PAUSE_KEY, lifted_key, pause_key
from playguard_async.coordination.lock import LockHeld
from playguard_async.coordination.operator_actions import acting_user
from playguard_async.kits.aio import bounded

log = structlog.get_logger("playguard.pause")

FLEET = "*"
"""The scope of a fleet-wide pause (``pause --all``)."""

REASON_MAX = 500
"""Characters a pause's reason may have."""

RAW_SHOWN = 120
"""Characters of an unknown pause value shown to an operator."""


@dataclass(frozen=True)
class Pause:
    """Who paused what, why, when and until when (Unix seconds, wall clock: for display).

    ``known`` is False for a value this module did not write: the key still pauses, and
    ``reason`` then shows the value, bounded and escaped, or what type the key holds."""

    scope: str
    user: str
    host: str
    reason: str
    since: float
    until: float
    known: bool = True
    foreign: ForeignType | None = None
    """Set when the key holds another type than a string (and so pauses, unknown)."""

    @classmethod
    def taken_now(cls, scope: str, reason: str, seconds: float, user: str | None = None) -> Pause:
        """A pause of ``scope`` by ``user`` (default: this process's user; the web view names its
        logged-in user) on this host, from now for ``seconds``."""
        now = time.time()
        if user is None:
            user = acting_user()
        return cls(scope, user, socket.gethostname(), reason, now, now + seconds)

    def encode(self) -> str:
        return json.dumps(
            {
                "user": self.user,
                "host": self.host,
                "reason": self.reason,
                "since": self.since,
                "until": self.until,
            },
            separators=(",", ":"),
        )

    @classmethod
    def parse(cls, scope: str, raw: bytes | str | ForeignType) -> Pause:
        """The pause a key holds; never raises (see the module's doc)."""
        if isinstance(raw, ForeignType):
            return cls(scope, "?", "?", raw.describe(), 0.0, 0.0, known=False, foreign=raw)
        try:
            fields = json.loads(raw)
        except (ValueError, RecursionError):
            fields = None
        if (
            isinstance(fields, dict)
            and all(isinstance(fields.get(name), str) for name in ("user", "host", "reason"))
            and all(is_time(fields.get(name)) for name in ("since", "until"))
        ):
            return cls(
                scope, fields["user"], fields["host"], fields["reason"][:REASON_MAX],
                float(fields["since"]), float(fields["until"]),
            )  # fmt: skip
        return cls(scope, "?", "?", f"unknown record {_shown(raw)}", 0.0, 0.0, known=False)

    @classmethod
    def from_held(cls, marquee: str, held: LockHeld) -> Pause:
        """The pause that held back ``marquee``'s lock, whose hold key is its pause key; never
        raises (see the module's doc)."""
        if held.value is None:
            return cls.parse(marquee, _foreign(marquee, held.foreign_type))
        return cls.parse(marquee, held.value)

    @property
    def by(self) -> str:
        return f"{self.user}@{self.host}" if self.known else "?"

    def describe(self) -> str:
        """One line for outcomes, logs and tables: what is paused, by whom, why, until when."""
        what = "fleet paused" if self.scope == FLEET else "paused"
        if not self.known:
            return f"{what}: {self.reason}"
        return f"{what} by {self.by}: {self.reason}"

    def to_json(self) -> dict[str, object]:
        return {
            "scope": self.scope,
            "known": self.known,
            "user": self.user,
            "host": self.host,
            "reason": self.reason,
            "since": self.since if self.known else None,
            "until": self.until if self.known else None,
        }


def is_time(value: object) -> bool:
    """Whether ``value`` is a moment a stored pause may name (Unix seconds, finite, not a bool):
    anything else read from outside is no pause."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e12


def _shown(raw: bytes | str) -> str:
    text = raw if isinstance(raw, str) else raw.decode("utf-8", "backslashreplace")
    cut = text[:RAW_SHOWN].encode("unicode_escape").decode("ascii")
    return repr(cut) + (f" (+{len(text) - RAW_SHOWN} chars)" if len(text) > RAW_SHOWN else "")


async def paused(redis: RedisClient, marquee: str, timeout: float) -> Pause | None:
    """The pause that holds ``marquee`` back now (its own first, else the fleet's), or None; for
    operators. A cycle reads its Marquee's through its lock (``Pause.from_held``) and the
    fleet's through ``FleetPauseWatch``. A key of another type pauses (the module's doc): its
    type is asked in a round trip of its own."""
    keys = (pause_key(marquee), FLEET_PAUSE_KEY)
    sender = sender_for(redis, timeout=timeout)
    answers = await asyncio.gather(
        *(sender.send("GET", key) for key in keys), return_exceptions=True
    )
    for scope, key, raw in zip((marquee, FLEET), keys, answers, strict=True):
        if is_wrong_type(raw):
            return Pause.parse(scope, _foreign(scope, await type_of(redis, key, timeout)))
        if isinstance(raw, BaseException):
            raise raw
        if isinstance(raw, bytes | str):
            return Pause.parse(scope, raw)
    return None


class FleetPauseWatch:
    """The fleet-wide pause as one replica's cycles go by it: read at most once per ``every``
    seconds, for all of them.

    The fleet's key lives in a slot of its own, so the lock's scripts cannot read it as they read
    a Marquee's; reading it per cycle step cost a tick more than the steps themselves
    (bench/README.md). A cycle asks at its start and at each phase boundary (``refresh``): when
    the last read was sent more than ``every`` seconds ago, a new one is sent then, in the batch of
    the lease step the cycle queues next, and the cycle waits for its answer (``settled``); else
    the last answer stands. So a fleet pause reaches every running cycle at its first phase
    boundary ``every`` seconds or more after it was taken. A read that fails leaves the last
    answer standing (the lease steps beside it failed too, most likely); a key of another type
    pauses the fleet, as a Marquee's own does (the module's doc)."""

    def __init__(self, redis: RedisClient, *, every: float, timeout: float) -> None:
        self.redis = redis
        self.every = every
        self.timeout = timeout
        self.sender = sender_for(redis, timeout=timeout)
        self.pause: Pause | None = None
        """The fleet's pause as last read; None before the first answer."""
        self._reading: asyncio.Future[Any] | None = None
        self._sent_at = -math.inf

    def refresh(self) -> asyncio.Future[Any] | None:
        """Send a read unless one was sent within ``every`` seconds; the read still on its way,
        if any, for ``settled``."""
        now = time.monotonic()
        if now - self._sent_at >= self.every:
            self._sent_at = now
            self._reading = self.sender.send("GET", FLEET_PAUSE_KEY)
            self._reading.add_done_callback(self._answered)
        reading = self._reading
        return None if reading is None or reading.done() else reading

    async def settled(self, reading: asyncio.Future[Any] | None) -> Pause | None:
        """The fleet's pause once ``reading`` (from ``refresh``) is in. A waiter's cancellation
        leaves the read running for the other cycles that wait for it."""
        if reading is not None:
            await asyncio.wait([reading])
        return self.pause

    def _answered(self, reading: asyncio.Future[Any]) -> None:
        if reading is not self._reading:
            return  # overtaken by a later read
        if not reading.cancelled() and is_wrong_type(reading.exception()):
            self.pause = Pause.parse(FLEET, _foreign(FLEET, None))
            return
        if reading.cancelled() or reading.exception() is not None:
            error = "cancelled" if reading.cancelled() else repr(reading.exception())
            # Redis away: the lease steps beside the read say so, once per outage.
            log.debug("pause.unread", scope=FLEET, error=error)
            return
        raw = reading.result()
        self.pause = Pause.parse(FLEET, raw) if isinstance(raw, bytes | str) else None


def _key(scope: str) -> str:
    return FLEET_PAUSE_KEY if scope == FLEET else pause_key(scope)


async def take_pause(
    redis: RedisClient, pause: Pause, timeout: float, *, until_from: float | None = None
) -> None:
    """Store ``pause`` until its ``until`` (PX, counted from ``until_from``: default its
    ``since``), replacing any pause of the same scope and what a lifted one left."""
    ttl_ms = max(1, round((pause.until - (until_from or pause.since)) * 1000))
    # The mark first: a pause stored beside a lifted one's mark would read as lifted once lost.
    await bounded(timeout, redis.delete(lifted_key(pause.scope)))
    await bounded(timeout, redis.set(_key(pause.scope), pause.encode(), px=ttl_ms))


async def lift_pause(redis: RedisClient, scope: str, timeout: float) -> Pause | None:
    """Delete the pause of ``scope``; the pause lifted, or None when there was none. A key of
    another type pauses as well (the module's doc), so it is lifted too: deleted while it still
    holds that type, never a pause taken in between. A pause lifted leaves its mark
    (``keys.lifted_key``) until it would have ended, so that a replica that remembers it does not
    take it for one Redis forgot (``PauseMemory``)."""
    key = _key(scope)
    try:
        raw = await bounded(timeout, redis.getdel(key))
    except ResponseError as exc:
        if not is_wrong_type(exc):
            raise
        kind = await type_of(redis, key, timeout)
        await bounded(timeout, redis.eval(_DELETE_OF_TYPE, 1, key, kind))
        return Pause.parse(scope, _foreign(scope, kind))
    if raw is None:
        return None
    lifted = Pause.parse(scope, raw)
    left_ms = round((lifted.until - time.time()) * 1000) if lifted.known else 0
    if left_ms > 0:
        await bounded(timeout, redis.set(lifted_key(scope), "1", px=left_ms))
    return lifted


class HeldByPause(Exception):
    """A pause found outside Redis (a host's copy) holds the Marquee back: raised as the
    cycle's session opens, before any phase changes the host; the cycle ends ``paused``."""

    def __init__(self, pause: Pause) -> None:
        super().__init__(pause.describe())
        self.pause = pause


async def restore_pause(
    redis: RedisClient, pause: Pause, timeout: float, *, write: bool = True
) -> bool:
    """Whether ``pause``, found outside Redis (a host's copy, ``phases.pause_copies``) while
    Redis holds no pause of its scope, still holds: not ended, and not lifted (Redis keeps no
    mark of a ``resume`` since). It is then written back until its end, not longer, unless a
    pause was taken meanwhile (that one stays) or ``write`` is False (a dry run), and said in one
    line (``decisions.rebuilt``)."""
    left_ms = round((pause.until - time.time()) * 1000)
    if left_ms <= 0 or await bounded(timeout, redis.exists(lifted_key(pause.scope))) > 0:
        return False
    if not write:
        return True
    stored = redis.set(_key(pause.scope), pause.encode(), px=left_ms, nx=True)
    if await bounded(timeout, stored) is not None:  # None: a pause was taken meanwhile
        log.warning("decisions.rebuilt", kind="pause", scope=pause.scope, by=pause.by,
                    until=pause.until, source="host")  # fmt: skip
    return True


class PauseMemory:
    """The pauses one replica's cycles met, until each ends: Redis is not their only copy.

    A pause is kept in a key that expires with it, so a key that is gone before its end was
    either lifted (``lift_pause`` leaves a mark until that end) or forgotten by Redis (FLUSHALL,
    a restart without persistence): then the replica that met it writes it back before the
    cycle takes any step, and says so in one line (``decisions.rebuilt``). What it costs an
    in-sync cycle: nothing (a Marquee never paused is not in the memory); a cycle of a Marquee
    whose remembered pause is gone reads the mark once.

    A pause no cycle of a running replica met (lost with every replica restarted) is on the
    hosts: ``pause`` put it there (``phases.pause_copies``), and the first cycle of each Marquee
    in a process reads it back; the table of operations/high-availability.md in the docs says
    what survives what."""

    def __init__(self) -> None:
        self._met: dict[str, Pause] = {}
        self._hosts_read: set[str] = set()

    def host_read_due(self, marquee: str) -> bool:
        """Whether ``marquee``'s host copies of the pauses are to be read before its cycle's
        phases: in the first cycle of it in this process (``engine.cycle_lease.pause_from_host``);
        what a replica met since, it remembers here."""
        return marquee not in self._hosts_read

    def host_read(self, marquee: str) -> None:
        self._hosts_read.add(marquee)

    def forget_hosts(self) -> None:
        """Read every host's pause copies again at its Marquee's next cycle: Redis may have lost
        writes (a failover, a restart without persistence: ``coordination.identity``), a pause
        no cycle of this replica met among them."""
        self._hosts_read.clear()

    def met(self, pause: Pause) -> None:
        """A cycle was held back by ``pause`` (one this module wrote: its end is known)."""
        if pause.known and pause.until > time.time():
            self._met[pause.scope] = pause

    async def forgotten(self, redis: RedisClient, scope: str, timeout: float) -> Pause | None:
        """The pause of ``scope`` Redis forgot, written back (None: none remembered, ended, or
        lifted). Asked only once the scope's key was read and found empty."""
        pause = self._met.get(scope)
        if pause is None:
            return None
        now = time.time()
        if pause.until <= now or await bounded(timeout, redis.exists(lifted_key(scope))) > 0:
            del self._met[scope]
            return None
        await take_pause(redis, pause, timeout, until_from=now)
        log.warning("decisions.rebuilt", kind="pause", scope=scope, by=pause.by,
                    until=pause.until)  # fmt: skip
        return pause


def _foreign(scope: str, kind: str | None) -> ForeignType:
    """The pause key of ``scope`` holding a ``kind`` (None: not asked)."""
    if scope == FLEET:
        return ForeignType("fleet pause key", FLEET_PAUSE_KEY, kind)
    return ForeignType("pause key", pause_key(scope), kind)


# KEYS[1] a pause key, ARGV[1] the type it was seen to hold. Deletes it only while it holds that
# type (a pause taken meanwhile is a string: it stays); returns how many keys it deleted.
_DELETE_OF_TYPE = """
if redis.call('TYPE', KEYS[1])['ok'] == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"""
