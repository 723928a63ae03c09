"""What every operator command works with: the settings, a Redis client made as the daemon
makes it, the inventory; and the one-line errors a person can act on.

Everything the commands do goes through what the daemon itself uses: the same Redis client, the
same lock records and fences, the same cycle records, the same SSH session. A failure a person can
fix (an unknown Marquee, Redis out of reach) is raised as an ``OperateError`` whose message is one
readable line; ``cli.py`` only parses and prints. Each command's work is in a module named after
it (``status``, ``locks``, ``unlock``, ``cycle``, ``plan``, ``pause``, ``check``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from redis.exceptions import RedisError

from playguard_async.coordination.client import RedisClient
from playguard_async.desired_state.model import Inventory, Marquee
from playguard_async.service.connections import inventory_source, redis_for
from playguard_async.settings import Settings


class OperateError(Exception):
    """The command cannot do what was asked; the message says why in one line."""


class RedisUnavailable(OperateError):
    """Redis did not answer, or answered with an error; nothing was read or changed there."""

    def __init__(self, settings: Settings, reason: str) -> None:
        super().__init__(f"Redis at {settings.redis_url_for_display()} unavailable: {reason}")


@contextlib.contextmanager
def redis_errors(settings: Settings) -> Iterator[None]:
    """Turn any Redis failure or timeout inside the block into one readable ``RedisUnavailable``."""
    try:
        yield
    except (RedisError, TimeoutError) as exc:
        reason = str(exc) or f"no answer within {settings.redis_socket_timeout:g} s"
        raise RedisUnavailable(settings, reason) from exc


@dataclass(frozen=True)
class Fleet:
    """What every command works with: the settings, a Redis client made as the daemon makes it,
    and the inventory the settings name (read on demand: ``locks`` and ``unlock`` need none)."""

    settings: Settings
    redis: RedisClient

    async def inventory(self) -> Inventory:
        return await inventory_source(self.settings).load()


@asynccontextmanager
async def open_fleet(settings: Settings) -> AsyncIterator[Fleet]:
    """The fleet of ``settings``; Redis failures inside become ``RedisUnavailable``; the client is
    closed on the way out."""
    redis = redis_for(settings)
    try:
        with redis_errors(settings):
            yield Fleet(settings, redis)
    finally:
        await redis.aclose()


def known_marquee(inventory: Inventory, name: str, source: str) -> Marquee:
    """The Marquee ``name`` of ``inventory``; an ``OperateError`` naming ``source`` and the
    known names when there is none (a typo must not read as "nothing to do")."""
    try:
        return inventory.marquee(name)
    except KeyError:
        known = ", ".join(m.name for m in inventory.marquees) or "none"
        raise OperateError(f"{source}: no marquee named {name!r} (known: {known})") from None
