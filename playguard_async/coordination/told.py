"""What a Marquee's cycles have told already, so news that repeats every cycle is told once.

A rollback that cannot be made (``remote.rollback_check``) is found again by every cycle until
an operator acts; a notice per cycle would bury the one that matters. Each Playground's last
told fingerprint is kept in one hash per Marquee (``keys.rollback_blocked_key``), swapped by
the cycle that holds the Marquee's lock, so one cycle tells each new fingerprint.

Redis may forget (FLUSHALL, a restart without persistence, a failover that lost the write):
then the same news is told once more, which is the safe side. A Redis error tells it as well.
"""

from __future__ import annotations

import structlog
from redis.exceptions import RedisError, ResponseError

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.foreign import is_wrong_type
from playguard_async.coordination.keys import rollback_blocked_key
from playguard_async.kits.aio import bounded

log = structlog.get_logger("playguard.notify")

# KEYS[1] the hash; ARGV[1] the Playground, ARGV[2] the fingerprint. Returns 1 when the hash
# held another fingerprint (or none) for the Playground and now holds this one, else 0.
_SWAP_SCRIPT = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""


async def first_telling(
    redis: RedisClient, marquee: str, playground: str, fingerprint: str, timeout: float
) -> bool:
    """Whether ``fingerprint`` is news for ``playground`` (it is kept as told from now on).
    A key of another type is replaced (it is this module's to write), with one log line."""
    key = rollback_blocked_key(marquee)
    try:
        changed = await bounded(timeout, redis.eval(_SWAP_SCRIPT, 1, key, playground, fingerprint))
    except ResponseError as exc:
        if not is_wrong_type(exc):
            return _told_anyway(key, exc)
        log.warning("told.foreign_key", key=key)
        try:
            await bounded(timeout, redis.delete(key))
            await bounded(timeout, redis.hset(key, playground, fingerprint))
        except (RedisError, TimeoutError) as again:
            return _told_anyway(key, again)
        return True
    except (RedisError, TimeoutError) as exc:
        return _told_anyway(key, exc)
    return bool(changed)


async def forget_telling(redis: RedisClient, marquee: str, playground: str, timeout: float) -> None:
    """``playground`` has nothing told any more (its rollback could be made): the same news,
    should it come again, is told again. A Redis error is logged; the next cycle forgets."""
    key = rollback_blocked_key(marquee)
    try:
        await bounded(timeout, redis.hdel(key, playground))
    except ResponseError as exc:
        if not is_wrong_type(exc):
            log.warning("told.unforgotten", key=key, error=str(exc)[:200])
    except (RedisError, TimeoutError) as exc:
        log.warning("told.unforgotten", key=key, error=f"{type(exc).__name__}: {exc}"[:200])


def _told_anyway(key: str, exc: Exception) -> bool:
    log.warning("told.unknown", key=key, error=f"{type(exc).__name__}: {exc}"[:200])
    return True
