"""A snapshot's rows validated into an inventory with the inventory's own models: a refused row
takes out only the Marquees whose desired state it is part of; unchanged rows are not validated
again (``RowMemo``); and the inventory's rows as the tables take them (``rows_of``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any

import structlog
from pydantic import TypeAdapter, ValidationError

from playguard_async.desired_state.model import (
    REFERENCES,
    Inventory,
    _collector_paused,
    _reason,
    _shown_value,
)
from playguard_async.desired_state.postgres.relations import STEERING, TABLES, Broken, Rows, Table
from playguard_async.desired_state.rollout_policy import RolloutPolicy
from playguard_async.desired_state.windows import Window

log = structlog.get_logger("playguard.desired_state")


@dataclass
class Validated:
    """A snapshot's inventory and why some rows (and what depends on them) were left out."""

    inventory: Inventory
    problems: list[str] = field(default_factory=list)


_ADAPTERS: dict[str, TypeAdapter[list[Any]]] = {
    table.name: TypeAdapter(list[table.model])  # type: ignore[name-defined]
    for table in TABLES
}
"""One validator per table, built once: building one costs more than validating a small table."""

RowKey = tuple[Any, ...]

_NAME_KEY = itemgetter("name")
_NAME_OF = attrgetter("name")


def _row_key(row: dict[str, Any]) -> RowKey:
    """A row's values, hashable (arrays as tuples): equal keys validate to equal models."""
    return tuple(tuple(value) if isinstance(value, list) else value for value in row.values())


def _row_keys(table: Table, rows: list[dict[str, Any]]) -> tuple[RowKey, ...]:
    if table.has_arrays:
        return tuple(_row_key(row) for row in rows)
    return tuple(tuple(row.values()) for row in rows)  # the common tables: at C speed


@dataclass
class RowMemo:
    """The models of the last snapshot's valid rows, by row: a tick whose rows did not change
    (the common case) validates nothing again, and one row changed validates that row only.
    Holds the last snapshot's rows only, so it never outgrows the fleet."""

    models: dict[str, dict[RowKey, Any]] = field(default_factory=dict)
    keys: tuple[tuple[RowKey, ...], ...] | None = None
    broken: tuple[tuple[str, tuple[str, ...]], ...] = ()
    validated: Validated | None = None


def _valid_rows(
    table: Table,
    rows: list[dict[str, Any]],
    keys: tuple[RowKey, ...],
    known: dict[RowKey, Any],
    problems: list[str],
) -> dict[RowKey, Any]:
    """The table's valid rows as models by row key, in row order; each refused row is a
    problem line and is left out. Rows ``known`` from the last snapshot are not validated again."""
    adapter = _ADAPTERS[table.name]
    fresh = [index for index, key in enumerate(keys) if key not in known]
    refused: dict[int, list[str]] = {}
    try:
        models = adapter.validate_python([rows[index] for index in fresh])
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            position, column = error["loc"][0], ".".join(str(part) for part in error["loc"][1:])
            assert isinstance(position, int)
            index = fresh[position]
            refused.setdefault(index, []).append(
                f"{table.name} {rows[index].get('name')!r}: column {column or '(row)'}: "
                f"{_reason(error)}{_shown_value(error)}"
            )
        for lines in refused.values():
            problems.extend(lines)
        fresh = [index for index in fresh if index not in refused]
        models = adapter.validate_python([rows[index] for index in fresh])
    validated = dict(zip((keys[index] for index in fresh), models, strict=True))
    return {
        key: known[key] if key in known else validated[key]
        for index, key in enumerate(keys)
        if index not in refused
    }


def validate_snapshot(
    rows: Rows, memo: RowMemo | None = None, broken: Broken | None = None
) -> Validated:
    """The inventory of the rows the models accept, without the Marquees a refused row concerns.

    A relation in ``broken`` (read by its keys alone) has all its rows refused, its problem
    lines reported. Over views nothing keeps names unique or references resolved: a name on
    several rows (a join gone wrong) refuses all of them, and a reference to a name that no row
    has refuses the referring row, each with its Marquees, the rest of the fleet untouched.

    With ``memo`` (kept by the caller across snapshots) unchanged rows are not validated again,
    and an unchanged snapshot returns the last result itself, its inventory's index built. The
    cyclic collector is held off meanwhile, as for the YAML file: the models and the index are
    hundreds of thousands of objects, none in a cycle, and the collections their allocation
    starts walked everything alive (bench/README.md: the collector in a cold snapshot)."""
    with _collector_paused():
        return _validate_snapshot(rows, memo, broken or {})


def _validate_snapshot(rows: Rows, memo: RowMemo | None, broken: Broken) -> Validated:
    memo = memo if memo is not None else RowMemo()
    keys = tuple(_row_keys(table, rows[table.name]) for table in TABLES)
    shape = tuple(sorted((name, tuple(lines)) for name, lines in broken.items()))
    if memo.validated is not None and keys == memo.keys and shape == memo.broken:
        return memo.validated
    problems: list[str] = []
    by_key: dict[str, dict[RowKey, Any]] = {}
    present = {table.name: set(map(_NAME_KEY, rows[table.name])) for table in TABLES}
    for table, table_keys in zip(TABLES, keys, strict=True):
        if table.name in broken:
            problems.extend(broken[table.name])
            by_key[table.name] = {}
            continue
        table_rows, row_keys = rows[table.name], table_keys
        kept = _unique_names(table, table_rows, present[table.name], problems)
        if kept is not None:
            table_rows, row_keys = [table_rows[i] for i in kept], tuple(row_keys[i] for i in kept)
        by_key[table.name] = _valid_rows(
            table, table_rows, row_keys, memo.models.get(table.name, {}), problems
        )
    valid = {name: list(models.values()) for name, models in by_key.items()}
    names = {table: set(map(_NAME_OF, valid[table])) for table in valid}
    # Which Marquees each refused row concerns, read from the raw values (a refused row's
    # columns are still strings to compare, whatever else is wrong with them).
    bad_registries = present["registries"] - names["registries"]
    bad_playspecs = present["playspecs"] - names["playspecs"]
    bad_playspecs |= {
        row["name"] for row in rows["playspecs"] if row.get("registry") in bad_registries
    }
    problems.extend(_dangling_references(valid, present))
    bad_playspecs |= {
        spec.name
        for spec in valid["playspecs"]
        if spec.registry is not None and spec.registry not in present["registries"]
    }
    bad_playgrounds = present["playgrounds"] - names["playgrounds"]
    bad_chat_playgrounds = {
        row.get("playground")
        for row in rows["agent_chats"]
        if row["name"] not in names["agent_chats"]
    }
    excluded = present["marquees"] - names["marquees"]
    for row in rows["playgrounds"]:
        if (
            row["name"] in bad_playgrounds
            or row.get("playspec") in bad_playspecs
            or row.get("playspec") not in present["playspecs"]
            or row["name"] in bad_chat_playgrounds
        ):
            excluded.add(row.get("marquee"))
    for marquee in sorted(name for name in excluded if name in names["marquees"]):
        problems.append(f"marquees {marquee!r}: left out of this snapshot (a row it needs is bad)")
    kept_marquees = names["marquees"] - excluded
    kept_playspecs = names["playspecs"] - bad_playspecs
    playgrounds = [
        playground
        for playground in valid["playgrounds"]
        if playground.marquee in kept_marquees and playground.playspec in kept_playspecs
    ]
    kept_playgrounds = {playground.name for playground in playgrounds}
    inventory = Inventory(
        marquees=[m for m in valid["marquees"] if m.name in kept_marquees],
        registries=valid["registries"],
        playspecs=[spec for spec in valid["playspecs"] if spec.name in kept_playspecs],
        playgrounds=playgrounds,
        agent_chats=[chat for chat in valid["agent_chats"] if chat.playground in kept_playgrounds],
    )
    inventory._index  # noqa: B018 - built here, in the validating thread, not on the loop
    memo.models, memo.keys, memo.broken = by_key, keys, shape
    memo.validated = Validated(inventory, problems)
    return memo.validated


def _unique_names(
    table: Table, rows: list[dict[str, Any]], present: set[Any], problems: list[str]
) -> list[int] | None:
    """The positions of the rows whose name no other row has, or None when every name is
    unique (the common case, told by the ``present`` names alone: tables have primary keys).
    A view with a bad join repeats a row; which copy is right cannot be told, so all of them
    are refused."""
    if len(present) == len(rows):
        return None
    counts = Counter(map(_NAME_KEY, rows))
    repeated = {name for name, count in counts.items() if count > 1 and name is not None}
    for name in sorted(repeated):
        problems.append(f"{table.name} {name!r}: {counts[name]} rows have this name (a join in "
                        "the view repeats it?); all of them left out")  # fmt: skip
    return [index for index, row in enumerate(rows) if row["name"] not in repeated]


def _dangling_references(valid: Mapping[str, list[Any]], present: Mapping[str, set[Any]]
                         ) -> Iterator[str]:  # fmt: skip
    """A line per valid row naming a row that no relation has (tables' foreign keys prevent it;
    views do not)."""
    for source, column, target in REFERENCES:
        references = set(map(attrgetter(column), valid[source]))
        references.discard(None)
        if references <= present[target]:
            continue  # every reference resolves, the common case, found at C speed
        for item in valid[source]:
            reference = getattr(item, column)
            if reference is not None and reference not in present[target]:
                yield (f"{source} {item.name!r}: column {column}: no row of {target} has the "
                       f"name {reference!r}; left out")  # fmt: skip


def rows_of(inventory: Inventory) -> dict[str, list[tuple[Any, ...]]]:
    """The inventory as rows per table, in each table's column order (paths as text, windows
    as JSON text), ``marquee_steering`` included: one row per Marquee, in the same order."""
    return {
        table.name: [
            tuple(_column_value(column, getattr(item, column)) for column in table.columns)
            for item in getattr(inventory, table.field)
        ]
        for table in (*TABLES, STEERING)
    }


_JSON_COLUMNS: dict[str, TypeAdapter[Any]] = {
    "windows": TypeAdapter(list[Window]),
    "rollout": TypeAdapter(RolloutPolicy),
}
"""The jsonb columns (``mapping.JSON``) and how their values are written."""


def _column_value(column: str, value: object) -> object:
    """A model's value as its column takes it: a path as text, a Marquee's windows and a
    Playspec's rollout as JSON text for their jsonb columns (as asyncpg writes jsonb)."""
    if isinstance(value, Path):
        return str(value)
    adapter = _JSON_COLUMNS.get(column)
    if adapter is not None and value is not None:
        return adapter.dump_json(value).decode()
    return value
