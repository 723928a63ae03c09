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
error and never into a command; a key of another type reads as ``PinsRead.foreign``, which holds
every Playground of the Marquee (``phases.holds``: it fails closed).
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

    def shown(self) -> str:
        """In a few words for a status row: ``pinned at <short commit or last-good> by <who>``."""
        return f"pinned at {self.revision[:12]} by {self.by}"

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


@dataclass(frozen=True)
class PinsRead:
    """A Marquee's pins hash as read: how many times it was written (``seq``: 0 for a hash
    written before it was counted, or none), its fields as stored (``raw``: Playground -> pin
    JSON), and the pins readable among them. ``foreign`` when the key holds another type: the
    Marquee's Playgrounds are then all held (``phases.holds``), never let go."""

    marquee: str
    seq: int
    raw: Mapping[str, str]
    pins: Mapping[str, Pin]
    foreign: bool = False

    @classmethod
    def of(cls, marquee: str, seq: int, raw: Mapping[str, str]) -> PinsRead:
        pins = {name: pin for name, value in raw.items() if (pin := Pin.parse(name, value))}
        return cls(marquee, seq, dict(raw), pins)


def _decoded(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


async def read_pin_record(redis: RedisClient, marquee: str, timeout: float) -> PinsRead:
    """The Marquee's pins hash (``PinsRead``), in one command."""
    key = pins_key(marquee)
    try:
        stored = await bounded(timeout, redis.hgetall(key))
    except ResponseError as exc:
        if not is_wrong_type(exc):
            raise
        log.warning("pin.unreadable", key=key, value="a key of another type")
        return PinsRead(marquee, 0, {}, {}, foreign=True)
    raw = {_decoded(name): _decoded(value) for name, value in stored.items()}
    seq_text = raw.pop(SEQ_FIELD, "1" if raw else "0")  # pins from before the count: 1
    return PinsRead.of(marquee, int(seq_text) if seq_text.isdigit() else 0, raw)


async def read_pins(redis: RedisClient, marquee: str, timeout: float) -> dict[str, Pin]:
    """Playground -> its pin, for every Playground of ``marquee`` that has a readable one."""
    return dict((await read_pin_record(redis, marquee, timeout)).pins)


SEQ_FIELD = "#seq"
"""The pins hash's field that counts its writes (no Playground's name starts with ``#``): a
pin or an unpin adds one, so the hash outlives its last pin, and a copy kept outside Redis with
a higher count is one Redis lost (``phases.decision_copies``)."""

# KEYS[1] a Marquee's pins hash; ARGV[1] the field (a Playground), ARGV[2] its pin, '' to lift
# it; ARGV[3] the count field. Sets or deletes the field and counts the write (a hash of pins
# from before the count, which reads as count 1, counts from 1); returns how many fields it
# deleted (0 when it set one).
_CHANGE_SCRIPT = """
if redis.call('HEXISTS', KEYS[1], ARGV[3]) == 0 and redis.call('HLEN', KEYS[1]) > 0 then
    redis.call('HSET', KEYS[1], ARGV[3], 1)
end
local gone = 0
if ARGV[2] == '' then gone = redis.call('HDEL', KEYS[1], ARGV[1])
else redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
redis.call('HINCRBY', KEYS[1], ARGV[3], 1)
return gone
"""


async def take_pin(redis: RedisClient, marquee: str, pin: Pin, timeout: float) -> None:
    """Store ``pin``, replacing the Playground's earlier pin, if any."""
    argv = (pin.playground, pin.encode(), SEQ_FIELD)
    await bounded(timeout, redis.eval(_CHANGE_SCRIPT, 1, pins_key(marquee), *argv))


async def lift_pin(redis: RedisClient, marquee: str, playground: str, timeout: float) -> bool:
    """Delete the Playground's pin; whether it had one."""
    argv = (playground, "", SEQ_FIELD)
    return bool(await bounded(timeout, redis.eval(_CHANGE_SCRIPT, 1, pins_key(marquee), *argv)))


# KEYS[1] a Marquee's pins hash; ARGV[1] the count field, ARGV[2] the count as read, ARGV[3]
# the count of the copy written back, then field and value pairs. Replaces the whole hash by the
# copy only while its count is still the one read (a hash of another type is never written
# over); 1 when it did, else 0.
_RESTORE_SCRIPT = """
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'hash' and kind ~= 'none' then return 0 end
local seq = redis.call('HGET', KEYS[1], ARGV[1])
if not seq then seq = redis.call('HLEN', KEYS[1]) > 0 and '1' or '0' end
if seq ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1
"""


async def restore_pins(redis: RedisClient, read: PinsRead, kept: PinsRead, timeout: float) -> bool:
    """Write ``kept`` (a copy of the Marquee's pins newer than ``read``, what Redis holds) back
    over ``read``; whether it was (False: the hash changed since it was read)."""
    argv = [SEQ_FIELD, str(read.seq), str(kept.seq)]
    for name, value in sorted(kept.raw.items()):
        argv += [name, value]
    key = pins_key(read.marquee)
    return bool(await bounded(timeout, redis.eval(_RESTORE_SCRIPT, 1, key, *argv)))


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
