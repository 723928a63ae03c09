"""The words every surface uses for why a cycle acted (the docs' glossary,
docs/concepts/index.md), defined once.

A person reading ``history``, ``status``, ``why``, the web view or a notification must be able to
tell a release (the desired state moved) from drift (the host moved away from what was applied):
the first is expected, the second is someone's hand or a crash. Before these words were one
module, a new commit read as "fixed drift ... config changed" and a first deploy as "fixed drift
... missing". Phases pick a ``Cause``; surfaces print its ``word`` (a noun) or ``done`` (what a
cycle that acted on it did), never a step's internal name.
"""

from __future__ import annotations

import enum


class Cause(enum.StrEnum):
    """Why a cycle changed (or, in a dry run, would change) a Playground or did not run."""

    RELEASE = "release"
    """The desired state moved: a new commit, an image behind a tag, a settings change, or a
    first deploy."""
    DRIFT = "drift"
    """The host moved away from what was applied (a container removed, stopped or changed by
    hand), with the desired state as it was."""
    ROLLBACK = "rollback"
    """A release failed its health gate and the Playground went back to its last good revision."""
    PIN = "pin"
    """An operator holds the Playground at a revision (``playguard pin``)."""
    HOLD = "hold"
    """A rollout holds the Playground at its last good revision until its wave admits it."""
    PAUSE = "pause"
    """An operator paused the Marquee or the fleet: no cycle acts on it."""

    @property
    def word(self) -> str:
        return self.value

    @property
    def done(self) -> str:
        """What a cycle that acted on this cause did, as ``history`` and ``status`` say it."""
        return _DONE[self]

    @property
    def pending(self) -> str:
        """The same, for a dry run that changed nothing: still to be done."""
        return _PENDING[self]


_DONE = {
    Cause.RELEASE: "released",
    Cause.DRIFT: "fixed drift",
    Cause.ROLLBACK: "rolled back",
    Cause.PIN: "applied pin",
    Cause.HOLD: "applied hold",
    Cause.PAUSE: "paused",
}
_PENDING = {
    Cause.RELEASE: "release pending (dry run)",
    Cause.DRIFT: "drift, not fixed (dry run)",
    Cause.ROLLBACK: "rollback pending (dry run)",
    Cause.PIN: "pin pending (dry run)",
    Cause.HOLD: "hold pending (dry run)",
    Cause.PAUSE: "paused",
}

KEEP_COMPOSE_ANSWERS = "keep compose answers"
KEEP_A_COPY = "keep a copy of "
BOOKKEEPING_ACTIONS = (KEEP_COMPOSE_ANSWERS, KEEP_A_COPY)
"""The starts of the host-journal actions that are playguard's own bookkeeping (answers and
copies it keeps to read later, ``RemoteSession.keep_file``), not a change of the Marquee: no
user's list of actions shows them."""


def is_bookkeeping(action: str) -> bool:
    return action.startswith(BOOKKEEPING_ACTIONS)


def fence_words(redis: int | None, host: int | None, *, host_unknown: str) -> str:
    """The fence, one way everywhere: ``fence 20 (host 20)``; the counter Redis holds first, the
    host's beside it, or why the host's is not known (``host_unknown``)."""
    counter = "?" if redis is None else str(redis)
    beside = f"host unknown: {host_unknown}" if host is None else f"host {host}"
    return f"fence {counter} ({beside})"
