"""What converging one running Playground came to (``Converged``), and the words of its finding
that the convergence (``phases.running_playground``) and the rollback (``phases.rollback``)
share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

from playguard_async.cycle_record import PlaygroundFinding, RevisionRecord
from playguard_async.desired_state.model import InventoryError, Registry
from playguard_async.phases.causes import ChangeCause
from playguard_async.phases.protocol import Notice
from playguard_async.remote.last_good import HealthRecord


def registry_secrets(registry: Registry | None) -> list[str]:
    """What must not appear in a health log line shown: the password of the Playspec's
    registry (a service may well print the credentials it was started with). Read only when a
    health gate runs: a converged cycle reads no password file."""
    if registry is None:
        return []
    try:
        return [registry.password().get_secret_value()]
    except InventoryError:
        return []  # refresh_credentials names the unreadable password


@dataclass
class Converged:
    """What converging one running Playground came to: its finding (its actions are the
    caller's to add), its notices, and in a few words why it is unhealthy, for the cycle's
    outcome (None when it is not known to be; the notices carry the details)."""

    finding: PlaygroundFinding
    notices: list[Notice] = field(default_factory=list)
    unhealthy: str | None = None
    at_release: bool | None = None
    """Whether it runs its desired release verified healthy (True), failed it (False), or
    neither is known (None: held, pending, dry run); what a rollout is told."""
    rollback_checked: bool = False
    """Whether a rollback was due this cycle and its revision was checked (``blocked`` says
    how that came out)."""
    blocked: str | None = None
    """The fingerprint of the parts a due rollback could not have (``rollback_check``), which
    the caller tells once; None when none was missing."""
    cause: ChangeCause | None = None
    """Why it was (or in a dry run would be) changed, in the glossary's words; None when it
    was not."""


def health_word(healthy: bool, time_up: bool) -> str:
    return "healthy" if healthy else "unhealthy" if time_up else "pending"


class LastGoodFields(TypedDict):
    last_good: str | None
    last_good_revision: RevisionRecord | None


def last_good_fields(record: HealthRecord) -> LastGoodFields:
    """The Playground's last good state as its finding holds it, in every cycle (``describe``
    shows the last cycle's): its images in a few words, and its revision in full."""
    good = record.last_good
    return {
        "last_good": None if good is None else good.shown(),
        "last_good_revision": None if good is None else good.revision.to_json(),
    }
