"""What a Marquee's last cycle saw running on its host, kept in Redis for the web view.

A cycle lists its Marquee's containers anyway (``reconcile_playgrounds``); the web view shows that
listing (``web.containers``) without an SSH or Docker call of its own. It is kept outside the
cycle records' bounded history, in one key per Marquee (``keys.containers_seen_key``), written
only when what was seen changed (the replica's ``kits.last_written``): a cycle that finds its
Marquee as it was costs Redis nothing more (bench/README.md, "Containers seen"). The key expires
after ``SEEN_TTL`` seconds, so a Marquee gone from the desired state leaves nothing behind for
long; a replica writes an unchanged listing again once ``SEEN_REFRESH`` has passed, so a key
Redis forgot (FLUSHALL, a restart without persistence) is back within that time. Until then
the page says the Marquee's containers were not seen since.

The value is host output that went through Redis: the reader (``read_seen``) treats it as
outside input. Each field is checked for its type and clipped to ``TEXT_MAX`` characters; a
container entry that is not of the written shape is left out and counted; a value that is not
JSON of the written shape at all reads as unreadable, with why. The writer bounds the value too:
at most ``CONTAINERS_MAX`` containers and ``PLAYGROUNDS_MAX`` Playgrounds (the rest counted).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Annotated

import structlog
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from redis.exceptions import RedisError

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.foreign import ForeignType, read_typed
from playguard_async.coordination.keys import containers_seen_key
from playguard_async.kits.aio import bounded
from playguard_async.kits.last_written import LastWritten

log = structlog.get_logger("playguard.containers_seen")

SEEN_TTL = 7 * 24 * 3600
"""Seconds a Marquee's key lives after its last write."""

SEEN_REFRESH = 3600.0
"""Seconds after which a replica writes an unchanged listing again (``LastWritten``): a key
Redis forgot is back within this long, for one write a Marquee an hour."""

TEXT_MAX = 200
"""Characters of one field kept (an image reference, a name, a status)."""

CONTAINERS_MAX = 200
"""Containers kept of one Marquee; more are counted (``more``)."""

PLAYGROUNDS_MAX = 100
"""Playgrounds whose desired parts are kept; more are left out."""

SERVICES_MAX = 100
"""Services (and desired images) kept of one Playground."""

VALUE_MAX = 512 << 10
"""Bytes of a stored value read at most: a longer one is not one this module wrote."""


def _clipped(value: object) -> object:
    """A string cut to ``TEXT_MAX`` characters; anything else as it is (for the type check)."""
    return value[:TEXT_MAX] if isinstance(value, str) else value


Text = Annotated[str, BeforeValidator(_clipped), Field(strict=True)]


FILLED_ON_CHANGE = ("restarts", "started_at", "digest")
"""A container's fields read only for a listing that changed (one inspect a container, the
host's image list): a restart that leaves the listing as it was does not update them."""


class SeenContainer(BaseModel):
    """One container as the cycle listed it (and inspected it, when the listing changed)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    playground: Text | None = None
    agent_chat: Text | None = None
    service: Text = ""
    name: Text
    state: Text
    health: Text | None = None
    """``healthy``, ``unhealthy``, ``starting``; None: no health check."""
    restarts: Annotated[int, Field(strict=True, ge=0)] | None = None
    image: Text
    """The image as the container names it (a tag, as compose or the chat asked)."""
    image_id: Text
    digest: Text | None = None
    """A reference naming exactly that image (``repo@sha256:...``), where the host has one."""
    started_at: Text | None = None
    config_hash: Text | None = None
    """The start of the hash compose labelled it with: what its service definition was."""


class DesiredParts(BaseModel):
    """What the cycle found a Playground should run, beside what runs: its compose services,
    each one's definition (config hash), the image behind each of its Playspec's references
    (``-``: none on the host), and the digests of its compose file and ``.env`` in the
    checkout (never their content)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    services: list[Text] | None = None
    """None: not known this cycle (no checkout, or not running)."""
    definitions: dict[Text, Text] = {}
    """Service -> the start of the config hash compose computes for it now (its definition
    from the compose file, ``.env`` and our override), where this cycle knew it."""
    images: dict[Text, Text] = {}
    compose: Text = "-"
    env: Text = "-"


class ContainersSeen(BaseModel):
    """A Marquee's containers as one cycle saw them, and what its Playgrounds should run."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    seen_at: Annotated[float, Field(strict=True)]
    """Wall-clock time (Unix seconds) the listing was first seen in this form."""
    cycle: Text
    """The cycle that wrote it."""
    containers: list[SeenContainer] = []
    more: Annotated[int, Field(strict=True, ge=0)] = 0
    """Containers not kept (past ``CONTAINERS_MAX``) or not readable."""
    desired: dict[Text, DesiredParts] = {}

    def digest(self) -> str:
        """What decides whether a write is due: everything the listing itself shows, not when
        nor by which cycle, nor what is read only when it changed (``FILLED_ON_CHANGE``)."""
        left_out = {"__all__": set(FILLED_ON_CHANGE)}
        shown = self.model_dump(
            mode="json", exclude={"seen_at": True, "cycle": True, "containers": left_out}
        )
        return hashlib.sha256(json.dumps(shown, sort_keys=True).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class SeenRead:
    """What ``read_seen`` found: the listing, or why there is none to show."""

    seen: ContainersSeen | None
    unreadable: str | None = None
    """Why the stored value could not be read (None: it could, or there was none)."""


def parse_seen(raw: bytes | str) -> SeenRead:
    """A stored value read as outside input (the module's doc)."""
    if len(raw) > VALUE_MAX:
        return SeenRead(None, f"the stored value is {len(raw)} bytes, over {VALUE_MAX}")
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return SeenRead(None, "the stored value is not JSON")
    if not isinstance(value, dict):
        return SeenRead(None, "the stored value is not a JSON object")
    kept, dropped = _readable_containers(value.get("containers"))
    try:
        seen = ContainersSeen.model_validate({**value, "containers": kept})
    except ValidationError as exc:
        where = ".".join(str(part) for part in exc.errors()[0]["loc"])
        return SeenRead(None, f"the stored value is not of the written shape (at {where[:80]})")
    return SeenRead(seen.model_copy(update={"more": seen.more + dropped}))


def _readable_containers(listed: object) -> tuple[list[SeenContainer], int]:
    """The entries of ``listed`` of the written shape, and how many were not."""
    if not isinstance(listed, list):
        return [], 0
    kept: list[SeenContainer] = []
    for entry in listed[:CONTAINERS_MAX]:
        try:
            kept.append(SeenContainer.model_validate(entry))
        except ValidationError:
            continue
    return kept, len(listed) - len(kept)


async def read_seen(redis: RedisClient, marquee: str, timeout: float) -> SeenRead:
    """``marquee``'s last listing; ``SeenRead(None)`` when Redis holds none. A Redis error
    reads as unreadable too: the page that shows it works without it."""
    key = containers_seen_key(marquee)
    try:
        raw = await read_typed(
            redis, "containers-seen key", key, timeout, bounded(timeout, redis.get(key))
        )
    except (RedisError, TimeoutError) as exc:
        return SeenRead(None, f"Redis did not answer ({type(exc).__name__})")
    if raw is None:
        return SeenRead(None)
    if isinstance(raw, ForeignType):
        return SeenRead(None, raw.describe())
    return parse_seen(raw)


async def write_seen(
    redis: RedisClient, marquee: str, seen: ContainersSeen, memo: LastWritten, timeout: float
) -> bool:
    """Keep ``seen`` as ``marquee``'s listing when it differs from what this replica last
    wrote (``memo``); whether it was written. A Redis error is logged and forgotten: the page
    is the worse for it, not the cycle."""
    digest = seen.digest()
    if not memo.due(marquee, digest):
        return False
    try:
        await bounded(
            timeout,
            redis.set(containers_seen_key(marquee), seen.model_dump_json(), ex=SEEN_TTL),
        )
    except (RedisError, TimeoutError) as exc:
        memo.forget(marquee)
        log.warning("containers_seen.not_written", marquee=marquee, error=type(exc).__name__)
        return False
    memo.wrote(marquee, digest)
    return True
