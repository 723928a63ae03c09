"""``playguard unlock``: a Marquee's lock read, and with ``--force`` deleted by the lock's
compare-and-delete script, so it never removes a record it did not show."""

from __future__ import annotations

from dataclasses import dataclass

from playguard_async.coordination.keys import marquee_lock_name
from playguard_async.coordination.lock import ReleaseResult, TokenLock
from playguard_async.coordination.lock_state import LockState, inspect_lock
from playguard_async.operator.fleet import RedisUnavailable, known_marquee, open_fleet
from playguard_async.service.connections import inventory_source
from playguard_async.settings import Settings


@dataclass(frozen=True)
class Unlock:
    """What ``unlock`` found and did. ``found`` is None when the Marquee was not locked; ``result``
    is None when nothing was attempted (not locked, or not forced)."""

    key: str
    fence_key: str
    found: LockState | None
    result: ReleaseResult | None


async def unlock_marquee(settings: Settings, marquee: str, *, force: bool) -> Unlock:
    """Read the Marquee's lock; with ``force``, delete exactly the record read, never another one
    (compare-and-delete), and never the fence counter, so fences keep growing after it.

    A name the inventory does not hold is an ``OperateError`` (a typo would otherwise read as
    "not locked, nothing to delete" and exit 0)."""
    async with open_fleet(settings) as fleet:
        known_marquee(await fleet.inventory(), marquee, inventory_source(settings).describe())
        lock = TokenLock(
            fleet.redis, marquee_lock_name(marquee), timeout=settings.redis_socket_timeout
        )
        found = await inspect_lock(fleet.redis, lock.name, timeout=lock.timeout)
        result = None
        # A key of another type has no record to compare: it is left for a person to delete.
        if found is not None and force and found.foreign is None:
            # Exactly the record read: one that differs (another holder since) is left alone.
            result = await lock.compare_and_delete(found.record)
            if result is ReleaseResult.UNKNOWN:
                raise RedisUnavailable(settings, "no answer to the delete; run `playguard locks`")
    return Unlock(lock.key, lock.fence_key, found, result)
