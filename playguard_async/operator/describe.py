"""One Marquee's story for the person on call: ``playguard describe`` and ``playguard history``.

``status`` is the fleet on one screen; this is one Marquee in depth: its lock now (holder, the
fence on Redis, the fence its host was last seen to hold, time left), its last cycle phase by
phase (time, actions, what it found, the error in words), what is still wrong against what that
cycle fixed, and its recent cycles. Everything comes from Redis, where every replica records;
nothing connects to the host (``check`` does). Records are outside input: a field of the wrong
type reads as missing, never as an error.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeGuard

from playguard_async.coordination.keys import fence_key, marquee_lock_name
from playguard_async.coordination.lock import LockState, inspect_lock
from playguard_async.coordination.pause import Pause, paused
from playguard_async.coordination.records import CycleRecords
from playguard_async.cycle_record import StoredRecord, is_seconds, listed, mapping
from playguard_async.desired_state.windows import next_opening
from playguard_async.operator.fleet import LastCycle, OperateError, holder_json, open_fleet
from playguard_async.settings import Settings

PHASE_ITEMS_SHOWN = 20
"""Actions or notices listed per phase; past it, a count of the rest."""


@dataclass(frozen=True)
class PhaseStep:
    """What one phase of a cycle did: its time, its actions, its notices as
    ``(kind, subject, detail)``."""

    phase: str
    seconds: float | None
    actions: list[str]
    notices: list[tuple[str, str, str]]
    more: int
    """Actions and notices left out past ``PHASE_ITEMS_SHOWN``."""


@dataclass(frozen=True)
class MarqueeStory:
    name: str
    lock: LockState | None
    fence_counter: int | None
    """The last fence Redis handed out for this Marquee (None: never, or not a number)."""
    last: LastCycle | None
    steps: list[PhaseStep]
    history: list[LastCycle]
    last_good: dict[str, str] = dataclasses.field(default_factory=dict)
    """Playground -> its last good state (``service=repo@sha256:...``) as the last cycle found
    it on the host."""
    mode: str = "apply"
    pause: Pause | None = None
    """The pause that holds it back now (its own, else the fleet's), if any."""
    windows: int = 0
    """How many maintenance windows apply to it (its own, else the fleet's)."""
    next_opening: datetime | None = None
    """When its windows next allow changes (now, when they do); None: none found ahead."""

    def windows_text(self, now: datetime) -> str:
        """Its maintenance windows in words: none, open now, or when they next open."""
        if not self.windows:
            return "none (changes allowed at any time)"
        if self.next_opening is None:
            return f"{self.windows}, closed; no opening found ahead"
        if self.next_opening <= now:
            return f"{self.windows}, open now (changes allowed)"
        opens = f"{self.next_opening:%Y-%m-%d %H:%M:%S} UTC"
        return f"{self.windows}, closed (cycles run as detect); next opens {opens}"

    @property
    def still_wrong(self) -> list[str]:
        """What the last cycle left wrong: failed items, gone branches, and drift a dry run saw."""
        if self.last is None:
            return []
        wrong = [f"failed {item}" for item in self.last.failed]
        wrong += [
            f"branch gone: {name} ({branch})" for name, branch in self.last.branch_gone.items()
        ]
        if self.last.dry_run:
            wrong += [f"drift {name}: {', '.join(why)}" for name, why in self.last.drift.items()]
        wrong += [f"{name}: {'; '.join(why)}" for name, why in self.last.unhealthy.items()]
        if self.last.outcome not in ("ok", "locked"):
            wrong.insert(0, f"{self.last.outcome}: {self.last.reason or 'no reason recorded'}")
        return wrong

    @property
    def fixed(self) -> list[str]:
        """What the last cycle repaired: the drift it found, unless it was a dry run."""
        if self.last is None or self.last.dry_run:
            return []
        return [f"drift {name}: {', '.join(why)}" for name, why in self.last.drift.items()]

    def to_json(self, now: float) -> dict[str, Any]:
        return {
            "name": self.name,
            "mode": self.mode,
            "paused": None if self.pause is None else self.pause.to_json(),
            "windows": self.windows,
            "next_opening": None if self.next_opening is None else self.next_opening.isoformat(),
            "lock": None if self.lock is None else holder_json(self.lock),
            "fence_counter": self.fence_counter,
            "host_fence": None if self.last is None else self.last.host_fence,
            "last": None if self.last is None else self.last.to_json(now),
            "phases": [dataclasses.asdict(step) for step in self.steps],
            "still_wrong": self.still_wrong,
            "last_good": self.last_good,
            "fixed": self.fixed,
            "history": [cycle.to_json(now) for cycle in self.history],
        }


def phase_steps(record: StoredRecord) -> list[PhaseStep]:
    """The phases of a stored record in the order they ran; what is not in the engine's shape is
    left out."""
    durations = mapping(record.get("durations"))
    actions = mapping(record.get("actions"))
    notices = mapping(record.get("notices"))
    steps = []
    for phase, seconds in durations.items():
        taken = [str(action) for action in listed(actions.get(phase))]
        found = [
            (str(notice.get("kind")), str(notice.get("subject")), str(notice.get("detail")))
            for notice in listed(notices.get(phase))
            if isinstance(notice, Mapping)
        ]
        shown_actions = taken[:PHASE_ITEMS_SHOWN]
        shown_notices = found[:PHASE_ITEMS_SHOWN]
        steps.append(
            PhaseStep(
                phase=str(phase),
                seconds=float(seconds) if is_seconds(seconds) else None,
                actions=shown_actions,
                notices=shown_notices,
                more=len(taken) - len(shown_actions) + len(found) - len(shown_notices),
            )
        )
    return steps


def last_good_states(record: StoredRecord) -> dict[str, str]:
    """Playground -> its last good state, from the ``playgrounds`` findings of a stored record;
    what is not in the written shape is left out."""
    found: dict[str, str] = {}
    for findings in mapping(record.get("findings")).values():
        for name, playground in mapping(mapping(findings).get("playgrounds")).items():
            good = mapping(playground).get("last_good")
            if isinstance(name, str) and isinstance(good, str):
                found[name] = good
    return found


def _is_counter(value: object) -> TypeGuard[bytes]:
    """A fence counter as INCR writes it (anything else was set by hand or by another tool)."""
    return isinstance(value, bytes) and 0 < len(value) <= 20 and value.isdigit()


async def marquee_story(
    settings: Settings, name: str, *, limit: int, now: datetime | None = None
) -> MarqueeStory:
    """``name``'s lock, fences, last cycle and up to ``limit`` recent cycles, newest first; its
    mode, pause and when its maintenance windows next open after ``now`` (default: now)."""
    async with open_fleet(settings) as fleet:
        inventory = await fleet.inventory()
        try:
            marquee = inventory.marquee(name)
        except KeyError:
            raise OperateError(f"no Marquee named {name!r} in {settings.inventory}") from None
        records = CycleRecords(
            fleet.redis,
            history_length=settings.history_length,
            timeout=settings.redis_socket_timeout,
        )
        lock, counter, last, history, pause = await asyncio.gather(
            inspect_lock(
                fleet.redis, marquee_lock_name(name), timeout=settings.redis_socket_timeout
            ),
            fleet.redis.get(fence_key(marquee_lock_name(name))),
            records.last(name),
            records.history(name, limit=limit),
            paused(fleet.redis, name, settings.redis_socket_timeout),
        )
    windows = marquee.windows if marquee.windows is not None else list(settings.windows)
    return MarqueeStory(
        name=name,
        lock=lock,
        fence_counter=int(counter) if _is_counter(counter) else None,
        last=None if last is None else LastCycle.from_record(last),
        steps=[] if last is None else phase_steps(last),
        last_good={} if last is None else last_good_states(last),
        history=[LastCycle.from_record(record) for record in history],
        mode=marquee.mode,
        pause=pause,
        windows=len(windows),
        next_opening=next_opening(windows, now or datetime.now(UTC)) if windows else None,
    )
