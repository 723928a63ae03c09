"""The fleet page's table as data: what a query string asks for, the rows it selects, one page.

Kept apart from HTML and HTTP so the query's checks, the sort and the paging are tested (and
measured, bench/web_view.py) without a server. A query string is outside input: an unknown
parameter, sort key, outcome or a page out of range is ``BadQuery`` (a 400), never a traceback.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from playguard_async.coordination.marquee_reads import LastCycle, MarqueeStatus, fence_shown
from playguard_async.web.pictures import BAD, look_of

PAGE_SIZE = 100
"""Rows per page: a page stays under 100 KB with each row's pictures and buttons
(bench/README.md, "Web view pages")."""

NAME_FILTER_LIMIT = 200
"""Characters of a name filter: Marquee names are shorter."""

NEVER = "never"
"""The outcome of a Marquee with no recorded cycle, as a filter and a count."""


class BadQuery(ValueError):
    """A query string the page cannot honour; the message says which parameter and why."""


@dataclass(frozen=True)
class Row:
    """One Marquee's line: its lock, its fences, its last cycle."""

    name: str
    launchable: bool
    mode: str
    """``apply``, ``detect`` or ``off``, as the desired state steers it."""
    paused: str | None
    """Who paused it (or the fleet), why, until when; None: not paused."""
    unreadable: str | None
    """Its keys that hold another Redis type than playguard writes there; None: none."""
    holder: str | None
    """Replica@host holding the lock now, ``unknown record`` for a value not ours; None: free."""
    ttl_left: float | None
    fence: str
    """The holder's fence while the lock is held, else the last cycle's, beside the host's
    (``marquee_reads.fence_shown``)."""
    outcome: str
    reason: str | None
    dry_run: bool
    duration: float | None
    actions: int
    findings: int
    age: float | None
    held: int = 0
    """Its Playgrounds its last cycle found held (pinned, or held back by a rollout)."""

    @classmethod
    def of(cls, status: MarqueeStatus, now: float) -> Row:
        lock, last = status.lock, status.last
        holder = None
        if lock is not None:
            holder = (
                f"{lock.holder.replica}@{lock.holder.host}" if lock.holder else "unknown record"
            )
        return cls(
            name=status.name,
            launchable=status.launchable,
            mode=status.mode,
            paused=None if status.pause is None else status.pause.describe(),
            unreadable="; ".join(status.unreadable) or None,
            holder=holder,
            ttl_left=None if lock is None else lock.ttl_left,
            fence=fence_shown(
                lock.fence if lock is not None else (last.fence if last else None), last
            ),
            outcome=NEVER if last is None else last.outcome,
            reason=None if last is None else last.reason,
            dry_run=last is not None and last.dry_run,
            duration=None if last is None else last.duration,
            actions=0 if last is None else last.actions,
            findings=0 if last is None else findings_of(last),
            age=None
            if last is None or last.finished_at is None
            else max(0.0, now - last.finished_at),
            held=sum(told.hold is not None for told in status.revisions.values()),
        )


def findings_of(last: LastCycle) -> int:
    """What a cycle asks an operator to look at: drift, gone branches, failures, ill health."""
    return len(last.drift) + len(last.branch_gone) + len(last.failed) + len(last.unhealthy)


def _missing_last(value: float | None) -> tuple[bool, float]:
    return (value is None, value or 0.0)


SORTS: Mapping[str, Callable[[Row], Any]] = {
    "name": lambda row: row.name,
    "outcome": lambda row: (row.outcome, row.name),
    "mode": lambda row: (row.mode, row.name),
    "paused": lambda row: (row.paused is None, row.name),
    "age": lambda row: _missing_last(row.age),
    "duration": lambda row: _missing_last(row.duration),
    "actions": lambda row: row.actions,
    "findings": lambda row: row.findings,
    "ttl": lambda row: _missing_last(row.ttl_left),
}
"""Sort key -> what it orders by; a row without the value sorts last (ascending)."""


@dataclass(frozen=True)
class FleetQuery:
    """What the fleet page was asked for."""

    sort: str = "name"
    descending: bool = False
    outcome: str | None = None
    name: str = ""
    page: int = 1

    @classmethod
    def parse(cls, params: Mapping[str, str], outcomes: Sequence[str]) -> FleetQuery:
        """The query of ``params`` (a parsed query string); ``outcomes`` are the ones a filter
        may name besides ``never`` and ``unknown``."""
        unknown = sorted(set(params) - {"sort", "order", "outcome", "name", "page"})
        if unknown:
            raise BadQuery(f"unknown parameter {unknown[0]!r}")
        sort = params.get("sort") or "name"
        if sort not in SORTS:
            raise BadQuery(f"sort must be one of {', '.join(SORTS)}")
        order = params.get("order") or "asc"
        if order not in ("asc", "desc"):
            raise BadQuery("order must be asc or desc")
        outcome = params.get("outcome") or None
        if outcome is not None and outcome not in (*outcomes, NEVER, "unknown"):
            raise BadQuery("outcome is not one a cycle can have")
        name = params.get("name", "")
        if len(name) > NAME_FILTER_LIMIT or not name.isprintable():
            raise BadQuery(f"name must be printable and at most {NAME_FILTER_LIMIT} characters")
        page_text = params.get("page") or "1"
        if not (page_text.isascii() and page_text.isdigit()) or not 1 <= int(page_text) <= 10**6:
            raise BadQuery("page must be a whole number from 1")
        return cls(sort, order == "desc", outcome, name, int(page_text))

    def link(self, **changes: Any) -> dict[str, str]:
        """The query string of this query with ``changes``, defaults left out."""
        values = {
            "sort": self.sort,
            "order": "desc" if self.descending else "asc",
            "outcome": self.outcome or "",
            "name": self.name,
            "page": str(self.page),
        }
        values.update({key: "" if value is None else str(value) for key, value in changes.items()})
        defaults = {"sort": "name", "order": "asc", "page": "1"}
        return {key: value for key, value in values.items() if value and defaults.get(key) != value}


@dataclass(frozen=True)
class FleetPage:
    """One page of the table, with what the page shows around it."""

    rows: list[Row]
    counts: dict[str, int]
    """Outcome -> Marquees whose last cycle had it, over the whole fleet."""
    total: int
    selected: int
    page: int
    pages: int


@dataclass(frozen=True)
class FleetRows:
    """Every Marquee's row as of one moment, and the counts by outcome: what every query of one
    version of the picture shares (building the rows is most of a page's cost)."""

    rows: list[Row]
    counts: dict[str, int]
    """Outcome -> Marquees whose last cycle had it."""
    standing: dict[str, int]
    """``standing_of`` -> Marquees: what the fleet's health bar counts."""


def standing_of(row: Row) -> str:
    """What the health bar counts a Marquee as: its last outcome when that failed (what most
    needs seeing), else what keeps it from applying its desired state now (``paused``,
    ``held``: Playgrounds pinned or held back by a rollout, ``detect``, ``off``), else its last
    outcome. A paused Marquee whose last cycle was ok is paused, not ok."""
    if look_of(row.outcome) is BAD:
        return row.outcome
    if row.paused is not None:
        return "paused"
    if row.held:
        return "held"
    if row.mode in ("detect", "off"):
        return row.mode
    return row.outcome


def fleet_rows(statuses: Sequence[MarqueeStatus], now: float) -> FleetRows:
    rows = [Row.of(status, now) for status in statuses]
    standing = Counter(standing_of(row) for row in rows)
    return FleetRows(
        rows,
        dict(sorted(Counter(row.outcome for row in rows).items())),
        dict(sorted(standing.items())),
    )


def select_page(fleet: FleetRows, query: FleetQuery) -> FleetPage:
    """The rows ``query`` selects, sorted, cut to its page; a page past the last shows the last.
    ``fleet`` is left as it was (it serves the next query too)."""
    rows = fleet.rows
    needle = query.name.casefold()
    selected = [
        row
        for row in rows
        if (query.outcome is None or row.outcome == query.outcome)
        and (not needle or needle in row.name.casefold())
    ]
    selected.sort(key=SORTS[query.sort], reverse=query.descending)
    pages = max(1, math.ceil(len(selected) / PAGE_SIZE))
    page = min(query.page, pages)
    start = (page - 1) * PAGE_SIZE
    return FleetPage(
        rows=selected[start : start + PAGE_SIZE],
        counts=fleet.counts,
        total=len(rows),
        selected=len(selected),
        page=page,
        pages=pages,
    )


def fleet_page(statuses: Sequence[MarqueeStatus], query: FleetQuery, now: float) -> FleetPage:
    """The rows ``query`` selects, sorted, cut to its page; a page past the last shows the last."""
    return select_page(fleet_rows(statuses, now), query)
