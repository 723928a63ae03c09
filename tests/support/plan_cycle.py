"""``plan`` and ``cycle`` of the lab's Marquee as a user runs them, reduced to what the tests of
"the plan is the cycle" compare: each phase's actions in phase order, a dry run's ``would`` left
off."""

from __future__ import annotations

import json
import re
import subprocess

from tests.support.cli import Playguard

EXIT_CHANGES = 2
"""``plan``'s exit status when the next cycle would change something."""


def actions_of(changes: dict[str, list[str]]) -> list[str]:
    """Each phase's actions in phase order, a dry run's ``would`` left off."""
    return [re.sub(r"^would ", "", action) for taken in changes.values() for action in taken]


def plan(
    playguard: Playguard, marquee: str = "edge-1"
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    done = playguard("plan", marquee, "--json", timeout=180.0)
    return done, actions_of(json.loads(done.stdout).get("changes", {}))


def cycle(
    playguard: Playguard, marquee: str = "edge-1"
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    done = playguard("cycle", marquee, "--json", timeout=180.0)
    return done, actions_of(json.loads(done.stdout)["cycle"]["actions"])


def converged(playguard: Playguard, marquee: str = "edge-1") -> None:
    done, _ = cycle(playguard, marquee)
    assert done.returncode == 0, done.stdout + done.stderr
