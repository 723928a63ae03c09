"""The metrics page's table and the daemon's registry agree: every metric the registry exposes
has a row with its type and labels, and no row names a metric the registry does not have."""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase

import pytest
from prometheus_client.metrics_core import Metric

from tests.support.docs import section
from tests.support.metrics import with_every_series

EXPOSED_TYPE = {"counter": "counter", "gauge": "gauge", "histogram": "histogram", "info": "gauge"}
"""A family's type as the text format names it (an info is a gauge of 1)."""
SUFFIX = {"counter": "_total", "info": "_info"}
"""What the text format adds to a family's name, by type."""
NOT_LABELS = {"le"}
"""Labels a type brings with it (a histogram's bucket bound), not the metric's own."""


@dataclass(frozen=True)
class Row:
    names: tuple[str, ...]
    """The metric names (or ``process_*``-style patterns) in the row's first cell."""
    type: str
    labels: frozenset[str]


def table_lines() -> list[str]:
    """The rows of the table under **Metrics** in the metrics reference."""
    text = section("reference/metrics.md", "What each metric means")
    table = text.split("**Metrics** at `/metrics`", 1)[1].split("\n\n")[1]
    return table.splitlines()[2:]


def row_of(line: str) -> Row:
    names, kind, labels = (cell.strip() for cell in line.strip("|").split("|")[:3])
    quoted = re.compile(r"`([^`]+)`")
    return Row(tuple(quoted.findall(names)), kind, frozenset(quoted.findall(labels)))


def exposed() -> dict[str, Metric]:
    """Each family of the registry by the name a scrape shows it under."""
    return {
        family.name + SUFFIX.get(family.type, ""): family
        for family in with_every_series().registry.collect()
    }


def mismatches(rows: list[Row], families: dict[str, Metric]) -> list[str]:
    """What the table and the registry disagree on, one line each."""
    found = []
    for name, family in families.items():
        row = next((r for r in rows if any(fnmatchcase(name, p) for p in r.names)), None)
        if row is None:
            found.append(f"no row for {name}")
        elif not any("*" in pattern for pattern in row.names):  # a collector's, told together
            labels = {label for sample in family.samples for label in sample.labels} - NOT_LABELS
            if row.type != EXPOSED_TYPE[family.type] or row.labels != labels:
                found.append(f"{name} is a {family.type} labelled {sorted(labels)}, not {row}")
    found.extend(
        f"a row names {pattern}, which the registry does not export"
        for row in rows
        for pattern in row.names
        if not any(fnmatchcase(name, pattern) for name in families)
    )
    return found


def test_the_table_and_the_registry_agree() -> None:
    rows = [row_of(line) for line in table_lines()]
    assert len(rows) > 20
    assert all(row.names for row in rows), rows
    assert mismatches(rows, exposed()) == []


WRONG = [
    ("| `playguard_cycles_total` |", None, "no row for playguard_cycles_total"),
    (
        "| `playguard_redis_up` | gauge | |",
        "| `playguard_redis_down` | gauge | |",
        "names playguard_redis_down, which the registry does not export",
    ),
    (
        "| `playguard_lock_lost_total` | counter | `reason` |",
        "| `playguard_lock_lost_total` | gauge | `reason` |",
        "playguard_lock_lost_total is a counter",
    ),
    (
        "| `playguard_marquee_not_ok` | gauge | `marquee`, `reason`, `outcome` |",
        "| `playguard_marquee_not_ok` | gauge | `marquee`, `reason` |",
        "playguard_marquee_not_ok is a gauge labelled ['marquee', 'outcome', 'reason']",
    ),
]


@pytest.mark.parametrize(("row", "replaced", "said"), WRONG)
def test_a_table_that_drifted_is_caught(row: str, replaced: str | None, said: str) -> None:
    lines = table_lines()
    [index] = [number for number, line in enumerate(lines) if line.startswith(row)]
    if replaced is None:
        del lines[index]
    else:
        lines[index] = lines[index].replace(row, replaced)
    found = mismatches([row_of(line) for line in lines], exposed())
    assert any(said in line for line in found), found
