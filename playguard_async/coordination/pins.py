"""Pins: an operator's "hold this Playground at this revision", kept in Redis beside the pause.

A Marquee's pins live in one hash (``keys.pins_key``, in its lock's slot): Playground -> JSON of
the revision it is held at (``last-good`` or a full commit name), who pinned it, why and since when.
A pin does not expire: it is a decision about what should run, lifted by ``unpin``. A cycle reads
the hash once (``read_pins``), in its first phase that needs it (sync_git): the checkout stays at
the pinned commit, its images are run by digest, and ``plan`` shows the Playground as held, not as
drift. A ``last-good`` pin runs its last good revision's images; a commit pin, the images its
services ran when a cycle first applied it, which that cycle writes into the pin
(``record_pin_images``), so a tag pushed again later does not reach the Playground.

A value is outside input (anyone with redis-cli may have written it): one not of the written
form, or naming a revision of the wrong shape, reads as no pin with one log line, never as an
error and never into a command; a key of another type reads as no pins at all.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

import structlog
from redis.exceptions import ResponseError

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.foreign import is_wrong_type
from playguard_async.coordination.keys import pins_key
from playguard_async.coordination.operator_actions import acting_user
from playguard_async.kits.aio import bounded
from playguard_async.kits.revision_shapes import PINNED_IMAGE, is_commit

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
    images: Mapping[str, str] | None = None
    """Service -> the image it ran, by digest, when a cycle first applied this commit pin; None
    until then, and always for a ``last-good`` pin (its images are the last good revision's)."""

    @classmethod
    def taken_now(cls, playground: str, revision: str, reason: str, user: str | None = None) -> Pin:
        """A pin by ``user`` (default: this process's user) on this host, from now."""
        if user is None:
            user = acting_user()
        return cls(playground, revision, user, socket.gethostname(), reason, time.time())

    @property
    def by(self) -> str:
        return f"{self.user}@{self.host}"

    def describe(self) -> str:
        return f"pinned at {self.revision} by {self.by}: {self.reason}"

    def encode(self) -> str:
        fields = self.to_json()
        del fields["playground"]
        return json.dumps(fields, separators=(",", ":"))

    def to_json(self) -> dict[str, object]:
        fields: dict[str, object] = {
            "playground": self.playground, "revision": self.revision, "user": self.user,
            "host": self.host, "reason": self.reason, "since": self.since,
        }  # fmt: skip
        if self.images is not None:
            fields["images"] = dict(sorted(self.images.items()))
        return fields

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
            and (fields.get("images") is None or _pinned_images(fields["images"]))
        ):
            return cls(
                playground, fields["revision"], fields["user"], fields["host"],
                fields["reason"][:REASON_MAX], float(fields["since"]), fields.get("images"),
            )  # fmt: skip
        log.warning("pin.unreadable", playground=playground[:80], value=repr(raw)[:80])
        return None


def _pinned_images(value: object) -> bool:
    """Whether ``value`` is service -> an image by digest (never a tag, never an option)."""
    return isinstance(value, dict) and all(
        isinstance(service, str) and isinstance(image, str) and PINNED_IMAGE.fullmatch(image)
        for service, image in value.items()
    )


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


# KEYS[1] a Marquee's pins hash; ARGV[1] a Playground, ARGV[2] its pin as the cycle read it,
# ARGV[3] that pin with its images. Replaces the pin only while it is still the one read, so an
# unpin or a new pin taken meanwhile stays as the operator left it; returns 1 when it did, else 0.
_RECORD_IMAGES_SCRIPT = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
    return 1
end
return 0
"""


async def record_pin_images(
    redis: RedisClient, marquee: str, pin: Pin, images: Mapping[str, str], timeout: float
) -> Pin:
    """``pin`` holding ``images`` from now on, written into its hash field unless the pin was
    lifted or replaced since it was read (then one log line; the next cycle reads the new one)."""
    held = replace(pin, images=dict(images))
    argv = (pin.playground, pin.encode(), held.encode())
    if not await bounded(timeout, redis.eval(_RECORD_IMAGES_SCRIPT, 1, pins_key(marquee), *argv)):
        log.info("pin.changed_meanwhile", marquee=marquee, playground=pin.playground)
    return held
