"""``playguard pause`` and ``playguard resume``: a Marquee's or the fleet's pause taken and
lifted (the two halves of one stored pause)."""

from __future__ import annotations

from playguard_async.coordination.pause import FLEET, Pause, lift_pause, take_pause
from playguard_async.operator.fleet import known_marquee, open_fleet
from playguard_async.service.connections import inventory_source
from playguard_async.settings import Settings


async def take_scope_pause(
    settings: Settings, scope: str, reason: str, seconds: float | None
) -> Pause:
    """Pause ``scope`` (a Marquee of the inventory, or ``FLEET``) for ``seconds`` (default
    ``pause_default_for``); the pause stored. Nothing is stored for an unknown Marquee."""
    async with open_fleet(settings) as fleet:
        if scope != FLEET:
            known_marquee(await fleet.inventory(), scope, inventory_source(settings).describe())
        taken = Pause.taken_now(scope, reason, seconds or settings.pause_default_for)
        await take_pause(fleet.redis, taken, settings.redis_socket_timeout)
    return taken


async def lift_scope_pause(settings: Settings, scope: str) -> Pause | None:
    """Lift the pause of ``scope``; the pause lifted, None when there was none. A Marquee paused
    by the fleet-wide pause stays paused until that one is lifted (``resume --all``)."""
    async with open_fleet(settings) as fleet:
        if scope != FLEET:
            known_marquee(await fleet.inventory(), scope, inventory_source(settings).describe())
        return await lift_pause(fleet.redis, scope, settings.redis_socket_timeout)
