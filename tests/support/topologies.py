"""One Redis topology under test (single server, Sentinel group or Cluster), seen the same way:
a client built as the daemon builds it, and the node that serves a key, to pause or kill.

Tests that prove the lock's behaviour take a ``TopologyUnderTest`` and run unchanged on each.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis import Redis as SyncRedis
from redis.crc import key_slot

from playguard_async.coordination.client import RedisClient, connect_redis
from playguard_lab.servers import RedisServer
from playguard_lab.topologies import ClusterLab, RedisNode, SentinelGroup, wait_for

TOPOLOGIES = ("single", "sentinel", "cluster")


@dataclass
class TopologyUnderTest:
    """A running topology: ``name``, the daemon's ``url`` for it and a client of it."""

    name: str
    url: str
    lab: RedisServer | SentinelGroup | ClusterLab
    redis: RedisClient

    def node_serving(self, key: str) -> RedisServer:
        """The server that answers writes of ``key`` now: the one server, Sentinel's primary, or
        the Cluster primary that owns the key's slot."""
        if isinstance(self.lab, SentinelGroup):
            return self.lab.primary()
        if isinstance(self.lab, ClusterLab):
            return self.lab.owner_of(key_slot(key.encode()))
        return self.lab

    def nodes(self) -> list[RedisNode | RedisServer]:
        """Every data node (no sentinel)."""
        if isinstance(self.lab, SentinelGroup | ClusterLab):
            return list(self.lab.nodes)
        return [self.lab]

    def flush_scripts(self) -> None:
        """SCRIPT FLUSH on every data node, as a node that never saw our scripts would be."""
        for node in self.nodes():
            with SyncRedis(host="127.0.0.1", port=node.port, socket_timeout=2) as client:
                client.script_flush()

    def replicas(self, key: str) -> list[RedisServer]:
        """The replicas of the node serving ``key`` (none for a single server)."""
        if isinstance(self.lab, SentinelGroup):
            return list(self.lab.replicas())
        if isinstance(self.lab, ClusterLab):
            owner = self.lab.owner_of(key_slot(key.encode()))
            return list(self.lab.replicas_of(owner))
        return []


def heal(lab: RedisServer | SentinelGroup | ClusterLab) -> None:
    """Undo what a test did to the topology's servers, so the next test finds it whole."""
    if isinstance(lab, RedisServer):
        lab.ensure_running()
    elif isinstance(lab, SentinelGroup):
        lab.heal()
    else:
        for node in lab.nodes:
            node.ensure_running()
        wait_for(lab.healthy, 30, "a healthy cluster")


def client_for(url: str, *, timeout: float = 1.0) -> RedisClient:
    """A client with the short timeouts a paused server needs, built like the daemon's."""
    return connect_redis(url, socket_timeout=timeout, connect_timeout=timeout)
