"""``pin`` and ``unpin``: hold a Playground at a revision that is not its branch head, and let it
go again (``coordination.pins``). The pin is stored for the Marquee's cycles to act on: this
command reaches Redis only, never a host."""

from __future__ import annotations

from playguard_async.coordination.operator_actions import operator_identity, record_operator_action
from playguard_async.coordination.pins import Pin, lift_pin, take_pin
from playguard_async.desired_state.model import Inventory
from playguard_async.operator.fleet import OperateError, open_fleet
from playguard_async.service.connections import inventory_source
from playguard_async.settings import Settings


def _check_known(inventory: Inventory, marquee: str, playground: str, source: str) -> None:
    """A pin names a Playground of the inventory, on that Marquee, or nothing is stored."""
    on = [pg.name for pg in inventory.playgrounds_on(marquee)]
    if playground not in on:
        listed = ", ".join(on) or "none"
        raise OperateError(
            f"{source}: no playground named {playground!r} on marquee {marquee!r} (there: {listed})"
        )


async def pin(
    settings: Settings,
    marquee: str,
    playground: str,
    revision: str,
    reason: str,
    *,
    user: str | None = None,
) -> Pin:
    """Hold ``playground`` of ``marquee`` at ``revision`` (``last-good`` or a full commit name,
    checked by the caller) as ``user`` (default: this process's); the pin stored, replacing any
    earlier one."""
    async with open_fleet(settings) as fleet:
        _check_known(await fleet.inventory(), marquee, playground,
                     inventory_source(settings).describe())  # fmt: skip
        taken = Pin.taken_now(playground, revision, reason, user)
        await take_pin(fleet.redis, marquee, taken, settings.redis_socket_timeout)
        await record_operator_action(
            fleet.redis, marquee, "pin", reason=reason, target=f"playground {playground} at "
            f"{revision}", by=taken.by, at=taken.since, timeout=settings.redis_socket_timeout,
        )  # fmt: skip
    return taken


async def unpin(
    settings: Settings, marquee: str, playground: str, *, user: str | None = None
) -> bool:
    """Let ``playground`` follow its branch head again (unpinned by ``user``, default this
    process's); whether it was pinned."""
    async with open_fleet(settings) as fleet:
        lifted = await lift_pin(fleet.redis, marquee, playground, settings.redis_socket_timeout)
        if lifted:
            await record_operator_action(fleet.redis, marquee, "unpin",
                                         target=f"playground {playground}",
                                         by=operator_identity(user),
                                         timeout=settings.redis_socket_timeout)  # fmt: skip
        return lifted
