"""``playguard pause`` and ``playguard resume``: a Marquee's or the fleet's pause taken and
lifted (the two halves of one stored pause), in Redis and then on the hosts it concerns before
the command reports (``phases.pause_copies``, ``operator.host_copies``): the paused Marquee's
host, or for the fleet every launchable Marquee's. A lift is put there too, so an older pause's
copy never comes back after a ``resume``: a replica that starts after Redis forgot the pause
(FLUSHALL, a restart without persistence, a failover) reads what the host carries."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.operator_actions import operator_identity, record_operator_action
from playguard_async.coordination.pause import FLEET, Pause, lift_pause, take_pause
from playguard_async.desired_state.model import Inventory, Marquee
from playguard_async.operator.fleet import known_marquee, open_fleet
from playguard_async.operator.host_copies import (
    HostCopy,
    carry_to_hosts,
    host_lines,
    hosts_json,
    on_every_host,
)
from playguard_async.phases.pause_copies import PauseCopy, put_pause_copy
from playguard_async.remote.ssh import RemoteSession
from playguard_async.service.connections import inventory_source
from playguard_async.settings import Settings


@dataclass(frozen=True)
class PauseActed:
    """A pause taken or lifted: the pause (None: there was none in Redis to lift), and which
    hosts of its scope carry the decision."""

    pause: Pause | None
    hosts: tuple[HostCopy, ...]

    @property
    def on_every_host(self) -> bool:
        return on_every_host(self.hosts)

    def host_lines(self) -> list[str]:
        return host_lines(self.hosts, "pause")

    def hosts_json(self) -> dict[str, object]:
        return hosts_json(self.hosts)


def paused_marquees(inventory: Inventory, scope: str) -> list[Marquee]:
    """The Marquees whose hosts carry a pause of ``scope``: the Marquee itself, or for the
    fleet every launchable one, in name order."""
    if scope != FLEET:
        return [inventory.marquee(scope)]
    return sorted(inventory.launchable_marquees(), key=lambda m: m.name)


async def _put_on_hosts(
    settings: Settings, redis: RedisClient, inventory: Inventory, copy: PauseCopy
) -> tuple[HostCopy, ...]:
    what = "lift" if copy.pause is None else "pause"

    async def put(marquee: Marquee, session: RemoteSession) -> str:
        if await put_pause_copy(session, copy):
            return f"written ({what})"
        return "had it (or a later decision)"

    marquees = paused_marquees(inventory, copy.scope)
    return tuple(await carry_to_hosts(settings, redis, marquees, put))


async def take_scope_pause(
    settings: Settings, scope: str, reason: str, seconds: float | None, *, user: str | None = None
) -> PauseActed:
    """Pause ``scope`` (a Marquee of the inventory, or ``FLEET``) for ``seconds`` (default
    ``pause_default_for``) as ``user`` (default: this process's); the pause stored, and on the
    hosts. Nothing is stored for an unknown Marquee."""
    async with open_fleet(settings) as fleet:
        inventory = await fleet.inventory()
        if scope != FLEET:
            known_marquee(inventory, scope, inventory_source(settings).describe())
        taken = Pause.taken_now(scope, reason, seconds or settings.pause_default_for, user)
        await take_pause(fleet.redis, taken, settings.redis_socket_timeout)
        until = datetime.fromtimestamp(taken.until, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        await record_operator_action(
            fleet.redis, scope, "pause", reason=reason, by=taken.by, at=taken.since,
            target=f"{_scope_text(scope)} until {until}", timeout=settings.redis_socket_timeout,
        )  # fmt: skip
        hosts = await _put_on_hosts(settings, fleet.redis, inventory, PauseCopy.taken(taken))
    return PauseActed(taken, hosts)


async def lift_scope_pause(
    settings: Settings, scope: str, *, user: str | None = None
) -> PauseActed:
    """Lift the pause of ``scope`` as ``user`` (default: this process's), in Redis and on the
    hosts (also when Redis had none: it may have forgotten one the hosts carry). A Marquee
    paused by the fleet-wide pause stays paused until that one is lifted (``resume --all``)."""
    async with open_fleet(settings) as fleet:
        inventory = await fleet.inventory()
        if scope != FLEET:
            known_marquee(inventory, scope, inventory_source(settings).describe())
        lifted = await lift_pause(fleet.redis, scope, settings.redis_socket_timeout)
        if lifted is not None:
            await record_operator_action(
                fleet.redis, scope, "resume", target=_scope_text(scope),
                reason=f"lifted the pause by {lifted.by}", by=operator_identity(user),
                timeout=settings.redis_socket_timeout,
            )  # fmt: skip
        hosts = await _put_on_hosts(settings, fleet.redis, inventory, PauseCopy.lifted(scope))
    return PauseActed(lifted, hosts)


def _scope_text(scope: str) -> str:
    return "the fleet" if scope == FLEET else scope
