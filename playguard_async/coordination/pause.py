"""Pauses: an operator's "hands off" for one Marquee or the whole fleet, kept in Redis.

A pause lives in its own key (``keys.pause_key``, ``keys.FLEET_PAUSE_KEY``) with a PX expiry, so
it ends by itself and every replica sees it at its next cycle start, and at each phase boundary
of a cycle already running, read in the round trip that renews the lease (``read_pause``). The
desired state is left as it is: a pause is for incidents, not for changing what should run.

A key's value is outside input (anyone with redis-cli may have written it): a value this module
did not write still pauses (the key is there, so someone meant it), and reads as an unknown
record, never as an error.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from playguard_async.coordination.channel import ChannelledRedis
from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.keys import FLEET_PAUSE_KEY, pause_key
from playguard_async.kits.aio import bounded

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
    ``reason`` then shows the value, bounded and escaped."""

    scope: str
    user: str
    host: str
    reason: str
    since: float
    until: float
    known: bool = True

    @classmethod
    def taken_now(cls, scope: str, reason: str, seconds: float) -> Pause:
        """A pause of ``scope`` by this process's user on this host, from now for ``seconds``."""
        now = time.time()
        try:
            user = getpass.getuser()
        except (KeyError, OSError):  # no name for the uid (a container's user)
            user = "?"
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
    def parse(cls, scope: str, raw: bytes | str) -> Pause:
        """The pause a key holds; never raises (see the module's doc)."""
        try:
            fields = json.loads(raw)
        except (ValueError, RecursionError):
            fields = None
        if (
            isinstance(fields, dict)
            and all(isinstance(fields.get(name), str) for name in ("user", "host", "reason"))
            and all(_is_time(fields.get(name)) for name in ("since", "until"))
        ):
            return cls(
                scope, fields["user"], fields["host"], fields["reason"][:REASON_MAX],
                float(fields["since"]), float(fields["until"]),
            )  # fmt: skip
        return cls(scope, "?", "?", f"unknown record {_shown(raw)}", 0.0, 0.0, known=False)

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


def _is_time(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e12


def _shown(raw: bytes | str) -> str:
    text = raw if isinstance(raw, str) else raw.decode("utf-8", "backslashreplace")
    cut = text[:RAW_SHOWN].encode("unicode_escape").decode("ascii")
    return repr(cut) + (f" (+{len(text) - RAW_SHOWN} chars)" if len(text) > RAW_SHOWN else "")


def _keys(marquee: str) -> tuple[str, str]:
    return pause_key(marquee), FLEET_PAUSE_KEY


PauseRead = asyncio.Future[Any]
"""Pending pause reads (``read_pause``): give them to ``pause_in`` once answered."""


def read_pause(redis: RedisClient, marquee: str, timeout: float) -> PauseRead:
    """Send the reads of what may hold ``marquee`` back: its own pause and the fleet's.

    They are sent when this is called, not when awaited: on a single server's command channel
    one MGET goes out in the batch of whatever is queued next (the lease's acquisition or
    renewal), so a cycle learns of a pause in a round trip it makes anyway. On a Cluster (the
    two keys live in two slots) two GETs run beside it. Awaited, the answers raise what Redis
    raised (or ``TimeoutError`` past ``timeout``); ``discard_read`` drops them unawaited."""
    keys = (pause_key(marquee), FLEET_PAUSE_KEY)
    if isinstance(redis, ChannelledRedis):
        return redis.channel.send("MGET", *keys, timeout=timeout)
    return asyncio.ensure_future(bounded(timeout, asyncio.gather(*map(redis.get, keys))))


def pause_in(marquee: str, answers: Sequence[object]) -> Pause | None:
    """The pause that holds ``marquee`` back (its own first, else the fleet's), or None, from the
    answers of ``read_pause``."""
    for scope, raw in zip((marquee, FLEET), answers, strict=True):
        if isinstance(raw, bytes | str):
            return Pause.parse(scope, raw)
    return None


async def paused(redis: RedisClient, marquee: str, timeout: float) -> Pause | None:
    """``read_pause`` and ``pause_in`` in one call, for a reader with nothing to batch them with."""
    return pause_in(marquee, await read_pause(redis, marquee, timeout))


def discard_read(read: PauseRead) -> None:
    """Drop pause reads nobody will await (the lease step beside them failed): the command goes
    out all the same, its answer or error is dropped."""
    read.cancel()


async def take_pause(redis: RedisClient, pause: Pause, timeout: float) -> None:
    """Store ``pause`` until its ``until`` (PX), replacing any pause of the same scope."""
    key = FLEET_PAUSE_KEY if pause.scope == FLEET else pause_key(pause.scope)
    ttl_ms = max(1, round((pause.until - pause.since) * 1000))
    await bounded(timeout, redis.set(key, pause.encode(), px=ttl_ms))


async def lift_pause(redis: RedisClient, scope: str, timeout: float) -> Pause | None:
    """Delete the pause of ``scope``; the pause lifted, or None when there was none."""
    key = FLEET_PAUSE_KEY if scope == FLEET else pause_key(scope)
    raw = await bounded(timeout, redis.getdel(key))
    return None if raw is None else Pause.parse(scope, raw)
