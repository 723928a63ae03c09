"""What a cycle ends in: one classified outcome with what each phase did, found and asks an
operator to look at, and who is told of it (cycle and phase listeners)."""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from playguard_async.cycle_record import CycleRecord, DesiredVersion, NoticeRecord


class Outcome(enum.Enum):
    OK = "ok"
    LOCKED = "locked"
    LOCK_LOST = "lock_lost"
    PHASE_FAILED = "phase_failed"
    UNHEALTHY = "unhealthy"
    """Every phase ran, but one left something not healthy (``PhaseReport.unhealthy``)."""
    DEADLINE = "deadline"
    INTERRUPTED = "interrupted"
    REDIS_UNAVAILABLE = "redis_unavailable"
    UNREACHABLE = "unreachable"
    """The Marquee could not be reached or used over SSH; ``reason`` says why, in words."""
    ERROR = "error"
    """Something outside any phase failed unexpectedly; logged with its traceback."""
    PAUSED = "paused"
    """An operator's pause held the Marquee back: at the cycle's start (no lock was taken) or at
    a phase boundary (``phase`` is the last one that ran); ``reason`` says who and why."""


FINISHED_LEVELS: dict[Outcome, int] = {
    Outcome.OK: logging.INFO,
    Outcome.LOCKED: logging.DEBUG,  # the loser's `marquee.locked` line already said so
    Outcome.PAUSED: logging.INFO,
    Outcome.INTERRUPTED: logging.WARNING,
    Outcome.PHASE_FAILED: logging.WARNING,
    Outcome.UNHEALTHY: logging.WARNING,
    Outcome.UNREACHABLE: logging.WARNING,
    Outcome.REDIS_UNAVAILABLE: logging.DEBUG,  # told once per outage: `outage.RedisOutage`
    Outcome.DEADLINE: logging.ERROR,
    Outcome.LOCK_LOST: logging.ERROR,
    Outcome.ERROR: logging.ERROR,
}
"""The level of each outcome's ``cycle.finished`` line: a failed cycle stands out in the log."""


@dataclass
class CycleResult:
    """One cycle's classified ending, as logged in ``cycle.finished`` and handed to listeners."""

    marquee: str
    cycle_id: str
    outcome: Outcome = Outcome.OK
    fence: int | None = None
    host_fence: int | None = None
    """The highest fence the host was seen to hold in this cycle (after a write or a refusal)."""
    phase: str | None = None
    reason: str | None = None
    durations: dict[str, float] = field(default_factory=dict)
    actions: dict[str, list[str]] = field(default_factory=dict)
    """Phase -> what it did, for the phases that did something."""
    findings: dict[str, dict[str, Any]] = field(default_factory=dict)
    notices: dict[str, list[NoticeRecord]] = field(default_factory=dict)
    """Phase -> its ``Notice``s, as JSON objects: what an operator should look at."""
    replica: str = ""
    dry_run: bool = False
    started: float = field(default_factory=time.monotonic)
    """When the cycle began: its task's start, then (once it has a slot) its acquisition's."""
    waited: float = 0.0
    """Seconds between the task's start and the acquisition: its start offset and the wait for a
    slot, kept apart so that ``duration`` is the cycle's own work."""
    finished_at: float = 0.0
    duration: float = 0.0
    trace_id: str | None = None
    """The cycle's trace (32 hex digits) when traces are exported (``otlp_endpoint``)."""
    desired: DesiredVersion | None = None
    """The version of the desired state the cycle acted on, as its source read it."""

    @property
    def left_alone(self) -> bool:
        """Whether the cycle ran no phase because someone else had a say: another holder
        (``locked``), a pause found at its start (``paused`` before any phase), or a stop request
        before it took a lease (``interrupted_before_start``). Such a cycle did nothing, and is
        not recorded: a record would hide the Marquee's last real outcome."""
        return (
            self.outcome is Outcome.LOCKED
            or (self.outcome is Outcome.PAUSED and self.phase is None)
            or self.interrupted_before_start
        )

    @property
    def interrupted_before_start(self) -> bool:
        """A stop came while the cycle waited out its start offset or for a slot: a daemon
        stopped with a backlog has thousands, told in one ``engine.stopped`` count."""
        return self.outcome is Outcome.INTERRUPTED and self.fence is None

    @property
    def log_level(self) -> int:
        """The level of the cycle's ``cycle.finished`` line (``FINISHED_LEVELS``)."""
        if self.interrupted_before_start:
            return logging.DEBUG
        return FINISHED_LEVELS[self.outcome]

    def to_record(self) -> CycleRecord:
        """The record kept for operators (``playguard_async.cycle_record``)."""
        return {
            "marquee": self.marquee,
            "cycle": self.cycle_id,
            "outcome": self.outcome.value,
            "fence": self.fence,
            "host_fence": self.host_fence,
            "phase": self.phase,
            "reason": self.reason,
            "durations": self.durations,
            "actions": self.actions,
            "findings": self.findings,
            "notices": self.notices,
            "replica": self.replica,
            "dry_run": self.dry_run,
            "finished_at": self.finished_at,
            "waited": self.waited,
            "duration": self.duration,
            "trace": self.trace_id,
            "desired": self.desired,
        }


CycleListener = Callable[[CycleResult], Awaitable[None]]
"""Told of every finished cycle (status records, metrics); its failure never stops the engine."""


PhaseListener = Callable[[CycleResult, str], None]
"""Told at once as each phase of a cycle ends, with the cycle so far and the phase's name: its
duration, actions and findings are in the result, and so is the outcome if the phase ended the
cycle. For live progress (``playguard cycle``); called synchronously, so it must not block, and
its failure never stops the cycle."""


class CycleCancelled(Exception):
    """A second stop request cancelled a cycle run by ``Engine.run_one`` in the middle of a phase;
    its lease was released all the same and the Marquee is recorded for resume."""

    def __init__(self, marquee: str) -> None:
        super().__init__(
            f"cycle of {marquee} cancelled in the middle of a phase by a second signal; "
            "its lease was released and it is recorded as interrupted"
        )
        self.marquee = marquee


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one line, for log fields and outcome reasons."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
