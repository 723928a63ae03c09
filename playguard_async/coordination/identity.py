"""Whether Redis may have lost writes since the last tick: its identity changed.

A Sentinel failover promotes a replica that may have missed the last writes, and a restart
without persistence starts empty; either may take a record back to one a running replica
already knows, which its cycles then take for in sync (no host copy is read in an in-sync
cycle: ``phases.decision_copies``). Both change what Redis says of itself: a new process has a
new ``run_id`` (``INFO server``), a promoted replica, even one whose process ran before, a new
``master_replid`` (``INFO replication``). ``RedisIdentity`` reads both once per tick (one
``INFO``; on a Cluster, one per primary: a shard that lost writes is one of them) and, when they
changed since the last tick, logs ``redis.identity_changed`` and calls its listeners, which
read the hosts' copies again.

A read that fails says nothing: no listener is called (a Redis that is slow is not a Redis
that forgot) and nothing is recorded, so the next read that succeeds is compared with the last
one known. The first read of a process only records (a process that starts reads the hosts'
copies at its first cycles anyway).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog
from redis.asyncio import RedisCluster
from redis.exceptions import RedisError

from playguard_async.coordination.client import RedisClient

log = structlog.get_logger("playguard.redis")

Identity = tuple[tuple[str, str], ...]
"""(run_id, master_replid) of each primary, sorted: one pair but on a Cluster."""


def identity_of(info: Mapping[str, Any]) -> Identity:
    """The identity in one ``INFO`` answer (redis-py's parse of it), or of a Cluster's answer
    (node -> its ``INFO``). Raises ``KeyError`` when a part lacks ``run_id``."""
    if "run_id" in info:
        return ((str(info["run_id"]), str(info.get("master_replid", ""))),)
    parts = list(info.values())
    if not parts or not all(isinstance(part, Mapping) for part in parts):
        raise KeyError("run_id")
    return tuple(sorted(pair for part in parts for pair in identity_of(part)))


class RedisIdentity:
    """What Redis said of itself at the last read that succeeded; see the module's docstring."""

    def __init__(
        self, redis: RedisClient, timeout: float, listeners: Sequence[Callable[[], None]] = ()
    ) -> None:
        self.redis = redis
        self.timeout = timeout
        self.listeners = tuple(listeners)
        self.known: Identity | None = None

    async def read(self) -> Identity:
        """Redis's identity now, in one command (per Cluster primary); raises what Redis does."""
        if isinstance(self.redis, RedisCluster):
            info = await self.redis.info(target_nodes=RedisCluster.PRIMARIES)
        else:
            info = await self.redis.info()
        return identity_of(info)

    async def changed(self) -> bool:
        """Read the identity and compare it with the last one known: whether it changed (the
        listeners are then told); False when it could not be read within ``timeout``."""
        try:
            async with asyncio.timeout(self.timeout):
                now = await self.read()
        except (RedisError, OSError, TimeoutError, KeyError):
            return False
        before, self.known = self.known, now
        if before is None or before == now:
            return False
        log.warning("redis.identity_changed", old=_shown(before), new=_shown(now))
        for listener in self.listeners:
            listener()
        return True


def _shown(identity: Identity) -> list[str]:
    """Each primary's ids, shortened: enough to tell them apart in a log line."""
    return [f"run {run[:12]} replid {replid[:12]}" for run, replid in identity]
