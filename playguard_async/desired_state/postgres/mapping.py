"""What the relations playguard reads must look like, and what the database's catalog says they
look like: the check behind ``playguard db check`` and behind every snapshot.

The desired-state relations in playguard's schema may be its own tables (``db import``) or views
that the application's owner defines over the application's tables. A view owes playguard only
its columns, by name and kind of type: extra columns are ignored, and a text column may be
``varchar``, an integer one ``bigint``. Each problem is one line naming the relation and the
column (``playguard.playgrounds: column branch missing``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from types import NoneType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import AwareDatetime, BaseModel


@dataclass(frozen=True)
class Kind:
    """A kind of column type and the catalog's types that are of that kind."""

    name: str
    categories: frozenset[str] = frozenset()
    """``pg_type.typcategory`` values accepted."""
    types: frozenset[str] = frozenset()
    """``format_type`` names accepted (when the category alone is too wide)."""
    element_categories: frozenset[str] = frozenset()
    """For arrays: the element type's category."""
    optional: bool = False
    """A column a relation may lack (the model's default then applies): one added to a model
    after views over the application's tables may have been written without it."""

    def accepts(self, column: Mapping[str, Any]) -> bool:
        if self.types:
            return bool(column["type"] in self.types)
        if self.element_categories:
            return column["category"] == "A" and column["element_category"] in (
                self.element_categories
            )
        return column["category"] in self.categories


TEXT = Kind("text (text, varchar, char)", categories=frozenset("S"))
INTEGER = Kind("an integer (smallint, integer, bigint)",
               types=frozenset({"smallint", "integer", "bigint"}))  # fmt: skip
BOOLEAN = Kind("boolean", categories=frozenset("B"))
TIMESTAMP = Kind(
    "timestamp with time zone (a timestamp without one: AT TIME ZONE 'UTC' in the view)",
    types=frozenset({"timestamp with time zone"}),
)
TEXT_ARRAY = Kind("text[] (an array of text or varchar)", element_categories=frozenset("S"))
NUMBER = Kind("a number (double precision, real, numeric, an integer)", categories=frozenset("N"))
JSON = Kind("jsonb (or json)", types=frozenset({"jsonb", "json"}))
"""A field that is a model of its own (a Playspec's rollout) or a list of them (a Marquee's
windows): one JSON document, validated by that model when the row is read."""


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def kind_of(annotation: Any) -> Kind:
    """The kind of column a model field's annotation reads from."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return kind_of(get_args(annotation)[0])
    if origin in (Union, UnionType):
        [inner] = [arg for arg in get_args(annotation) if arg is not NoneType]
        return kind_of(inner)
    if origin is Literal or annotation in (str, Path):
        return TEXT
    if origin is list:
        return JSON if _is_model(get_args(annotation)[0]) else TEXT_ARRAY
    if _is_model(annotation):
        return JSON
    if annotation is bool:
        return BOOLEAN
    if annotation is int:
        return INTEGER
    if annotation is float:
        return NUMBER
    if annotation in (AwareDatetime, datetime):
        return TIMESTAMP
    raise TypeError(f"no column kind for {annotation!r}")


def expected_columns(model: type[BaseModel], optional: Collection[str] = ()) -> dict[str, Kind]:
    """Column -> its kind, for each of the model's fields; those in ``optional`` may be absent."""
    return {
        name: replace(kind_of(info.annotation), optional=True)
        if name in optional
        else kind_of(info.annotation)
        for name, info in model.model_fields.items()
    }


def present_columns(catalog: Iterable[Mapping[str, Any]]) -> dict[str, set[str]]:
    """Relation -> the columns it has, from ``CATALOG_QUERY``'s rows."""
    found: dict[str, set[str]] = {}
    for row in catalog:
        columns = found.setdefault(row["relation"], set())
        if row["column"] is not None:
            columns.add(row["column"])
    return found


CATALOG_QUERY = """
SELECT c.relname::text AS relation, a.attname::text AS column,
       format_type(a.atttypid, NULL) AS type, t.typcategory::text AS category,
       e.typcategory::text AS element_category, has_table_privilege(c.oid, 'SELECT') AS readable
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_type e ON e.oid = t.typelem AND t.typcategory = 'A'
WHERE n.nspname = $1 AND c.relname = ANY ($2::text[]) AND c.relkind IN ('r', 'v', 'm', 'p', 'f')
"""
"""Every column of the named relations of a schema (a relation without columns: one row of
NULLs), whether tables, views, materialized views, partitioned or foreign tables, and whether
the session may read the relation."""


@dataclass(frozen=True)
class RelationCheck:
    """What is wrong with one relation, one line per problem, and whether the columns that say
    which Marquees a row concerns (its name and references) can still be read."""

    problems: tuple[str, ...]
    keys_readable: bool


def check_relations(
    schema: str,
    expected: Mapping[str, Mapping[str, Kind]],
    keys: Mapping[str, Sequence[str]],
    catalog: Iterable[Mapping[str, Any]],
) -> dict[str, RelationCheck]:
    """The relations of ``expected`` that have a problem (missing, a column missing or of the
    wrong kind of type), given ``CATALOG_QUERY``'s rows."""
    found: dict[str, dict[str, Mapping[str, Any]]] = {}
    for row in catalog:
        columns = found.setdefault(row["relation"], {})
        if row["column"] is not None:
            columns[row["column"]] = row
    checks = {}
    for relation, wanted in expected.items():
        name = f"{schema}.{relation}"
        if relation not in found:
            checks[relation] = RelationCheck(
                (f"{name}: missing (no table or view of that name): run `playguard db migrate`, "
                 "or create the view",), keys_readable=False)  # fmt: skip
            continue
        problems, bad = [], set()
        for column, kind in wanted.items():
            there = found[relation].get(column)
            if there is None and kind.optional:
                continue
            if there is None:
                problems.append(f"{name}: column {column} missing")
            elif not kind.accepts(there):
                problems.append(f"{name}: column {column} has type {there['type']}, "
                                f"expected {kind.name}")  # fmt: skip
            else:
                continue
            bad.add(column)
        if problems:
            checks[relation] = RelationCheck(tuple(problems), not bad & set(keys[relation]))
    return checks
