"""The host's journal read back and joined with the cycle records (``playguard why``), without
servers: the shapes of a line old and new, the join on cycle id, and outside input kept inert."""

from __future__ import annotations

import pytest

from playguard_async.operator.display import timeline_lines
from playguard_async.operator.why import (
    NO_CYCLE_RECORD,
    TEXT_LIMIT,
    Event,
    HostJournal,
    HostWrite,
    Sources,
    Timeline,
    joined,
)
from playguard_async.remote.journal import (
    ABSENT,
    STARTED,
    JournalEntry,
    journal_started,
    journal_text,
    parse_journal,
)


def record(cycle: str, *, at: float, actions: list[str], outcome: str = "ok") -> dict[str, object]:
    return {
        "marquee": "m1", "cycle": cycle, "outcome": outcome, "fence": 7, "replica": "r1",
        "finished_at": at + 1.0, "duration": 1.0, "actions": {"sync_git": actions},
        "findings": {"reconcile_playgrounds": {"playgrounds": {
            "web": {"state": "running", "drift": ["app: web-app-1 config changed"],
                    "actions": actions},
        }}},
        "notices": {"reconcile_playgrounds": [
            {"kind": "release", "subject": "web", "detail": "commit a -> b"}]},
    }  # fmt: skip


def test_a_journal_line_names_its_cycle_and_an_old_line_reads_with_none() -> None:
    text = (
        "3 1700000000.123456789 update playground web from a to b\n"
        f"4 1700000001.5 {journal_text('compose up playground web (commit)', 'c0ffee12ab34')}\n"
        "5 1700000002 cycle=not-hex keeps its words\n"
    )

    assert parse_journal(text) == [
        JournalEntry(3, 1700000000.123456789, "update playground web from a to b", None),
        JournalEntry(4, 1700000001.5, "compose up playground web (commit)", "c0ffee12ab34"),
        JournalEntry(5, 1700000002.0, "cycle=not-hex keeps its words", None),
    ]


def test_lines_not_of_the_written_shape_are_left_out() -> None:
    text = "cut half of a line\n\n-1 17 negative\n7 not-a-time x\n8 1700000000.5 kept\n"

    assert parse_journal(text) == [JournalEntry(8, 1700000000.5, "kept")]


def test_host_writes_join_their_cycle_and_a_write_of_no_recorded_cycle_is_marked() -> None:
    update = HostWrite(1000.2, 7, "update playground web from a to b", "aa11")
    orphan = HostWrite(2000.0, 8, "compose up playground web (commit)", "bb22")
    anonymous = HostWrite(3000.0, 6, "stop playground other (expired)", None)
    sources = Sources(
        records=[record("aa11", at=1000.0, actions=[update.action]),
                 record("cc33", at=1500.0, actions=[])],
        writes=[update, orphan, anonymous],
        operator_events=[Event(1200.0, "pin", "pin playground web: pinned", "alice@box")],
    )  # fmt: skip
    extra = [Event(900.0, "change", "row playguard.playgrounds web: branch", "alice")]

    events = joined(sources, extra=extra, playground=None, since=0.0)

    assert [(event.kind, event.cycle_id) for event in events] == [
        ("change", None), ("cycle", "aa11"), ("pin", None), ("host write", "bb22"),
        ("host write", None),
    ]  # fmt: skip
    cycle = events[1]
    assert (cycle.by, cycle.fence, cycle.writes) == ("replica r1", 7, (update,))
    assert cycle.causes == ("playground web: release: commit a -> b",)
    assert events[3].by == events[4].by == NO_CYCLE_RECORD
    only_web = joined(sources, extra=(), playground="web", since=1100.0)
    assert [event.kind for event in only_web] == ["pin", "host write"]


@pytest.mark.parametrize(
    "bookkeeping", ["keep compose answers", "keep a copy of pins", "keep a copy of pause"]
)
def test_playguards_own_bookkeeping_on_the_host_is_no_event_and_no_write_of_a_cycle(
    bookkeeping: str,
) -> None:
    update = HostWrite(1000.2, 7, "update playground web from a to b", "aa11")
    kept = HostWrite(1000.3, 7, bookkeeping, "aa11")
    orphan = HostWrite(2000.0, 8, bookkeeping, "bb22")
    sources = Sources(records=[record("aa11", at=1000.0, actions=[update.action])],
                      writes=[update, kept, orphan])  # fmt: skip

    events = joined(sources, extra=(), playground=None, since=0.0)

    assert [(event.kind, event.writes) for event in events] == [("cycle", (update,))]
    assert not any(
        bookkeeping in line for line in timeline_lines(Timeline("m1", None, 0.0, events))
    )


def test_hostile_text_is_bounded_and_shown_escaped() -> None:
    hostile = "\x1b]0;owned\x07\x1b[2J" + "A" * 1_000_000
    write = HostWrite.from_entry(JournalEntry(9, 1700000000.0, hostile, None))
    sources = Sources(writes=[write], operator_events=[Event(1.0, "pause", "p", hostile[:500])])
    timeline = Timeline("m1", None, 0.0, joined(sources, extra=(), playground=None, since=0.0))

    lines = timeline_lines(timeline)

    assert len(write.action) == TEXT_LIMIT
    assert all(len(line) < 2 * TEXT_LIMIT + 200 for line in lines)
    assert not any("\x1b" in line or "\x07" in line for line in lines)
    assert "\\x1b]0;owned\\x07" in "\n".join(lines)


WRITE = "7 1700000500.5 cycle=aa11 update playground web from a to b\n"


@pytest.mark.parametrize(
    ("text", "started", "cut", "said"),
    [
        pytest.param(f"{STARTED}1700000000.25\n{WRITE}", 1700000000.25, False, None,
                     id="whole since before --since"),
        pytest.param(f"{STARTED}1700000400\n{WRITE}", 1700000400.0, False,
                     "host journal begins at 2023-11-14 22:20:00: when this host was first written",
                     id="whole, started after --since: said, not cut"),
        pytest.param(f"{ABSENT}\n", 0.0, False, None, id="no journal: never written"),
        pytest.param(WRITE, None, True,
                     "host journal begins at 2023-11-14 22:21:40: it was cut, what it held "
                     "before is gone", id="cut after --since"),
        pytest.param("6 1700000100 old write\n" + WRITE, None, False, None,
                     id="cut, but before --since"),
        pytest.param("", None, True, "host journal holds no write and no mark of its start: "
                     "it was emptied, what it held is gone", id="emptied"),
        pytest.param(f"{WRITE}{STARTED}1700000000\n", None, True,
                     "host journal begins at 2023-11-14 22:21:40: it was cut, what it held "
                     "before is gone", id="a mark not first is no start"),
    ],
)  # fmt: skip
def test_a_journal_cut_after_since_is_said_and_makes_the_timeline_incomplete(
    text: str, started: float | None, cut: bool, said: str | None
) -> None:
    journal = HostJournal([HostWrite.from_entry(e) for e in parse_journal(text)],
                          journal_started(text))  # fmt: skip
    timeline = Timeline("m1", None, 1700000200.0, [], journal=journal)

    lines = timeline_lines(timeline)

    assert journal.started == started
    assert (timeline.journal_cut, timeline.complete) == (cut, not cut)
    assert timeline.to_json()["journal_cut"] is cut
    if said is None:
        assert not any("host journal" in line for line in lines)
    else:
        assert f"  {said}" in lines
