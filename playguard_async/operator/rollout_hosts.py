"""An operator's rollout decision put on the hosts of its scope before the command reports it:
``rollout promote|pause|resume|abort`` (CLI and web view) write the new record to the host copy
(``phases.decision_copies``) of each Marquee with a Playground of the scope
(``operator.host_copies``: under each Marquee's lock, through the fence guard), so the hosts
carry it whatever Redis does next: a replica that never read it learns it from the first host it
cycles. A host's copy is written only where it is older (a lower ``seq``: a newer one a cycle
wrote since stays); a Marquee whose lock a cycle holds reads the record from Redis at its gate
(and writes it to its host from there).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from playguard_async.coordination.client import RedisClient
from playguard_async.desired_state.model import Inventory, Marquee
from playguard_async.operator.fleet import open_fleet
from playguard_async.operator.host_copies import HostCopy, host_lines, on_every_host
from playguard_async.operator.host_copies import carry_to_hosts as carry_decision
from playguard_async.operator.rollout import store_action
from playguard_async.phases.decision_copies import (
    DecisionMemory,
    keep_rollouts,
    kept_rollouts,
    rollout_copy,
)
from playguard_async.phases.rollout_desk import scope_of
from playguard_async.phases.rollout_record import Rollout
from playguard_async.remote.ssh import RemoteSession
from playguard_async.settings import Settings


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
    marquees = scope_marquees(inventory, rollout.scope)

    async def put(marquee: Marquee, session: RemoteSession) -> str:
        if await put_on_host(session, marquees[marquee], rollout):
            return f"written (seq {rollout.seq})"
        return f"had it (seq {rollout.seq} or newer)"

    return await carry_decision(settings, redis, marquees, put)


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
        return on_every_host(self.hosts)

    def host_lines(self) -> list[str]:
        """One line of how many hosts carry it, then one per host that does not, saying why."""
        return host_lines(self.hosts)
