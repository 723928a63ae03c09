"""``playguard plan``: a detect cycle of one Marquee or of the fleet, and its verdict as the exit
status."""

from __future__ import annotations

import asyncio
import enum
from typing import Any

from playguard_async.engine.results import CycleResult, Outcome
from playguard_async.operator.cycle import CycleRun, run_cycle
from playguard_async.operator.fleet import redis_errors
from playguard_async.service.wiring import build_engine, close_engine, stopping_on_signals
from playguard_async.settings import Settings


class PlanVerdict(enum.IntEnum):
    """A plan's verdict, as its exit status (Terraform's ``-detailed-exitcode``)."""

    IN_SYNC = 0
    ERROR = 1
    CHANGES = 2


def plan_verdict(result: CycleResult) -> PlanVerdict:
    """In sync (an ok detect cycle with nothing it would do), changes pending, or an error (any
    other outcome: locked, unreachable, paused, a failed phase...)."""
    if result.outcome is not Outcome.OK:
        return PlanVerdict.ERROR
    return PlanVerdict.CHANGES if any(result.actions.values()) else PlanVerdict.IN_SYNC


def held_playgrounds(result: CycleResult) -> dict[str, str]:
    """Playground -> why it is held at a revision that is not its branch head (sync_git's
    finding): shown as held, not as drift."""
    held = (result.findings.get("sync_git") or {}).get("held")
    if not isinstance(held, dict):
        return {}
    return {str(name): str(why) for name, why in held.items()}


def rollouts_in(result: CycleResult) -> dict[str, dict[str, Any]]:
    """Scope -> the rollout the cycle's Playgrounds are part of, as reconcile_playgrounds found
    it (in a plan, the one the cycle would open included)."""
    found = (result.findings.get("reconcile_playgrounds") or {}).get("rollouts")
    return found if isinstance(found, dict) else {}


def plan_json(result: CycleResult) -> dict[str, Any]:
    """A plan for scripts: the verdict, what would change by phase, the Playgrounds held and
    why, the rollouts its Playgrounds are part of, and the detect cycle."""
    return {
        "marquee": result.marquee,
        "verdict": plan_verdict(result).name.lower(),
        "changes": {phase: taken for phase, taken in result.actions.items() if taken},
        "held": held_playgrounds(result),
        "rollouts": rollouts_in(result),
        "outcome": result.outcome.value,
        "reason": result.reason,
        "cycle": result.to_record(),
    }


async def plan_one(settings: Settings, marquee: str, *, own_signals: bool = True) -> CycleRun:
    """A detect cycle of ``marquee`` under its lock (``run_cycle`` as a dry run)."""
    return await run_cycle(
        _planning(settings), marquee, lambda result, phase: None, own_signals=own_signals
    )


async def plan_fleet(settings: Settings) -> list[CycleResult]:
    """A detect cycle of every Marquee that runs cycles, as ``run_cycle`` runs one, in
    inventory order; at most ``max_concurrent_cycles`` at once (the engine's slots)."""
    engine = build_engine(_planning(settings))
    try:
        with redis_errors(settings):
            inventory = await engine.load_inventory()
            with stopping_on_signals(engine):
                return list(
                    await asyncio.gather(
                        *(engine.run_one(m, inventory) for m in inventory.cycled_marquees())
                    )
                )
    finally:
        await close_engine(engine)


def _planning(settings: Settings) -> Settings:
    """``settings`` for a plan: every cycle a dry run, whatever the Marquee's mode."""
    return settings.model_copy(update={"dry_run": True})
