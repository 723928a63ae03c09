"""The small protocol between the engine and the phases: all either side knows of the other.

A phase is a name and an async call taking a ``PhaseContext``. It reads the world, compares it
with the desired state, acts, and is safe to run again; it returns a ``PhaseReport`` of what it
did. The engine decides when a phase runs, under which lease and until which deadline; a phase
decides what to do. Phases are named in settings and resolved through ``resolve_phases``: built-in
names first, then ``package.module:attribute`` import paths, so a deployment can add a phase
without forking the daemon.
"""

from __future__ import annotations

import importlib
import re
import reprlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, runtime_checkable

from structlog.typing import FilteringBoundLogger
from typing_extensions import TypeVar

from playguard_async.coordination.lock import Lease
from playguard_async.cycle_record import NoticeKind, NoticeRecord
from playguard_async.desired_state.model import Inventory, Marquee
from playguard_async.desired_state.rollout_policy import RolloutPolicy
from playguard_async.desired_state.windows import Window


class RemoteView(Protocol):
    """What the engine itself reads of a cycle's remote session, whatever the remote layer is:
    the actions it recorded (each phase's share goes into that phase's report) and the highest
    fence the host was seen to hold. ``remote.ssh.RemoteSession`` is one."""

    @property
    def actions(self) -> Sequence[str]:
        """Every change made (or, in dry-run, planned) through the session, in order."""
        ...

    @property
    def host_fence(self) -> int | None: ...


# The session type a context gives and a phase takes. Unwritten, a context gives a bare
# ``RemoteView`` and a phase takes any session (what the engine holds: it imports no remote layer).
SessionT_co = TypeVar("SessionT_co", bound=RemoteView, covariant=True, default=RemoteView)
SessionT_contra = TypeVar("SessionT_contra", bound=RemoteView, contravariant=True, default=Any)


@dataclass(frozen=True)
class PhaseContext(Generic[SessionT_co]):
    """What one phase of one cycle may use.

    ``await remote()`` gives the cycle's remote session, opened on the first call after the lock
    was taken and closed when the cycle ends; ``lease`` carries the fence a host can check before
    accepting a write. The session's type is a parameter: a built-in phase takes a
    ``PhaseContext[RemoteSession]`` and is type-checked against the real session, while the
    engine, which imports no remote layer, sees only the ``RemoteView`` every session offers.
    """

    marquee: Marquee
    inventory: Inventory
    log: FilteringBoundLogger
    dry_run: bool
    lease: Lease
    remote: Callable[[], Awaitable[SessionT_co]]
    rollout_default: RolloutPolicy | None = None
    """The fleet's rollout policy, for a Playspec that has none of its own."""
    windows_default: Sequence[Window] = ()
    """The fleet's maintenance windows, for a Marquee that has none of its own (a rollout does
    not count a Marquee outside its windows as failed)."""
    versions_mixed: str | None = None
    """Why replicas of different versions share the fleet (a rollout starts no new wave
    while they do), else None."""
    tells: bool = True
    """Whether the cycle's notices are told (the daemon's cycles, ``detect`` ones included:
    its change notifier sends them), not only shown (``plan``, a one-off ``cycle``, an action
    of the web view). News told once (``coordination.told``) is recorded as told only by a
    cycle that tells it."""


@dataclass(frozen=True)
class Notice:
    """One finding an operator should look at, in the shape every phase shares.

    ``findings`` are each phase's own; notices are what ``playguard status`` shows, so it needs
    to know neither which phases ran nor how their findings look. ``subject`` names the
    playground, registry, image or chat the notice is about.
    """

    kind: NoticeKind
    subject: str
    detail: str

    def to_json(self) -> NoticeRecord:
        return {"kind": self.kind.value, "subject": self.subject, "detail": self.detail}


@dataclass
class PhaseReport:
    """What a phase found, what of that needs an operator, and any action it took that its
    session did not record.

    The engine reports a phase's actions itself: those the session recorded while the phase ran
    (changes made through it, or planned in dry-run), then ``actions``, for a phase that acts by
    other means. So a phase body returns its findings and need not track its session.
    """

    actions: list[str] = field(default_factory=list)
    findings: dict[str, Any] = field(default_factory=dict)
    notices: list[Notice] = field(default_factory=list)
    unhealthy: str | None = None
    """Set (to why, in one line) when the phase did all its work but left something running
    that is not healthy: the cycle goes on with the next phases and ends ``unhealthy``."""


class PartialFailure(Exception):
    """Some items of a phase failed; every other item was still handled.

    Raised at the end of the phase so that the cycle's outcome is ``phase_failed`` and the later
    phases, which would meet the same broken registry or image, do not run on a half-ready host.
    ``report`` keeps what the phase did and saw, failures included; the engine records it like
    the report of a phase that succeeded.
    """

    def __init__(
        self, phase: str, kind: str, failed: Mapping[str, str], report: PhaseReport
    ) -> None:
        listed = "; ".join(f"{kind} {name!r} failed: {reason}" for name, reason in failed.items())
        super().__init__(f"{phase}: {listed}")
        self.failed = dict(failed)
        self.report = report


@runtime_checkable
class Phase(Protocol[SessionT_contra]):
    """A phase: a name, and an async call on the context of one cycle."""

    name: str

    async def __call__(self, ctx: PhaseContext[SessionT_contra]) -> PhaseReport | None: ...


class UnknownPhase(ValueError):
    """A phase named in settings that is neither built in nor importable."""


BUILTIN_PHASES: tuple[str, ...] = (
    "sync_git",
    "fetch_branches",
    "refresh_credentials",
    "pull_images",
    "reconcile_playgrounds",
    "process_agent_chats",
    "sweep_orphans",
)
"""The built-in phases, in the order a cycle runs them by default (the default of the ``phases``
setting): the one list a new built-in phase is added to. Phase ``NAME`` is the object ``NAME`` of
module ``playguard_async.phases.NAME``, imported when it is resolved, like a deployment's own, so
settings and the engine know the names without importing a phase or the remote layer."""

_NAME_REPR = reprlib.Repr()
_NAME_REPR.maxstring = 80


def resolve_phases(names: Sequence[str]) -> list[Phase[Any]]:
    """Turn the settings' phase names into phase objects, in order."""
    return [_resolve(name) for name in names]


_IMPORT_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


def _resolve(name: str) -> Phase[Any]:
    if name in BUILTIN_PHASES:
        return _imported(f"{__package__}.{name}:{name}", shown=name)
    shown = _NAME_REPR.repr(name)
    if not _IMPORT_PATH.fullmatch(name):
        raise UnknownPhase(
            f"phases: {shown} is not a built-in phase (built in: {', '.join(BUILTIN_PHASES)}) "
            "nor a 'package.module:attribute' import path"
        )
    return _imported(name, shown=shown)


def _imported(path: str, *, shown: str) -> Phase[Any]:
    module_name, _, attribute = path.partition(":")
    try:
        candidate = getattr(importlib.import_module(module_name), attribute)
    except Exception as exc:  # a module runs its own code on import: anything can come out
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise UnknownPhase(f"phases: cannot import {shown}: {reason[:300]}") from exc
    if not isinstance(candidate, Phase):
        raise UnknownPhase(f"phases: {shown} has no 'name' and async call: not a phase")
    return candidate
