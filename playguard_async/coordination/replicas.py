"""Which replica attempts which Marquee: heartbeats in one sorted set, rendezvous hashing over them.

Without it every replica tries every lock on every tick: N replicas make N attempts per Marquee,
N-1 of them end ``locked``, and replicas whose ticks line up keep finding the same holder. Here each
replica announces itself in ``REPLICAS_KEY`` (member: its ``replica_id``; score: when its
announcement expires, in Redis's own clock, so no two machines' clocks are compared) and attempts
only the Marquees whose rendezvous hash it wins among the live replicas. A replica that stops
leaves at once; one that dies drops out when its announcement expires (announced every third of a
tick for one tick), and the survivors, who read the roster again as each tick starts, take its
Marquees at their second tick start after its death at the latest.

Each replica also says which version of playguard it runs (``REPLICA_VERSIONS_KEY``, a hash
beside the roster, whose members stay bare ids so that replicas from before it hash the same
names): a fleet whose live replicas run different versions, or one that does not say (from
before versions were published), is mixed (``FleetVersions``), and a rollout starts no new
wave while it is (``phases.rollout_desk``).

Assignment is a hint, never a permission: the lock stays the only arbiter. Two replicas that
disagree about who is live (one saw an announcement the other has not yet) both attempt, and one
ends ``locked``. A replica that cannot reach Redis, or whose last view has expired, attempts every
Marquee, as if alone: its locks fail the same way while Redis is away, and nothing is left unowned
while it is back.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Callable, Sequence

import structlog

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.keys import REPLICA_VERSIONS_KEY, REPLICAS_KEY
from playguard_async.kits.aio import StopSignal, bounded
from playguard_async.kits.capacity import MAX_SECONDS

log = structlog.get_logger("playguard.replicas")

MAX_REPLICAS = 1024
"""Members read per announcement: the sorted set is shared with every other replica (and anyone
with redis-cli), so what this process reads of it stays bounded whatever it holds."""

HORIZON_MS = round(MAX_SECONDS * 1000)
"""No replica announces itself for longer than its longest tick can be (``ANNOUNCE_SCRIPT``)."""

BEATS_PER_TTL = 3
"""Announcements per lifetime of one: two may be lost or late before the others drop this one."""

_NOW = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
"""

_LIVE = """
local horizon = now_ms + tonumber(ARGV[4])
local live = redis.call('ZRANGEBYSCORE', KEYS[1], now_ms, horizon, 'LIMIT', 0, ARGV[3])
local versions = {}
if #live > 0 then
  versions = redis.pcall('HMGET', KEYS[2], unpack(live))
  if versions.err then versions = {} end
end
return {live, versions}
"""
"""Who is live and which version each runs (ARGV[3]: at most so many, ARGV[4]: the horizon)."""

ANNOUNCE_SCRIPT = (
    _NOW
    + """local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms, 'LIMIT', 0, ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
if #gone > 0 then redis.pcall('HDEL', KEYS[2], unpack(gone)) end
if ARGV[2] == '0' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.pcall('HDEL', KEYS[2], ARGV[1])
else
  redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[2]), ARGV[1])
  redis.pcall('HSET', KEYS[2], ARGV[1], ARGV[5])
end
"""
    + _LIVE
)
"""Drop the expired (and their versions), announce with this replica's version (a ttl of 0:
leave) and read who is live and which version each runs, in one round trip. A member announced
for longer than any replica can be (``MAX_SECONDS``: set by hand, or by another tool) is not
read: it would otherwise keep its share of the fleet unattempted for ever. A versions key of
another type reads as no versions (every replica unknown: a mixed fleet, which fails closed)."""

VERSION_MAX = 64
"""Characters of a replica's version shown; a longer or unprintable one reads as unknown."""

UNKNOWN = "unknown"
"""How a replica that does not publish its version is shown."""


def version_of(value: object) -> str:
    """A published version as read (outside input): printable and short, else ``UNKNOWN``."""
    if isinstance(value, bytes):
        text = value.decode("utf-8", "replace")
        if 0 < len(text) <= VERSION_MAX and text.isprintable():
            return text
    return UNKNOWN


def mix_of(versions: Sequence[str]) -> str | None:
    """Why the live replicas running ``versions`` are a mixed fleet (``0.1.0 x2, unknown x1``),
    or None when they all run one known version (or there is at most one)."""
    if len(versions) < 2 or (len(set(versions)) == 1 and versions[0] != UNKNOWN):
        return None
    counts = Counter(versions)
    return (
        "replicas of versions "
        + ", ".join(f"{version} x{count}" for version, count in sorted(counts.items()))
        + " share the fleet"
    )


READ_SCRIPT = _NOW + _LIVE
"""``ANNOUNCE_SCRIPT``'s reading alone, for a command that is no replica (``status``)."""


async def live_versions(redis: RedisClient, timeout: float) -> list[tuple[str, str]]:
    """The live replicas, each with the version it publishes (``UNKNOWN``: none), by id."""
    args: list[bytes | int] = [b"", 0, MAX_REPLICAS, HORIZON_MS]
    script = redis.register_script(READ_SCRIPT)
    members, versions = await bounded(
        timeout, script(keys=[REPLICAS_KEY, REPLICA_VERSIONS_KEY], args=args)
    )
    by_member = dict(zip(members, versions, strict=False))
    return sorted(
        (member.decode("utf-8", "replace")[:VERSION_MAX], version_of(by_member.get(member)))
        for member in members
        if isinstance(member, bytes)
    )


class FleetVersions:
    """The versions of the live replicas as this replica last read them, shared with its
    cycles (``mixed``: why no rollout starts a new wave, else None)."""

    def __init__(self) -> None:
        self.mixed: str | None = None


def rendezvous_owner(marquee: str, replicas: tuple[bytes, ...]) -> bytes:
    """The replica with the highest hash of (replica, Marquee): each Marquee moves only when its
    own owner comes or goes, and every replica computes the same owner from the same members."""
    name = marquee.encode()
    return max(replicas, key=lambda replica: _score(replica, name))


def _score(replica: bytes, marquee: bytes) -> int:
    digest = hashlib.blake2b(replica + b"\0" + marquee, digest_size=8).digest()
    return int.from_bytes(digest, "big")


class Share:
    """The Marquees one replica attempts among ``live``: equal for equal views, so that a reader
    of the desired state can tell a changed share from the same one (``==``); each Marquee's
    answer is computed once per view."""

    def __init__(self, replica: bytes, live: tuple[bytes, ...]) -> None:
        self.replica = replica
        self.live = live
        self._owned: dict[str, bool] = {}

    def __call__(self, marquee: str) -> bool:
        owned = self._owned.get(marquee)
        if owned is None:
            owned = self._owned[marquee] = rendezvous_owner(marquee, self.live) == self.replica
        return owned

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Share):
            return NotImplemented
        return (self.replica, self.live) == (other.replica, other.live)

    def __hash__(self) -> int:
        return hash((self.replica, self.live))


class ReplicaRoster:
    """This replica's view of the live replicas, kept fresh by ``keep_announcing``."""

    def __init__(
        self,
        redis: RedisClient,
        replica_id: str,
        *,
        ttl: float,
        timeout: float,
        version: str,
        versions: FleetVersions | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.replica = replica_id.encode()
        self.version = version
        self.versions = FleetVersions() if versions is None else versions
        self.ttl = ttl
        self.timeout = timeout
        self.clock = clock
        self.live: tuple[bytes, ...] = ()
        self._script = redis.register_script(ANNOUNCE_SCRIPT)
        self._valid_until = 0.0
        self._share = Share(self.replica, ())
        self._reachable: bool | None = None

    @property
    def sharing(self) -> bool:
        """Whether the last view is recent enough to leave other replicas' Marquees to them."""
        return self.clock() < self._valid_until and self.replica in self.live

    @property
    def share(self) -> Share | None:
        """This replica's share while it shares the fleet with others; None alone or while not
        sharing (every Marquee is then its own)."""
        return self._share if self.sharing and len(self.live) > 1 else None

    def owns(self, marquee: str) -> bool:
        """Whether this replica should attempt ``marquee`` now (every one while not sharing)."""
        return self._share(marquee) if self.sharing else True

    async def announce(self) -> None:
        """Say this replica is live for one ttl and read who else is; a failure leaves the view
        to expire (logged once per change between reachable and not)."""
        sent = self.clock()
        try:
            members, versions = await self._call(round(self.ttl * 1000))
        except Exception as exc:
            if self._reachable is not False:
                log.warning("replicas.unreachable", error=f"{type(exc).__name__}: {exc}")
            self._reachable = False
            return
        if self._reachable is False:
            log.info("replicas.reachable")
        first, self._reachable = self._reachable is None, True
        self._valid_until = sent + self.ttl
        by_member = dict(zip(members, versions, strict=False))
        live = tuple(sorted(member for member in members if isinstance(member, bytes)))
        mixed = mix_of([version_of(by_member.get(member)) for member in live])
        if mixed != self.versions.mixed:
            if mixed is not None:
                log.warning("replicas.versions_mixed", why=mixed)
            elif not first:
                log.info("replicas.versions_agree", version=self.version)
            self.versions.mixed = mixed
        if live != self.live:
            if not first:  # the first view is no change: the engine's start line tells it
                log.info("replicas.changed", live=len(live), includes_self=self.replica in live)
            self.live = live
            self._share = Share(self.replica, live)

    async def leave(self) -> None:
        """Hand this replica's Marquees to the others now rather than when its ttl runs out."""
        self._valid_until = 0.0
        try:
            await self._call(0)
        except Exception as exc:
            log.warning("replicas.leave_failed", error=f"{type(exc).__name__}: {exc}")

    async def keep_announcing(self, stopping: StopSignal) -> None:
        """Announce every third of a ttl until ``stopping``, then leave."""
        while not stopping.is_set():
            await stopping.sleep(self.ttl / BEATS_PER_TTL)
            if not stopping.is_set():
                await self.announce()
        await self.leave()

    async def _call(self, ttl_ms: int) -> tuple[list[object], list[object]]:
        args: list[bytes | int] = [self.replica, ttl_ms, MAX_REPLICAS, HORIZON_MS,
                                   self.version.encode()]  # fmt: skip
        keys = [REPLICAS_KEY, REPLICA_VERSIONS_KEY]
        members, versions = await bounded(self.timeout, self._script(keys=keys, args=args))
        return list(members), list(versions)
