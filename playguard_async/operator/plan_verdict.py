"""A plan's verdict, read from its detect cycle's result: the exit status, the Playgrounds held, the
JSON for scripts.

Apart from ``plan`` (which builds an engine to run the cycle) so that ``status`` and ``describe``,
which show a recorded plan's verdict, do not import the engine, its phases and the remote layer:
a short-lived command pays for its imports at every start.
"""

from __future__ import annotations

import enum
from typing import Any

from playguard_async.engine.results import CycleResult, Outcome


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
