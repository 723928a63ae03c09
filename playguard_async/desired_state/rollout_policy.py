"""How a release of a Playspec reaches the fleet: in waves, each baked before the next.

A Playspec's ``rollout`` (or the fleet's default, setting ``rollout``) says how many Marquees each
wave takes, cumulatively (``[1, "10%", "50%", "100%"]``: one Marquee, then up to a tenth of the
cohort, then half, then all), how long a wave must stay healthy before the next starts
(``bake``), how many Marquees may fail before the rollout halts fleet-wide (``max_failures``) and
how long a wave waits for a Marquee that does not report (``wave_timeout``). No policy, or one
wave that takes everyone: every Marquee at once, as before rollouts existed.

The order in which Marquees are admitted is the same on every replica and after every restart:
Marquees marked ``canary`` first, then by a hash of the rollout's scope and the Marquee's name
(``admission_key``); a wave is the Marquees whose key is at most its cutoff (``Wave``), so a
Marquee finds its wave without the list of the others.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, PlainValidator

WAVES_MAX = 20
"""Waves a policy may have."""

BAKE_MAX = 86_400.0
"""Seconds a wave's bake or timeout may be at most (one day)."""

WAVE_MAX = 1_000_000
"""Marquees a wave given as a number may take at most."""

SIZES_KEPT = 4096
"""(waves, cohort size) pairs whose wave sizes are remembered, least recently used first out."""

_PERCENT = re.compile(r"(100|[1-9][0-9]?)%")
"""A share of the cohort, ``1%`` to ``100%``, rounded up to whole Marquees."""


def _wave_size(value: object) -> int | str:
    """One wave's size, with one reason when it is neither form (a union of the two would give
    a line per form, each misleading about the other: ``0`` is "not a valid string"). ``true``
    is an int to Python; as a wave size it is a typo."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= WAVE_MAX:
        return value
    if isinstance(value, str) and _PERCENT.fullmatch(value):
        return value
    raise ValueError(
        f"a wave is a number of Marquees (1 to {WAVE_MAX}) or a percentage of the cohort "
        "('1%' to '100%', no space)"
    )


WaveSize = Annotated[int | str, PlainValidator(_wave_size)]


class RolloutPolicy(BaseModel):
    """A Playspec's (or the fleet's) rollout: ``waves`` cumulative sizes, ``bake`` seconds a
    wave stays healthy before the next starts, ``max_failures`` Marquees that may fail before
    it halts, ``wave_timeout`` seconds a Marquee of a wave may stay unreported before it counts
    as failed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    waves: Annotated[list[WaveSize], Field(min_length=1, max_length=WAVES_MAX)]
    bake: Annotated[float, Field(ge=0, le=BAKE_MAX, allow_inf_nan=False)] = 300.0
    max_failures: Annotated[int, Field(ge=0, le=WAVE_MAX)] = 0
    wave_timeout: Annotated[float, Field(gt=0, le=BAKE_MAX, allow_inf_nan=False)] = 900.0

    def sizes(self, cohort: int) -> tuple[int, ...]:
        """How many Marquees of a cohort of ``cohort`` are admitted once each wave has started:
        increasing, the last always the whole cohort (a policy whose waves stop short of it
        ends with one more), a wave that would add no one left out.

        Remembered per waves and cohort size (``_sizes``): every cycle asks it of each of its
        Marquee's Playgrounds (``staged``), and a policy is frozen."""
        return _sizes(tuple(self.waves), cohort)

    def staged(self, cohort: int) -> bool:
        """Whether a release to ``cohort`` Marquees goes in more than one wave (else at once)."""
        return len(self.sizes(cohort)) > 1

    def encode(self) -> str:
        return json.dumps(self.model_dump(), separators=(",", ":"))


@functools.lru_cache(maxsize=SIZES_KEPT)
def _sizes(waves: tuple[int | str, ...], cohort: int) -> tuple[int, ...]:
    sizes: list[int] = []
    for wave in waves:
        count = math.ceil(cohort * int(wave[:-1]) / 100) if isinstance(wave, str) else wave
        count = min(max(count, 1), cohort)
        if not sizes or count > sizes[-1]:
            sizes.append(count)
    if cohort and (not sizes or sizes[-1] < cohort):
        sizes.append(cohort)
    return tuple(sizes)


def admission_key(scope: str, marquee: str, *, canary: bool) -> str:
    """Where ``marquee`` stands in the admission order of ``scope``'s rollouts: canaries first,
    then by SHA-256 of scope and name (the same on every replica, stable across restarts, and
    not the name order, so the same few Marquees are not first for every Playspec)."""
    digest = hashlib.sha256(f"{scope}\0{marquee}".encode()).hexdigest()[:16]
    return ("0" if canary else "1") + digest


@dataclass(frozen=True)
class Wave:
    """One wave of a rollout: the Marquees whose admission key is at most ``cutoff``, and above
    the previous wave's, ``size`` of them when the rollout opened."""

    cutoff: str
    size: int


def waves_of(policy: RolloutPolicy, keys: Sequence[str]) -> tuple[Wave, ...]:
    """The waves of a rollout to the Marquees whose admission keys are ``keys``. The last wave's
    cutoff is above every key, so a Marquee that joins the cohort later is in it."""
    ordered = sorted(keys)
    sizes = policy.sizes(len(ordered))
    waves: list[Wave] = []
    before = 0
    for index, size in enumerate(sizes):
        last = index == len(sizes) - 1
        waves.append(Wave("~" if last else ordered[size - 1], size - before))
        before = size
    return tuple(waves)


def wave_of(waves: Sequence[Wave], key: str) -> int:
    """The index of the wave a Marquee with admission key ``key`` belongs to."""
    for index, wave in enumerate(waves):
        if key <= wave.cutoff:
            return index
    return len(waves) - 1


MEMBERS_KEPT = 256
"""Scopes whose wave members ``wave_members`` keeps (all are dropped past it)."""

_Members = tuple[Sequence[tuple[str, bool]], tuple[Wave, ...], tuple[tuple[str, ...], ...]]
_MEMBERS: dict[str, _Members] = {}


def wave_members(
    scope: str, waves: tuple[Wave, ...], cohort: Sequence[tuple[str, bool]]
) -> tuple[tuple[str, ...], ...]:
    """The names of ``cohort`` (name, canary) in each of ``waves``, by admission key: a
    Marquee that left the cohort is in no wave, one that joined is in the wave its key falls
    in. Kept per scope while the cohort is the same object (the inventory's own tuple, until
    the desired state is read again): every cycle of a staged Playground asks, and a key is a
    SHA-256 per Marquee."""
    kept = _MEMBERS.get(scope)
    if kept is not None and kept[0] is cohort and kept[1] == waves:
        return kept[2]
    members: list[list[str]] = [[] for _ in waves]
    for name, canary in cohort:
        members[wave_of(waves, admission_key(scope, name, canary=canary))].append(name)
    found = tuple(tuple(names) for names in members)
    if len(_MEMBERS) >= MEMBERS_KEPT:
        _MEMBERS.clear()
    _MEMBERS[scope] = (cohort, waves, found)
    return found
