"""``playguard pause`` and ``playguard resume``: a Marquee's or the fleet's pause taken and
lifted (the two halves of one stored pause)."""

from __future__ import annotations

from datetime import UTC, datetime

from playguard_async.coordination.operator_actions import operator_identity, record_operator_action
from playguard_async.coordination.pause import FLEET, Pause, lift_pause, take_pause
from playguard_async.operator.fleet import known_marquee, open_fleet
from playguard_async.service.connections import inventory_source
from playguard_async.settings import Settings


async def take_scope_pause(
    settings: Settings, scope: str, reason: str, seconds: float | None, *, user: str | None = None
) -> Pause:
    """Pause ``scope`` (a Marquee of the inventory, or ``FLEET``) for ``seconds`` (default
    ``pause_default_for``) as ``user`` (default: this process's); the pause stored. Nothing is
    stored for an unknown Marquee."""
    async with open_fleet(settings) as fleet:
        if scope != FLEET:
            known_marquee(await fleet.inventory(), scope, inventory_source(settings).describe())
        taken = Pause.taken_now(scope, reason, seconds or settings.pause_default_for, user)
        await take_pause(fleet.redis, taken, settings.redis_socket_timeout)
        until = datetime.fromtimestamp(taken.until, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        await record_operator_action(
            fleet.redis, scope, "pause", reason=reason, by=taken.by, at=taken.since,
            target=f"{_scope_text(scope)} until {until}", timeout=settings.redis_socket_timeout,
        )  # fmt: skip
    return taken


async def lift_scope_pause(
    settings: Settings, scope: str, *, user: str | None = None
) -> Pause | None:
    """Lift the pause of ``scope`` as ``user`` (default: this process's); the pause lifted, None
    when there was none. A Marquee paused by the fleet-wide pause stays paused until that one is
    lifted (``resume --all``)."""
    async with open_fleet(settings) as fleet:
        if scope != FLEET:
            known_marquee(await fleet.inventory(), scope, inventory_source(settings).describe())
        lifted = await lift_pause(fleet.redis, scope, settings.redis_socket_timeout)
        if lifted is not None:
            await record_operator_action(
                fleet.redis, scope, "resume", target=_scope_text(scope),
                reason=f"lifted the pause by {lifted.by}", by=operator_identity(user),
                timeout=settings.redis_socket_timeout,
            )  # fmt: skip
        return lifted


def _scope_text(scope: str) -> str:
    return "the fleet" if scope == FLEET else scope
