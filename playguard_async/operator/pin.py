"""``pin`` and ``unpin``: hold a Playground at a revision that is not its branch head, and let it
go again (``coordination.pins``). The pin is stored for the Marquee's cycles to act on. A pin at
a commit is stored only once the Playspec's origin was found to have that commit
(``pin_origin``, loaded for a commit pin only); nothing of a host is written."""

from __future__ import annotations

from playguard_async.coordination.operator_actions import operator_identity, record_operator_action
from playguard_async.coordination.pins import LAST_GOOD, Pin, lift_pin, take_pin
from playguard_async.desired_state.model import Inventory, Playground
from playguard_async.operator.fleet import OperateError, open_fleet
from playguard_async.service.connections import inventory_source
from playguard_async.settings import Settings


def _known(inventory: Inventory, marquee: str, playground: str, source: str) -> Playground:
    """A pin names a Playground of the inventory, on that Marquee, or nothing is stored."""
    on = {pg.name: pg for pg in inventory.playgrounds_on(marquee)}
    if playground not in on:
        listed = ", ".join(on) or "none"
        raise OperateError(
            f"{source}: no playground named {playground!r} on marquee {marquee!r} (there: {listed})"
        )
    return on[playground]


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
    its shape checked by the caller; a commit the Playspec's origin must have:
    ``pin_origin``) as ``user`` (default: this process's); the pin stored, replacing any
    earlier one."""
    async with open_fleet(settings) as fleet:
        inventory = await fleet.inventory()
        known = _known(inventory, marquee, playground, inventory_source(settings).describe())
        if revision != LAST_GOOD:
            # SSH is loaded for a commit pin only: a last-good pin, like every command that
            # reaches Redis alone, loads no remote layer (tests/unit/test_cli_startup.py).
            from playguard_async.operator.pin_origin import check_on_origin  # noqa: PLC0415

            await check_on_origin(settings, inventory, known, revision)
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
