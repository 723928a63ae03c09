"""``playguard cycle``: one cycle of a Marquee now, in the foreground, by the daemon's own engine
under the Marquee's lock."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from playguard_async.coordination.keys import marquee_lock_name
from playguard_async.coordination.lock_state import LockState, inspect_lock
from playguard_async.desired_state.model import Inventory, Marquee
from playguard_async.engine.results import CycleResult, Outcome, PhaseListener
from playguard_async.kits.aio import bounded
from playguard_async.operator.fleet import (
    OperateError,
    RedisUnavailable,
    known_marquee,
    redis_errors,
)
from playguard_async.service.wiring import build_engine, close_engine, stopping_on_signals
from playguard_async.settings import Settings


@dataclass(frozen=True)
class CycleRun:
    """A foreground cycle's result; when it found the Marquee locked, ``holder`` is who held it
    right after (None if they released it in between)."""

    result: CycleResult
    holder: LockState | None = None


async def run_cycle(
    settings: Settings, marquee: str, on_phase: PhaseListener, *, own_signals: bool = True
) -> CycleRun:
    """One cycle of ``marquee`` now, by the daemon's own engine: same lock, same phases, recorded
    in Redis like the daemon's, ``on_phase`` told as each phase ends.

    As in the daemon, a first SIGINT or SIGTERM lets the running phase finish and starts no other
    (outcome ``interrupted``); a second one cancels the phase (``engine.results.CycleCancelled``).
    Not with ``own_signals`` false: in the daemon (the web view's actions) the signals are the
    daemon's, whose handlers must stay.
    """
    engine = build_engine(settings, phase_listeners=[on_phase])
    try:
        with redis_errors(settings):
            inventory = await engine.load_inventory()
            target = _launchable(inventory, marquee, engine.desired_state.describe())
            with stopping_on_signals(engine) if own_signals else contextlib.nullcontext():
                result = await engine.run_one(target, inventory)
            if result.outcome is Outcome.REDIS_UNAVAILABLE:
                # The result keeps only the error's repr, which says little in redis-py 8; asking
                # again raises the error itself, whose message names address and cause.
                await bounded(settings.redis_socket_timeout, engine.redis.ping())
                raise RedisUnavailable(settings, result.reason or "no answer")
            if result.outcome is not Outcome.LOCKED:
                return CycleRun(result)
            name = marquee_lock_name(marquee)
            return CycleRun(
                result,
                await inspect_lock(engine.redis, name, timeout=settings.redis_socket_timeout),
            )
    finally:
        await close_engine(engine)


def _launchable(inventory: Inventory, name: str, source: str) -> Marquee:
    marquee = known_marquee(inventory, name, source)
    if not marquee.launchable:
        raise OperateError(
            f"{source}: marquee {name!r} has launchable: false, so no cycle runs on it"
        )
    if not marquee.runs_cycles:
        raise OperateError(f"{source}: marquee {name!r} has mode: off, so no cycle runs on it")
    return marquee
