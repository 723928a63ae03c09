"""``playguard unlock``: a Marquee's lock read, and with ``--force`` deleted by the lock's
compare-and-delete script, so it never removes a record it did not show."""

from __future__ import annotations

from dataclasses import dataclass

from playguard_async.coordination.keys import marquee_lock_name
from playguard_async.coordination.lock import ReleaseResult, TokenLock
from playguard_async.coordination.lock_state import LockState, inspect_lock
from playguard_async.coordination.operator_actions import operator_identity, record_operator_action
from playguard_async.operator import display
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


async def unlock_marquee(
    settings: Settings, marquee: str, *, force: bool, user: str | None = None
) -> Unlock:
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
            if result is ReleaseResult.RELEASED:
                await record_operator_action(
                    fleet.redis, marquee, "unlock", reason="deleted by hand (--force)",
                    target=f"lock of {marquee} at fence {found.fence}", by=operator_identity(user),
                    timeout=lock.timeout,
                )  # fmt: skip
            if result is ReleaseResult.UNKNOWN:
                raise RedisUnavailable(settings, "no answer to the delete; run `playguard locks`")
    return Unlock(lock.key, lock.fence_key, found, result)


def unlock_lines(marquee: str, done: Unlock) -> tuple[list[str], bool]:
    """What ``unlock`` found and did, in lines for a person, and whether the Marquee is unlocked
    now (not locked, deleted, or released meanwhile)."""
    if done.found is None:
        return [f"{marquee} is not locked (no key {done.key}); nothing to delete"], True
    if done.found.foreign is not None:
        return [
            f"nothing deleted: {done.found.foreign.describe()}, not a lock record, so no "
            f"compare-and-delete can tell whose it is; once you know, `redis-cli DEL {done.key}`"
        ], False
    shown = f"{done.key}: held by {display.holder_text(done.found)}"
    kept = f"the fence counter {done.fence_key} stays at {display.fence_text(done.found.fence)}"
    if done.result is None:
        return [f"would delete {shown}", kept, "nothing deleted: add --force to delete it"], False
    if done.result is ReleaseResult.RELEASED:
        return [f"deleted {shown}", kept], True
    if done.result is ReleaseResult.EXPIRED:
        return [f"nothing deleted: {done.key} was released or expired after it was read"], True
    return [f"nothing deleted: another holder took {done.key} after it was read"], False
