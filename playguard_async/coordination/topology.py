"""What the Redis behind the lock looks like right now: for ``playguard check``.

Per primary (one for a single server or a Sentinel group, one per shard of a Cluster): where it
is, its replicas with their state and lag, and for a Cluster whether every slot is served. It
answers one operator question before it bites: can ``lock_min_replicas`` be met? If a primary has
fewer replicas in sync than that, every lease on its keys is refused.

Everything here is read from Redis (INFO, CLUSTER INFO), which is outside input: a field that is
missing or not what Redis documents reads as unknown, never as an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.asyncio import RedisCluster
from redis.asyncio.sentinel import SentinelConnectionPool

from playguard_async.coordination.address import RedisAddress
from playguard_async.coordination.client import RedisClient
from playguard_async.kits.aio import bounded

CLUSTER_SLOTS = 16384


@dataclass(frozen=True, slots=True)
class ReplicaState:
    address: str
    online: bool
    lag_seconds: int | None
    behind_bytes: int | None

    def describe(self) -> str:
        state = "in sync" if self.online else "not in sync"
        lag = "" if self.lag_seconds is None else f", lag {self.lag_seconds} s"
        behind = "" if self.behind_bytes is None else f", {self.behind_bytes} bytes behind"
        return f"{self.address} ({state}{lag}{behind})"


@dataclass(frozen=True, slots=True)
class PrimaryState:
    address: str
    replicas: tuple[ReplicaState, ...]

    def in_sync(self) -> int:
        return sum(replica.online for replica in self.replicas)

    def describe(self) -> str:
        replicas = ", ".join(r.describe() for r in self.replicas) or "none"
        return f"primary {self.address}, replicas: {replicas}"


@dataclass(frozen=True, slots=True)
class Topology:
    mode: str
    primaries: tuple[PrimaryState, ...]
    slots_served: int | None = None
    """Slots a Cluster serves (CLUSTER INFO cluster_slots_ok); None outside a Cluster."""

    def problems(self, min_replicas: int) -> list[str]:
        """What makes the lock refuse leases or lose keys: unserved slots, too few replicas."""
        found = []
        if self.slots_served is not None and self.slots_served != CLUSTER_SLOTS:
            found.append(f"only {self.slots_served} of {CLUSTER_SLOTS} cluster slots are served")
        for primary in self.primaries:
            if primary.in_sync() < min_replicas:
                found.append(
                    f"lock_min_replicas = {min_replicas} cannot be met: primary "
                    f"{primary.address} has {primary.in_sync()} replicas in sync, so every lease "
                    "on its keys is refused"
                )
        return found

    def describe(self) -> str:
        slots = "" if self.slots_served is None else f", slots served {self.slots_served}"
        primaries = "; ".join(primary.describe() for primary in self.primaries)
        return f"{self.mode}{slots}: {primaries}"


async def read_topology(redis: RedisClient, address: RedisAddress, timeout: float) -> Topology:
    """The topology ``redis`` reaches, each round trip bounded by ``timeout`` seconds."""
    if isinstance(redis, RedisCluster):
        await bounded(timeout, redis.initialize())
        info = await bounded(timeout, redis.cluster_info())
        primaries = []
        for node in redis.get_primaries():
            replication = await bounded(timeout, redis.info("replication", target_nodes=node))
            primaries.append(_primary(f"{node.host}:{node.port}", replication))
        return Topology(
            "cluster", tuple(primaries), _integer(_cluster_field(info, "cluster_slots_ok"))
        )
    replication = await bounded(timeout, redis.info("replication"))
    pool = redis.connection_pool
    if isinstance(pool, SentinelConnectionPool):
        host, port = await bounded(timeout, pool.get_master_address())  # type: ignore[no-untyped-call]
        return Topology("sentinel", (_primary(f"{host}:{port}", replication),))
    host, port = address.nodes[0]
    return Topology("single", (_primary(f"{host}:{port}", replication),))


def _cluster_field(info: Any, name: str) -> Any:
    """CLUSTER INFO as redis-py gives it: a dict, or one dict per node (the first is enough)."""
    if isinstance(info, dict) and name not in info:
        info = next(iter(info.values()), {})
    return info.get(name) if isinstance(info, dict) else None


def _primary(address: str, replication: Any) -> PrimaryState:
    if not isinstance(replication, dict):
        return PrimaryState(address, ())
    offset = _integer(replication.get("master_repl_offset"))
    replicas = []
    for key, value in replication.items():
        if not (isinstance(key, str) and key.startswith("slave") and isinstance(value, dict)):
            continue
        replica_offset = _integer(value.get("offset"))
        behind = None if offset is None or replica_offset is None else offset - replica_offset
        replicas.append(
            ReplicaState(
                address=f"{value.get('ip', '?')}:{value.get('port', '?')}"[:100],
                online=value.get("state") == "online",
                lag_seconds=_integer(value.get("lag")),
                behind_bytes=behind,
            )
        )
    return PrimaryState(address, tuple(replicas))


def _integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str | bytes) and value.strip().isdigit():
        return int(value)
    return None
