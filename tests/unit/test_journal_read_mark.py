"""How far a cycle read the change log, as its host's journal lines say (``read=<id>``), without
servers: the line's shapes old, new and hostile, the id a version gives, and ``why`` naming from
the journal the cycle that applied a change whose first reader no record keeps."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from playguard_async.cycle_record import DesiredVersion, StoredRecord, read_through
from playguard_async.operator.display import timeline_lines
from playguard_async.operator.why import Event, HostWrite, Sources, Timeline, joined
from playguard_async.remote.journal import READ_MARK, JournalEntry, journal_text, parse_journal


@pytest.mark.parametrize(
    ("line", "entry"),
    [
        pytest.param(
            "3 17.5 update playground web from a to b",
            JournalEntry(3, 17.5, "update playground web from a to b"),
            id="old: no cycle",
        ),
        pytest.param(
            "4 17.5 cycle=ab12 compose up playground web",
            JournalEntry(4, 17.5, "compose up playground web", "ab12"),
            id="old: a cycle, no read id",
        ),
        pytest.param(
            "5 17.5 cycle=ab12 read=42 compose up playground web",
            JournalEntry(5, 17.5, "compose up playground web", "ab12", 42),
            id="new: a cycle and its read id",
        ),
        pytest.param(
            "5 17.5 cycle=ab12 read=0 stop playground web",
            JournalEntry(5, 17.5, "stop playground web", "ab12", 0),
            id="new: an empty change log",
        ),
        pytest.param(
            "6 17.5 read=42 stop playground web",
            JournalEntry(6, 17.5, "read=42 stop playground web"),
            id="hostile: a read id with no cycle is action text",
        ),
        pytest.param(
            "7 17.5 cycle=ab12 read=-1 stop",
            JournalEntry(7, 17.5, "read=-1 stop", "ab12"),
            id="hostile: a negative read id",
        ),
        pytest.param(
            "7 17.5 cycle=ab12 read=007 stop",
            JournalEntry(7, 17.5, "read=007 stop", "ab12"),
            id="hostile: leading zeros",
        ),
        pytest.param(
            "7 17.5 cycle=ab12 read=" + "9" * 19 + " stop",
            JournalEntry(7, 17.5, "read=" + "9" * 19 + " stop", "ab12"),
            id="hostile: past a bigint",
        ),
        pytest.param(
            "7 17.5 cycle=ab12 read=4x2 stop",
            JournalEntry(7, 17.5, "read=4x2 stop", "ab12"),
            id="hostile: not digits",
        ),
        pytest.param(
            "8 17.5 cycle=zz read=42 stop",
            JournalEntry(8, 17.5, "cycle=zz read=42 stop"),
            id="hostile: a cycle id not hex",
        ),
        pytest.param(
            "9 17.5 cycle=ab12 read=42",
            JournalEntry(9, 17.5, "", "ab12", 42),
            id="a mark with no action after it",
        ),
    ],
)
def test_a_journal_lines_read_id_is_taken_only_in_its_written_shape(
    line: str, entry: JournalEntry
) -> None:
    assert parse_journal(line + "\n") == [entry]


@given(
    action=st.text(
        st.characters(blacklist_categories=["Cc", "Cs", "Zl", "Zp"]), max_size=40
    ).filter(lambda action: not action.startswith(READ_MARK)),
    cycle_id=st.text("0123456789abcdef", min_size=1, max_size=32),
    read=st.one_of(st.none(), st.integers(0, 10**18 - 1)),
)
def test_what_the_guard_writes_reads_back_as_written(
    action: str, cycle_id: str, read: int | None
) -> None:
    """Any action the daemon writes (each starts with its verb, never with the read mark)."""
    line = f"12 1700000000.25 {journal_text(action, cycle_id, read)}"

    assert parse_journal(line) == [JournalEntry(12, 1700000000.25, action, cycle_id, read)]


def test_a_write_of_no_cycle_names_no_read_id_whatever_it_is_given() -> None:
    assert journal_text("stop playground web", None, 42) == "stop playground web"


@pytest.mark.parametrize(
    ("version", "through"),
    [
        pytest.param({"change": 42}, 42, id="every id up to its highest"),
        pytest.param({"change": 42, "unseen": [39, 41]}, 38, id="below the lowest unseen"),
        pytest.param({"digest": "ab12", "mtime": 3.0}, None, id="a YAML file has no ids"),
        pytest.param(None, None, id="no version"),
    ],
)
def test_a_version_reads_the_log_through_the_id_below_anything_it_missed(
    version: DesiredVersion | None, through: int | None
) -> None:
    assert read_through(version) == through


def record(cycle_id: str, at: float, change: int) -> StoredRecord:
    return {"marquee": "m1", "cycle": cycle_id, "outcome": "ok", "fence": 7, "replica": "r1",
            "finished_at": at + 1.0, "duration": 1.0, "actions": {"sync_git": ["update"]},
            "desired": {"change": change}}  # fmt: skip


def change(change_id: int) -> Event:
    return Event(5.0, "change", f"change {change_id}: playguard.playgrounds web: branch changed",
                 "alice", change_id=change_id)  # fmt: skip


@pytest.mark.parametrize(
    ("records", "writes", "applied_by", "included_in", "or_before"),
    [
        pytest.param(
            [],
            [
                HostWrite(10.0, 7, "update", "aa", 9),
                HostWrite(20.0, 7, "update", "bb", 12),
                HostWrite(30.0, 8, "update", "cc", 13),
            ],
            "bb",
            None,
            None,
            id="records gone: the first journalled cycle that read it",
        ),
        pytest.param(
            [record("cc", 30.0, 13)],
            [HostWrite(20.0, 7, "update", "bb", 12), HostWrite(30.0, 8, "update", "cc", 13)],
            "bb",
            None,
            None,
            id="its first reader's record gone, a later one kept",
        ),
        pytest.param(
            [record("aa", 10.0, 9), record("bb", 20.0, 12)],
            [HostWrite(20.0, 7, "update", "xx", 12)],
            None,
            "bb",
            None,
            id="a kept record that is the first reader keeps its join",
        ),
        pytest.param(
            [record("bb", 20.0, 12)],
            [HostWrite(20.0, 7, "update", "bb", 12)],
            None,
            None,
            "bb",
            id="the journal's first is the oldest record: or one before it",
        ),
        pytest.param(
            [],
            [
                HostWrite(10.0, 7, "update", "aa", 9),
                HostWrite(20.0, 7, "update", "bb", None),
                HostWrite(30.0, 7, "update", None, None),
            ],
            None,
            None,
            None,
            id="no line read it, old lines name no read id",
        ),
    ],
)
def test_a_change_whose_reader_has_no_record_names_the_cycle_the_journal_says_applied_it(
    records: list[StoredRecord], writes: list[HostWrite], applied_by: str | None,
    included_in: str | None, or_before: str | None,
) -> None:  # fmt: skip
    events = joined(Sources(records=records, writes=writes, changes=[change(12)]), extra=[],
                    playground=None, since=0.0)  # fmt: skip

    (event,) = [event for event in events if event.kind == "change"]
    assert (event.applied_by, event.included_in, event.read_by_or_before) == (
        applied_by, included_in, or_before,
    )  # fmt: skip
    assert event.to_json()["applied_by"] == applied_by


def test_a_change_applied_by_a_journalled_cycle_is_shown_as_the_journals() -> None:
    writes = [HostWrite(20.0, 7, "update playground web", "bb", 12)]
    events = joined(Sources(writes=writes, changes=[change(12)]), extra=[], playground=None,
                    since=0.0)  # fmt: skip

    lines = timeline_lines(Timeline("m1", None, 0.0, events))

    (line,) = [line for line in lines if "change 12" in line]
    assert line.endswith("[applied by cycle bb, from the host journal]")
    assert not any("no longer recorded" in line for line in lines)
