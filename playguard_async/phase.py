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
from typing import Any, Protocol, runtime_checkable

from structlog.typing import FilteringBoundLogger

from playguard_async.inventory import Inventory, Marquee
from playguard_async.lock import Lease


@dataclass(frozen=True)
class PhaseContext:
    """What one phase of one cycle may use.

    ``await remote()`` gives the cycle's remote session, opened on the first call after the lock
    was taken and closed when the cycle ends; ``lease`` carries the fence a host can check before
    accepting a write.
    """

    marquee: Marquee
    inventory: Inventory
    log: FilteringBoundLogger
    dry_run: bool
    lease: Lease
    remote: Callable[[], Awaitable[Any]]


@dataclass
class PhaseReport:
    """What a phase did (or, in dry-run, would have done) and what it saw."""

    actions: list[str] = field(default_factory=list)
    findings: dict[str, Any] = field(default_factory=dict)


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
class Phase(Protocol):
    name: str

    async def __call__(self, ctx: PhaseContext) -> PhaseReport | None: ...


class UnknownPhase(ValueError):
    """A phase named in settings that is neither built in nor importable."""


_NAME_REPR = reprlib.Repr()
_NAME_REPR.maxstring = 80


def resolve_phases(names: Sequence[str], builtin: Mapping[str, Phase]) -> list[Phase]:
    """Turn the settings' phase names into phase objects, in order."""
    return [_resolve(name, builtin) for name in names]


_IMPORT_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


def _resolve(name: str, builtin: Mapping[str, Phase]) -> Phase:
    if name in builtin:
        return builtin[name]
    shown = _NAME_REPR.repr(name)
    if not _IMPORT_PATH.fullmatch(name):
        known = ", ".join(sorted(builtin)) or "none"
        raise UnknownPhase(
            f"phases: {shown} is not a built-in phase (built in: {known}) "
            "nor a 'package.module:attribute' import path"
        )
    module_name, _, attribute = name.partition(":")
    try:
        candidate = getattr(importlib.import_module(module_name), attribute)
    except Exception as exc:  # a module runs its own code on import: anything can come out
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise UnknownPhase(f"phases: cannot import {shown}: {reason[:300]}") from exc
    if not isinstance(candidate, Phase):
        raise UnknownPhase(f"phases: {name!r} has no 'name' and async call: not a phase")
    return candidate
