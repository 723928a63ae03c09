"""Where the desired state comes from: the protocol every source meets, and the optional
abilities of a remote one.

The engine reads the inventory only through ``DesiredState``, so a database or an HTTP API can
replace the YAML file (``yaml_source``) without touching the reconcilers. A source declares its
optional abilities (``DesiredState.abilities``); its readers ask ``as_remote`` and ``as_narrow``,
never ``isinstance``, so a misspelt method cannot silently lose an ability: the declaration
stands, and tests/unit/test_desired_state_abilities.py holds every source to it.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Collection
from typing import Protocol, cast

from playguard_async.cycle_record import CycleRecord
from playguard_async.desired_state.model import Inventory


class Ability(enum.Enum):
    """An optional ability of a desired-state source, and the protocol that holds its methods."""

    REMOTE = "remote"
    """Behind a network (``RemoteDesiredState``): reachability, wake-ups (``listen``), the
    observed state written back (``record_cycle``), ``close``."""
    NARROW = "narrow"
    """Reads a few Marquees alone and holds a replica's share (``NarrowDesiredState``); implies
    ``REMOTE``."""


class DesiredState(Protocol):
    """Where the inventory comes from; the engine depends on this, not on YAML."""

    @property
    def abilities(self) -> frozenset[Ability]:
        """The optional abilities this source has; an empty set for a plain one."""
        ...

    async def load(self) -> Inventory:
        """The current desired state; raises InventoryError when it cannot be used."""
        ...

    def describe(self) -> str:
        """Where the state comes from, for log lines (a file path, a URL)."""
        ...


class RemoteDesiredState(DesiredState, Protocol):
    """A source behind a network (a database): it can be out of reach while the daemon runs on
    its last good snapshot, which /readyz and the metrics show."""

    reachable: bool | None
    """None before the first read; then whether the last read reached the source."""
    last_error: str | None

    def snapshot_age(self) -> float | None:
        """Seconds since the last good snapshot, or None before the first."""
        ...

    async def listen(
        self,
        wake: Callable[[set[str]], Awaitable[object]],
        resync: Callable[[], Awaitable[object]],
    ) -> None:
        """Until cancelled: ``wake`` the Marquees whose desired state changed, and ``resync``
        when changes may have been missed."""
        ...

    def record_cycle(self, record: CycleRecord) -> None:
        """Hand a finished cycle's observed state (a cycle record) over to be written back,
        soon and off the cycle; never raises. ``close`` writes what is left."""
        ...

    def write_failures(self) -> int:
        """Observed-state records whose write failed since start."""
        ...

    def audit_checkpoint_age(self) -> float | None:
        """Seconds since the change log was last checkpointed by this replica; None when it
        takes no checkpoints."""
        ...

    async def close(self) -> None: ...


class NarrowDesiredState(RemoteDesiredState, Protocol):
    """A remote source that can read the desired state of a few Marquees alone: a wake-up then
    costs their rows, not the fleet's."""

    async def load_marquees(self, names: Collection[str]) -> Inventory | None:
        """An inventory of ``names`` alone, each as consistent as in a whole snapshot; None
        when only a whole snapshot will do (``load``)."""
        ...

    def set_share(self, owns: Callable[[str], bool] | None) -> None:
        """From the next ``load`` on, hold the full records of the Marquees ``owns`` accepts
        only, and list the others (``Inventory.listed``); None: every Marquee's. A replica's
        memory then grows with its share of the fleet, not with the fleet."""
        ...


def as_remote(source: DesiredState) -> RemoteDesiredState | None:
    """``source`` as a remote one when it declares ``Ability.REMOTE``, else None."""
    return cast("RemoteDesiredState", source) if Ability.REMOTE in source.abilities else None


def as_narrow(source: DesiredState) -> NarrowDesiredState | None:
    """``source`` as a narrow one when it declares ``Ability.NARROW``, else None."""
    return cast("NarrowDesiredState", source) if Ability.NARROW in source.abilities else None
