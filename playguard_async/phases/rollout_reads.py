"""Rollout records as read from Redis: each parsed once per change (every cycle of a cohort
reads its scope's record, which changes only at a step), and the listings operators and the web
view read (``rollout list``, ``status``, the fleet page's progress). A record that is not of the
written form, or a key of another type, reads as none with one log line at each reading."""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.keys import rollout_key
from playguard_async.coordination.rollouts import (
    FOREIGN,
    RolloutRead,
    read_rollout,
    rollout_scopes,
)
from playguard_async.phases.rollout_record import Rollout

log = structlog.get_logger("playguard.rollouts")

PARSED_KEPT = 256
"""Scopes whose last parsed record ``parsed_rollout`` keeps (all are dropped past it)."""

_PARSED: dict[str, tuple[str, Rollout]] = {}
"""Scope -> the record last read and the rollout parsed from it: every cycle of a cohort reads
the record once and again when it marks itself healthy, and the record changes only at a step,
so parsing it each time cost more than the rest of an in-sync cycle (bench/README.md,
"Rollouts"). A ``Rollout`` is immutable; garbage is not kept, so it is logged at each reading."""


def parsed_rollout(read: RolloutRead) -> Rollout | None:
    """The rollout ``read`` holds (None: no record, or one not of the written form, said in
    one line)."""
    if read.raw is None:
        return None
    if read.raw == FOREIGN:
        log.warning("rollout.unreadable", key=rollout_key(read.scope),
                    value="a key of another type")  # fmt: skip
        return None
    kept = _PARSED.get(read.scope)
    if kept is not None and kept[0] == read.raw:
        return kept[1]
    rollout = Rollout.parse(read.scope, read.raw)
    if rollout is not None:
        if len(_PARSED) >= PARSED_KEPT:
            _PARSED.clear()
        _PARSED[read.scope] = (read.raw, rollout)
    return rollout


async def _recorded_reads(redis: RedisClient, timeout: float) -> list[tuple[str, RolloutRead]]:
    """Every scope that had a rollout, in scope order, with its read: the one walk of the index
    that the listings below share."""
    return [
        (scope, await read_rollout(redis, scope, timeout))
        for scope in await rollout_scopes(redis, timeout)
    ]


async def recorded_rollouts(redis: RedisClient, timeout: float) -> list[tuple[str, Rollout | None]]:
    """Every scope that had a rollout, in scope order, with its record (None: none readable):
    what ``rollout list`` shows."""
    return [(scope, parsed_rollout(read)) for scope, read in await _recorded_reads(redis, timeout)]


@dataclass(frozen=True)
class RolloutStanding:
    """A rollout not done yet and how many Marquees of each wave were verified healthy (wave ->
    count): what the web view draws as its progress."""

    rollout: Rollout
    healthy: dict[int, int]

    @property
    def verified(self) -> int:
        """Marquees of the current wave verified healthy."""
        return self.healthy.get(self.rollout.wave, 0)


async def rollouts_standing(redis: RedisClient, timeout: float) -> list[RolloutStanding]:
    """Every rollout not done yet (running, paused, halted, aborted) that Redis holds, in scope
    order, with its healthy counts."""
    found: list[RolloutStanding] = []
    for _, read in await _recorded_reads(redis, timeout):
        record = parsed_rollout(read)
        if record is not None and record.status != "done":
            found.append(RolloutStanding(record, read.healthy))
    return found


async def unfinished_rollouts(redis: RedisClient, timeout: float) -> list[Rollout]:
    """Every rollout not done yet that Redis holds, in scope order: what ``status`` shows."""
    return [standing.rollout for standing in await rollouts_standing(redis, timeout)]
