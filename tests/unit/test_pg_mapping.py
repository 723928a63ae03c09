"""What the relations playguard reads must hold, checked against catalog rows: every model field
has a kind of column, and each way a relation can be wrong is one line naming it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from playguard_async.desired_state.model import Marquee, Playspec
from playguard_async.desired_state.postgres.mapping import (
    BOOLEAN,
    INTEGER,
    JSON,
    NUMBER,
    TEXT,
    TEXT_ARRAY,
    TIMESTAMP,
    RelationCheck,
    check_relations,
    kind_of,
)
from playguard_async.desired_state.postgres.relations import (
    EXPECTED_COLUMNS,
    KEY_COLUMNS,
    STEERING,
    TABLES,
    MarqueeSteering,
)


def _column(relation: str, column: str, kind: str) -> dict[str, Any]:
    """A ``CATALOG_QUERY`` row for a column of the given SQL type."""
    types = {
        "text": ("text", "S", None), "varchar": ("character varying", "S", None),
        "bigint": ("bigint", "N", None), "integer": ("integer", "N", None),
        "numeric": ("numeric", "N", None), "boolean": ("boolean", "B", None),
        "timestamptz": ("timestamp with time zone", "D", None),
        "timestamp": ("timestamp without time zone", "D", None),
        "text[]": ("text[]", "A", "S"), "integer[]": ("integer[]", "A", "N"),
        "jsonb": ("jsonb", "U", None), "json": ("json", "U", None),
    }  # fmt: skip
    name, category, element = types[kind]
    return {"relation": relation, "column": column, "type": name, "category": category,
            "element_category": element}  # fmt: skip


GOOD_TYPES = {TEXT: "varchar", INTEGER: "bigint", BOOLEAN: "boolean", TIMESTAMP: "timestamptz",
              TEXT_ARRAY: "text[]", NUMBER: "numeric", JSON: "json"}  # fmt: skip
"""For each kind, a type a view over Rails tables would give."""


def _catalog(**changes: str | None) -> list[dict[str, Any]]:
    """Every relation with every column of an accepted type; ``changes`` maps
    ``relation.column`` to another type, or to None for a column left out."""
    rows = []
    for relation, columns in EXPECTED_COLUMNS.items():
        for column, kind in columns.items():
            sql_type = changes.get(
                f"{relation}.{column}", GOOD_TYPES[replace(kind, optional=False)]
            )
            if sql_type is not None:
                rows.append(_column(relation, column, sql_type))
        rows.append(_column(relation, "created_at", "timestamp"))  # extra columns: ignored
    return rows


def test_every_model_field_has_a_kind_and_a_view_of_accepted_types_passes() -> None:
    assert set(EXPECTED_COLUMNS) == {table.name for table in TABLES}
    assert EXPECTED_COLUMNS["marquees"]["identity_file"] is TEXT  # a Path is text
    assert EXPECTED_COLUMNS["playspecs"]["rollout"] == replace(JSON, optional=True)
    assert check_relations("playguard", EXPECTED_COLUMNS, KEY_COLUMNS, _catalog()) == {}


# (what changes, the relation, its problem lines, whether its keys can still be read)
BAD = [
    ({"playgrounds.branch": None}, "playgrounds",
     ["playguard.playgrounds: column branch missing"], True),
    ({"playgrounds.marquee": None}, "playgrounds",
     ["playguard.playgrounds: column marquee missing"], False),
    ({"marquees.port": "text"}, "marquees",
     ["playguard.marquees: column port has type text, expected an integer (smallint, integer, "
      "bigint)"], True),
    ({"marquees.port": "numeric"}, "marquees",
     ["playguard.marquees: column port has type numeric, expected an integer (smallint, "
      "integer, bigint)"], True),
    ({"marquees.launchable": "integer"}, "marquees",
     ["playguard.marquees: column launchable has type integer, expected boolean"], True),
    ({"playgrounds.expires_at": "timestamp"}, "playgrounds",
     ["playguard.playgrounds: column expires_at has type timestamp without time zone, expected "
      "timestamp with time zone (a timestamp without one: AT TIME ZONE 'UTC' in the view)"],
     True),
    ({"agent_chats.command": "integer[]"}, "agent_chats",
     ["playguard.agent_chats: column command has type integer[], expected text[] (an array of "
      "text or varchar)"], True),
    ({"agent_chats.command": "text"}, "agent_chats",
     ["playguard.agent_chats: column command has type text, expected text[] (an array of text "
      "or varchar)"], True),
    ({"playspecs.health_timeout": "text"}, "playspecs",
     ["playguard.playspecs: column health_timeout has type text, expected a number (double "
      "precision, real, numeric, an integer)"], True),
    ({"playspecs.rollback": "boolean", "playspecs.health_timeout": None}, "playspecs",
     ["playguard.playspecs: column rollback has type boolean, expected text (text, varchar, "
      "char)"], True),
    ({"playspecs.rollout": "text"}, "playspecs",
     ["playguard.playspecs: column rollout has type text, expected jsonb (or json)"], True),
    ({"playspecs.rollout": "text[]"}, "playspecs",
     ["playguard.playspecs: column rollout has type text[], expected jsonb (or json)"], True),
    ({"playspecs.rollout": "boolean"}, "playspecs",
     ["playguard.playspecs: column rollout has type boolean, expected jsonb (or json)"], True),
    ({"playspecs.registry": "bigint", "playspecs.repo": None}, "playspecs",
     ["playguard.playspecs: column repo missing",
      "playguard.playspecs: column registry has type bigint, expected text (text, varchar, "
      "char)"], False),
]  # fmt: skip


@pytest.mark.parametrize(("changes", "relation", "lines", "keys_readable"), BAD)
def test_each_wrong_column_is_one_line_and_only_its_relation_is_named(
    changes: dict[str, str | None], relation: str, lines: list[str], keys_readable: bool
) -> None:
    checks = check_relations("playguard", EXPECTED_COLUMNS, KEY_COLUMNS, _catalog(**changes))
    assert checks == {relation: RelationCheck(tuple(lines), keys_readable)}


@pytest.mark.parametrize(
    "left_out",
    [("playspecs.rollback",), ("playspecs.health_timeout",),
     ("playspecs.rollback", "playspecs.health_timeout"), ("playspecs.rollout",),
     ("playspecs.rollback", "playspecs.health_timeout", "playspecs.rollout")],
    ids=["rollback", "health_timeout", "both", "rollout", "all"],
)  # fmt: skip
def test_a_view_written_before_the_later_fields_may_lack_them(left_out: tuple[str, ...]) -> None:
    catalog = _catalog(**dict.fromkeys(left_out))
    assert check_relations("playguard", EXPECTED_COLUMNS, KEY_COLUMNS, catalog) == {}


def test_a_missing_relation_is_named_and_its_keys_unreadable() -> None:
    catalog = [row for row in _catalog() if row["relation"] != "registries"]
    checks = check_relations("fleet", EXPECTED_COLUMNS, KEY_COLUMNS, catalog)
    assert list(checks) == ["registries"]
    assert checks["registries"].problems == (
        "fleet.registries: missing (no table or view of that name): run `playguard db migrate`, "
        "or create the view",
    )
    assert not checks["registries"].keys_readable


@pytest.mark.parametrize(
    ("model", "field", "kind"),
    [(Playspec, "rollout", JSON), (Marquee, "windows", JSON), (Marquee, "canary", BOOLEAN),
     (Playspec, "images", TEXT_ARRAY), (MarqueeSteering, "windows", JSON),
     (MarqueeSteering, "canary", BOOLEAN)],
)  # fmt: skip
def test_a_field_that_is_a_model_or_a_list_of_models_is_one_json_document(
    model: Any, field: str, kind: object
) -> None:
    assert kind_of(model.model_fields[field].annotation) == kind


def test_a_marquees_canary_is_steering_so_the_marquees_view_owes_no_column_for_it() -> None:
    assert "canary" not in EXPECTED_COLUMNS["marquees"]
    assert "canary" in STEERING.columns
    assert STEERING.columns_in({"name", "mode", "windows"}) == ["name", "mode", "windows"]
    assert STEERING.columns_in({"name", "mode", "windows", "canary"})[-1] == "canary"
