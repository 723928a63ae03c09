"""Pins: an operator's "hold this Playground at this revision", kept in Redis beside the pause.

A Marquee's pins live in one hash (``keys.pins_key``, in its lock's slot): Playground -> JSON of
the revision it is held at (``last-good`` or a full commit name), who pinned it, why and since when.
A pin does not expire: it is a decision about what should run, lifted by ``unpin``. A cycle reads
the hash once (``read_pins``), in its first phase that needs it (sync_git): the checkout stays at
the pinned commit, images are run by digest where the pin names the last good revision, and
``plan`` shows the Playground as held, not as drift.

A value is outside input (anyone with redis-cli may have written it): one not of the written
form, or naming a revision of the wrong shape, reads as no pin with one log line, never as an
error and never into a command; a key of another type reads as no pins at all.
"""

from __future__ import annotations

import getpass
import json
import socket
import time
from dataclasses import dataclass

import structlog
from redis.exceptions import ResponseError

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.foreign import is_wrong_type
from playguard_async.coordination.keys import pins_key
from playguard_async.kits.aio import bounded
from playguard_async.kits.revision_shapes import is_commit

log = structlog.get_logger("playguard.pins")

LAST_GOOD = "last-good"
"""The revision of a pin that holds a Playground at its last good revision."""

REASON_MAX = 500
"""Characters a pin's reason may have."""


@dataclass(frozen=True)
class Pin:
    """Who holds which Playground at which revision (``LAST_GOOD`` or a commit), and why."""

    playground: str
    revision: str
    user: str
    host: str
    reason: str
    since: float
    """Unix seconds, wall clock: for display."""

    @classmethod
    def taken_now(cls, playground: str, revision: str, reason: str) -> Pin:
        try:
            user = getpass.getuser()
        except (KeyError, OSError):  # no name for the uid (a container's user)
            user = "?"
        return cls(playground, revision, user, socket.gethostname(), reason, time.time())

    @property
    def by(self) -> str:
        return f"{self.user}@{self.host}"

    def describe(self) -> str:
        return f"pinned at {self.revision} by {self.by}: {self.reason}"

    def encode(self) -> str:
        return json.dumps(
            {"revision": self.revision, "user": self.user, "host": self.host,
             "reason": self.reason, "since": self.since},
            separators=(",", ":"),
        )  # fmt: skip

    def to_json(self) -> dict[str, object]:
        return {"playground": self.playground, "revision": self.revision, "user": self.user,
                "host": self.host, "reason": self.reason, "since": self.since}  # fmt: skip

    @classmethod
    def parse(cls, playground: str, raw: bytes | str) -> Pin | None:
        """The pin a hash field holds, or None (and one log line) for anything not of the
        written form."""
        try:
            fields = json.loads(raw)
        except (ValueError, RecursionError):
            fields = None
        if (
            isinstance(fields, dict)
            and all(isinstance(fields.get(name), str) for name in ("revision", "user", "host"))
            and isinstance(fields.get("reason"), str)
            and isinstance(fields.get("since"), int | float)
            and not isinstance(fields.get("since"), bool)
            and (fields["revision"] == LAST_GOOD or is_commit(fields["revision"]))
        ):
            return cls(
                playground, fields["revision"], fields["user"], fields["host"],
                fields["reason"][:REASON_MAX], float(fields["since"]),
            )  # fmt: skip
        log.warning("pin.unreadable", playground=playground[:80], value=repr(raw)[:80])
        return None


async def read_pins(redis: RedisClient, marquee: str, timeout: float) -> dict[str, Pin]:
    """Playground -> its pin, for every Playground of ``marquee`` that has a readable one."""
    try:
        raw = await bounded(timeout, redis.hgetall(pins_key(marquee)))
    except ResponseError as exc:
        if not is_wrong_type(exc):
            raise
        log.warning("pin.unreadable", key=pins_key(marquee), value="a key of another type")
        return {}
    pins: dict[str, Pin] = {}
    for field_name, value in raw.items():
        name = (
            field_name.decode("utf-8", "replace") if isinstance(field_name, bytes) else field_name
        )
        pin = Pin.parse(str(name), value)
        if pin is not None:
            pins[pin.playground] = pin
    return pins


async def take_pin(redis: RedisClient, marquee: str, pin: Pin, timeout: float) -> None:
    """Store ``pin``, replacing the Playground's earlier pin, if any."""
    await bounded(timeout, redis.hset(pins_key(marquee), pin.playground, pin.encode()))


async def lift_pin(redis: RedisClient, marquee: str, playground: str, timeout: float) -> bool:
    """Delete the Playground's pin; whether it had one."""
    return bool(await bounded(timeout, redis.hdel(pins_key(marquee), playground)))
