"""``playguard locks``: every lock held now, by name."""

from __future__ import annotations

import asyncio

from playguard_async.coordination.keys import lock_key
from playguard_async.coordination.lock_state import LockState, inspect_lock
from playguard_async.operator.fleet import open_fleet
from playguard_async.settings import Settings

_LOCK_PREFIX, _LOCK_SUFFIX = lock_key("*").split("*")


async def held_locks(settings: Settings) -> list[LockState]:
    """Every lock held now (Marquees' and any other name's), by name; one SCAN, then each read."""
    async with open_fleet(settings) as fleet:
        names = sorted(
            {
                key.decode().removeprefix(_LOCK_PREFIX).removesuffix(_LOCK_SUFFIX)
                async for key in fleet.redis.scan_iter(match=lock_key("*"), count=1000)
            }
        )
        states = await asyncio.gather(
            *(
                inspect_lock(fleet.redis, name, timeout=settings.redis_socket_timeout)
                for name in names
            )
        )
    # A lock released between the SCAN and its read is simply no longer held.
    return [state for state in states if state is not None]
