"""An operator's decision put on hosts before the command reports it, so the hosts carry it
whatever Redis does next (a FLUSHALL, a restart without persistence, a failover seconds after the
action): the one way ``rollout promote|pause|resume|abort`` (``operator.rollout_hosts``) and
``pause``/``resume`` (``operator.pause``) write their host copies (``remote.kept``).

Each Marquee is written as a one-off cycle writes it: under its token lock (a fresh fence, so a
cycle's write can never interleave with ours), through the fence guard; what is written, and
only where the host's copy is older, is the caller's ``put``. A Marquee whose lock a cycle holds
right now is not written: that cycle reads the decision from Redis (and a later cycle or
action puts it on the host); it is named, as is a host that cannot be reached, and the decision
in Redis stands either way. Bounded: ``max_concurrent_cycles`` Marquees at a time, each within
an SSH connect and two command budgets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from redis.exceptions import RedisError

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.fence import FenceRefused
from playguard_async.coordination.keys import marquee_lock_name
from playguard_async.coordination.lock import LockUnavailable, TokenLock
from playguard_async.coordination.lock_state import inspect_lock
from playguard_async.desired_state.model import Marquee
from playguard_async.operator.display import holder_text
from playguard_async.remote.errors import RemoteError
from playguard_async.remote.ssh import RemoteOptions, RemoteSession, open_session
from playguard_async.service.wiring import remote_options
from playguard_async.settings import Settings

FENCE_TRIES = 2
"""Leases a Marquee is written under at most: a host that refused the first (Redis's fence
counter fell behind it) has the counter lifted to its own, and the second passes."""

PutOnHost = Callable[[Marquee, RemoteSession], Awaitable[str]]
"""Writes the decision to one Marquee's host where its copy is older; says what it found
(``written ...``, ``had it ...``)."""


@dataclass(frozen=True)
class HostCopy:
    """Whether ``marquee``'s host carries the decision now, and in a few words why (not)."""

    marquee: str
    carries: bool
    detail: str

    def as_json(self) -> dict[str, object]:
        return {"marquee": self.marquee, "carries": self.carries, "detail": self.detail}


async def carry_to_hosts(
    settings: Settings, redis: RedisClient, marquees: Iterable[Marquee], put: PutOnHost
) -> list[HostCopy]:
    """``put`` run on the host of each of ``marquees`` under its lock; what each host carries,
    in the order given."""
    options = remote_options(settings)
    slots = asyncio.Semaphore(settings.cycle_slots())
    bound = settings.ssh_connect_timeout + 2 * settings.remote_command_timeout

    async def carry(marquee: Marquee) -> HostCopy:
        async with slots:
            try:
                async with asyncio.timeout(bound):
                    return await _carry(settings, redis, options, marquee, put)
            except TimeoutError:
                return HostCopy(marquee.name, False, f"no answer within {bound:g} s")

    return list(await asyncio.gather(*(carry(marquee) for marquee in marquees)))


async def _carry(
    settings: Settings, redis: RedisClient, options: RemoteOptions, marquee: Marquee,
    put: PutOnHost,
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
            async with open_session(marquee, options, lease=lease) as session:
                return HostCopy(marquee.name, True, await put(marquee, session))
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
    return f"locked by {holder}: that cycle reads the decision from Redis"


def on_every_host(hosts: Sequence[HostCopy]) -> bool:
    return all(host.carries for host in hosts)


def host_lines(hosts: Sequence[HostCopy], what: str = "record") -> list[str]:
    """One line of how many hosts carry it, then one per host that does not, saying why."""
    carrying = sum(host.carries for host in hosts)
    lines = [f"  on the hosts: {carrying} of {len(hosts)} Marquees carry it"]
    lines += [f"  {h.marquee}: not yet: {h.detail}" for h in hosts if not h.carries]
    if not on_every_host(hosts):
        lines.append(f"  the {what} in Redis stands: those read it there at their next cycle")
    return lines


def hosts_json(hosts: Sequence[HostCopy]) -> dict[str, object]:
    """The hosts' part of an action's ``--json`` object."""
    return {"hosts": [host.as_json() for host in hosts], "on_every_host": on_every_host(hosts)}
