"""``playguard plan``: a detect cycle of one Marquee or of the fleet (its verdict and how it is
shown: ``plan_verdict``)."""

from __future__ import annotations

import asyncio

from playguard_async.engine.results import CycleResult
from playguard_async.operator.cycle import CycleRun, run_cycle
from playguard_async.operator.fleet import redis_errors
from playguard_async.service.wiring import build_engine, close_engine, stopping_on_signals
from playguard_async.settings import Settings


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
