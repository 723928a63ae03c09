"""Output to a pipe or a file is data: each line as wide as what it says, never padded to the
widest row of its table (a piped ``check`` was about 220 columns a row)."""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from contextlib import redirect_stdout

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.table import Table

from playguard_async.coordination.marquee_reads import LastCycle, MarqueeStatus
from playguard_async.operator import display

DETAILS = st.lists(
    st.text(st.characters(codec="ascii", exclude_categories=["Cc"]), max_size=300),
    min_size=1,
    max_size=6,
)


def check_table(details: list[str]) -> Table:
    """A table as ``check`` builds it: its last column folded, of details of any width."""
    table = Table("CHECK", "VERDICT", "DETAIL", box=None, header_style="bold")
    table.columns[2].overflow = "fold"
    for index, detail in enumerate(details):
        table.add_row(f"marquee m-{index}", "ok" if index % 2 else "FAIL", detail)
    return table


def status_table(details: list[str]) -> Table:
    statuses = [
        MarqueeStatus(
            f"m-{index}",
            True,
            None,
            LastCycle("c1", "failed", "sync_git", detail, 3, 3, time.time(), 1.0, 0, {}, {}, []),
        )
        for index, detail in enumerate(details)
    ]
    return display.status_table(statuses, time.time())


@pytest.mark.parametrize("build", [check_table, status_table], ids=["check", "status"])
@settings(max_examples=25, deadline=None)
@given(details=DETAILS)
def test_a_table_printed_to_a_pipe_has_no_trailing_padding(
    build: Callable[[list[str]], Table], details: list[str]
) -> None:
    piped = io.StringIO()
    with redirect_stdout(piped):
        display.console().print(build(details))
    printed = piped.getvalue()

    lines = printed.splitlines()
    assert lines
    assert printed.endswith("\n")
    for line in lines:
        assert line == line.rstrip()
    for detail in details:
        assert " ".join(detail.split()) in " ".join(printed.split())
