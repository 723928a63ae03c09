"""An operator's rollout decision put on the hosts of its scope before the command reports it:
``rollout promote|pause|resume|abort`` (CLI and web view) write the new record to the host copy
(``phases.decision_copies``) of each Marquee with a Playground of the scope, so the hosts carry it
whatever Redis does next (a FLUSHALL, a failover seconds after the action): a replica that never
read it learns it from the first host it cycles.

Each Marquee is written as a one-off cycle writes it: under its token lock (a fresh fence, so a
cycle's write can never interleave with ours), through the fence guard, only where the host's
copy is older (a lower ``seq``: a newer one a cycle wrote since stays). A Marquee whose lock a
cycle holds right now is not written: that cycle reads the record from Redis at its gate (and
writes it to its host from there); it is named, as is a host that cannot be reached, and the
record in Redis stands either way. Bounded: ``max_concurrent_cycles`` Marquees at a time, each
within an SSH connect and two command budgets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from redis.exceptions import RedisError

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.fence import FenceRefused
from playguard_async.coordination.keys import marquee_lock_name
from playguard_async.coordination.lock import Lease, LockUnavailable, TokenLock
from playguard_async.coordination.lock_state import inspect_lock
from playguard_async.desired_state.model import Inventory, Marquee
from playguard_async.operator.display import holder_text
from playguard_async.operator.fleet import open_fleet
from playguard_async.operator.rollout import store_action
from playguard_async.phases.decision_copies import (
    DecisionMemory,
    keep_rollouts,
    kept_rollouts,
    rollout_copy,
)
from playguard_async.phases.rollout_desk import scope_of
from playguard_async.phases.rollout_record import Rollout
from playguard_async.remote.errors import RemoteError
from playguard_async.remote.ssh import RemoteOptions, RemoteSession, open_session
from playguard_async.service.wiring import remote_options
from playguard_async.settings import Settings

FENCE_TRIES = 2
"""Leases a Marquee is written under at most: a host that refused the first (Redis's fence
counter fell behind it) has the counter lifted to its own, and the second passes."""


@dataclass(frozen=True)
class HostCopy:
    """Whether ``marquee``'s host carries the record now, and in a few words why (not)."""

    marquee: str
    carries: bool
    detail: str

    def as_json(self) -> dict[str, object]:
        return {"marquee": self.marquee, "carries": self.carries, "detail": self.detail}


def scope_marquees(inventory: Inventory, scope: str) -> dict[Marquee, list[str]]:
    """The Marquees whose cycles may admit a release of ``scope`` (its cohort: launchable, mode
    ``apply``, with a running Playground of it), each with those Playgrounds, in name order. A
    Marquee in ``detect`` changes nothing, so admits nothing; it reads Redis or the hosts'
    copies when it is switched to ``apply``. A copy is bookkeeping: written also outside a
    maintenance window."""
    found: dict[Marquee, list[str]] = {}
    cohort = (m for m in inventory.cycled_marquees() if m.mode == "apply")
    for marquee in sorted(cohort, key=lambda m: m.name):
        names = [
            pg.name
            for pg in inventory.playgrounds_on(marquee.name)
            if pg.state == "running" and scope_of(pg) == scope
        ]
        if names:
            found[marquee] = names
    return found


async def carry_to_hosts(
    settings: Settings, redis: RedisClient, inventory: Inventory, rollout: Rollout
) -> list[HostCopy]:
    """``rollout`` written to the host copy of each Marquee of its scope where it is older; what
    each host carries, in name order."""
    options = remote_options(settings)
    slots = asyncio.Semaphore(settings.cycle_slots())
    bound = settings.ssh_connect_timeout + 2 * settings.remote_command_timeout

    async def carry(marquee: Marquee, playgrounds: Sequence[str]) -> HostCopy:
        async with slots:
            try:
                async with asyncio.timeout(bound):
                    return await _carry(
                        settings, redis, options, marquee, playgrounds=playgrounds, rollout=rollout
                    )
            except TimeoutError:
                return HostCopy(marquee.name, False, f"no answer within {bound:g} s")

    marquees = scope_marquees(inventory, rollout.scope)
    return list(await asyncio.gather(*(carry(m, pgs) for m, pgs in marquees.items())))


async def _carry(
    settings: Settings, redis: RedisClient, options: RemoteOptions, marquee: Marquee,
    *, playgrounds: Sequence[str], rollout: Rollout,
) -> HostCopy:  # fmt: skip
    lock = TokenLock(
        redis, marquee_lock_name(marquee.name), ttl=settings.lock_ttl,
        timeout=settings.redis_socket_timeout, replica=settings.replica_id,
        min_replicas=settings.lock_min_replicas, replica_timeout=settings.lock_replica_timeout,
    )  # fmt: skip
    for _ in range(FENCE_TRIES):
        try:
            lease = await lock.acquire()
        except LockUnavailable:
            return HostCopy(marquee.name, False, "Redis did not answer for its lock")
        if lease is None:
            return HostCopy(marquee.name, False, await _locked(redis, lock, settings))
        try:
            return await _write(options, marquee, lease, playgrounds, rollout)
        except FenceRefused as exc:
            if exc.host_fence is None:
                return HostCopy(marquee.name, False, f"refused by the host: {exc.why}")
            try:
                await lock.raise_fence(exc.host_fence)
            except LockUnavailable:
                return HostCopy(marquee.name, False, "Redis did not answer for its fence")
        except RemoteError as exc:
            return HostCopy(marquee.name, False, f"unreachable: {exc}")
        finally:
            await lease.release()
    return HostCopy(marquee.name, False, "refused by the host: its fence is ahead of Redis's")


async def _locked(redis: RedisClient, lock: TokenLock, settings: Settings) -> str:
    """Why a Marquee whose lock is held was not written, naming the holder when Redis says."""
    try:
        state = await inspect_lock(redis, lock.name, timeout=settings.redis_socket_timeout)
    except (RedisError, TimeoutError):
        state = None
    holder = "another holder" if state is None else holder_text(state)
    return f"locked by {holder}: that cycle reads the record from Redis at its gate"


async def _write(
    options: RemoteOptions, marquee: Marquee, lease: Lease, playgrounds: Sequence[str],
    rollout: Rollout,
) -> HostCopy:  # fmt: skip
    async with open_session(marquee, options, lease=lease) as session:
        written = await put_on_host(session, playgrounds, rollout)
    if not written:
        return HostCopy(marquee.name, True, f"had it (seq {rollout.seq} or newer)")
    return HostCopy(marquee.name, True, f"written (seq {rollout.seq})")


async def put_on_host(session: RemoteSession, playgrounds: Sequence[str], rollout: Rollout) -> bool:
    """Read the host's copies of ``playgrounds``' scope (one command), then write ``rollout``
    over those that are older (one fenced write each), as a cycle's gate does, with a memory
    of its own; whether any was written."""
    memory = DecisionMemory()
    await kept_rollouts(session, dict.fromkeys(playgrounds, rollout.scope), {}, memory)
    marquee = session.marquee.name
    older = [pg for pg in playgrounds if memory.on_host[marquee, rollout_copy(pg)] < rollout.seq]
    await keep_rollouts(session, dict.fromkeys(older, rollout), memory)
    return bool(older)


async def act_on_hosts(
    settings: Settings, scope: str, rollout_id: str, action: str, why: str,
    *, user: str | None = None,
) -> Acted:  # fmt: skip
    """``operator.rollout.act``, then the stored record put on the hosts of the scope's
    Marquees. The desired state is read first: when it cannot be, nothing is stored."""
    async with open_fleet(settings) as fleet:
        inventory = await fleet.inventory()
        changed = await store_action(fleet, scope, rollout_id, action, why, user=user)
        hosts = await carry_to_hosts(settings, fleet.redis, inventory, changed)
    return Acted(changed, tuple(hosts))


@dataclass(frozen=True)
class Acted:
    """An operator's action on a rollout: the record stored in Redis, and which hosts of its
    scope carry it."""

    rollout: Rollout
    hosts: tuple[HostCopy, ...]

    @property
    def on_every_host(self) -> bool:
        return all(host.carries for host in self.hosts)

    def host_lines(self) -> list[str]:
        """One line of how many hosts carry it, then one per host that does not, saying why."""
        carrying = sum(host.carries for host in self.hosts)
        lines = [f"  on the hosts: {carrying} of {len(self.hosts)} Marquees carry it"]
        lines += [f"  {h.marquee}: not yet: {h.detail}" for h in self.hosts if not h.carries]
        if not self.on_every_host:
            lines.append("  the record in Redis stands: those read it there at their next cycle")
        return lines
