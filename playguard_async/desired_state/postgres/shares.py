"""A replica's share of the fleet read from PostgreSQL: the listing of every Marquee (launchable,
mode, canary) with the rollout cohorts of those outside the share, split from the names of the
share's own, whose rows are read whole."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import get_args

import asyncpg
import structlog

from playguard_async.desired_state.model import (
    MarqueeListing,
    Mode,
)
from playguard_async.desired_state.postgres.connection import (
    qualified,
)
from playguard_async.desired_state.postgres.relations import (
    STEERING,
    ReadFailed,
    measured,
    view_error,
)

log = structlog.get_logger("playguard.desired_state")


_MODES = frozenset(get_args(Mode))


def _listing(schema: str, present: Mapping[str, set[str]]) -> str:
    """Every Marquee's name, launchable, mode and canary (its steering row's, else the
    defaults)."""
    marquees, steering = qualified(schema, "marquees"), qualified(schema, STEERING.name)
    canary = "s.canary" if "canary" in present.get(STEERING.name, set()) else "NULL::boolean"
    return (
        f"SELECT m.name, m.launchable, coalesce(s.mode, 'apply') AS mode, "
        f"coalesce({canary}, false) AS canary FROM {marquees} m "
        f"LEFT JOIN {steering} s ON s.name = m.name"
    )


def _cohorts(schema: str) -> str:
    """Each Marquee with running Playgrounds, and their (playspec, branch) pairs as two arrays
    of one order (two aggregates of one group take its rows in the same order): what
    ``Inventory.cohort`` needs of a Marquee held elsewhere. Repeated pairs are left to
    ``_cohorts_by_marquee``: a DISTINCT here, or an order within each array, tripled the
    query's cost (bench/README.md, "Cohorts in a share's listing")."""
    playgrounds = qualified(schema, "playgrounds")
    return (
        "SELECT marquee, array_agg(playspec) AS playspecs, array_agg(branch) AS branches "
        f"FROM {playgrounds} WHERE state = 'running' GROUP BY marquee"
    )


async def read_listing(
    connection: asyncpg.Connection,
    schema: str,
    present: Mapping[str, set[str]],
    share: Callable[[str], bool],
    measure: Callable[[str], Awaitable[None]],
    *,
    cohorts: bool,
) -> tuple[list[str], tuple[MarqueeListing, ...]]:
    """The names of the share's Marquees and the others listed (``_split``), with their cohorts
    unless ``cohorts`` is False, each query measured before it is read. A view that raises,
    measured or read, is a failed read of the relation it reads, as a whole read's would be:
    ``marquees`` read again without a share, its keys alone; ``playgrounds`` read again by its
    keys, the others listed without cohorts."""

    async def fetched(query: str, relation: str) -> list[asyncpg.Record]:
        try:
            await measure(measured(query))
            rows: list[asyncpg.Record] = await connection.fetch(query)
        except Exception as exc:
            if not view_error(exc):
                raise
            raise ReadFailed.of(schema, relation, exc) from None
        return rows

    listing = await fetched(_listing(schema, present), "marquees")
    running = await fetched(_cohorts(schema), "playgrounds") if cohorts else []
    return _split(listing, _cohorts_by_marquee(running), share)


Scopes = tuple[tuple[str, str], ...]


def _cohorts_by_marquee(rows: Sequence[asyncpg.Record]) -> dict[str, Scopes]:
    """Marquee -> the (playspec, branch) of its running Playgrounds, from ``_cohorts``'s rows,
    each pair once, in order. A row with anything but text in them (a view's garbage) gives its
    Marquee none: the replica whose share it is leaves that Marquee out of its snapshot, so out
    of every cohort too. Rows alike (most Marquees run the same Playspecs on the same branches)
    are worked out once and share one tuple: this runs on the event loop, for every Marquee of
    the fleet, at every tick."""
    found: dict[str, Scopes] = {}
    known: dict[tuple[tuple[object, ...], tuple[object, ...]], Scopes | None] = {}
    interned: dict[Scopes, Scopes] = {}
    for marquee, playspecs, branches in rows:
        if not (isinstance(marquee, str) and isinstance(playspecs, list)
                and isinstance(branches, list)):  # fmt: skip
            continue
        key = (tuple(playspecs), tuple(branches))
        if key not in known:
            scopes = _scopes(*key)
            known[key] = None if scopes is None else interned.setdefault(scopes, scopes)
        scopes = known[key]
        if scopes is not None:
            found[marquee] = scopes
    return found


def _scopes(playspecs: tuple[object, ...], branches: tuple[object, ...]) -> Scopes | None:
    """The pairs of one ``_cohorts`` row, or None when they are not all text."""
    if len(playspecs) != len(branches):
        return None
    pairs: set[tuple[str, str]] = set()
    for playspec, branch in zip(playspecs, branches, strict=True):
        if not (isinstance(playspec, str) and isinstance(branch, str)):
            return None
        pairs.add((playspec, branch))
    return tuple(sorted(pairs))


def _split(
    listing: Sequence[asyncpg.Record],
    cohorts: Mapping[str, Scopes],
    share: Callable[[str], bool],
) -> tuple[list[str], tuple[MarqueeListing, ...]]:
    """The names ``share`` accepts, and the others listed with their cohorts (those of a Marquee
    whose cycles may change its Playgrounds: launchable, ``apply`` mode, as
    ``Inventory.listed`` has them). A listing row that is not a name, a boolean, a mode and a
    boolean (a view's garbage) is in neither: a replica whose share it is reports it when it
    reads the row whole."""
    names, elsewhere = [], []
    for name, launchable, mode, canary in listing:
        if (
            not isinstance(name, str)
            or not isinstance(launchable, bool)
            or mode not in _MODES
            or not isinstance(canary, bool)
        ):
            continue
        if share(name):
            names.append(name)
        else:
            scopes = cohorts.get(name, ()) if launchable and mode == "apply" else ()
            elsewhere.append(MarqueeListing(name, launchable, mode, canary, scopes))
    return names, tuple(elsewhere)
