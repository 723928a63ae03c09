"""The host's journal of accepted writes: the one shape of its line, and the one way it is read.

The fence guard (``remote.guard``) appends ``<fence> <time> <text>`` for every write it lets
through, just before it runs it. A write made by a cycle starts its text with
``cycle=<cycle id>``, so what the host accepted joins the cycle record that meant it
(``playguard why``); when the cycle read a PostgreSQL desired state, ``read=<id>`` follows: the
change-log id up to which its snapshot saw every entry (``cycle_record.read_through``), so the
journal alone tells which cycle applied a change once Redis no longer keeps its record. A write
made outside a cycle, and every line written before cycles were named, has the text alone, and
reads with no cycle; a line written before the read id was, reads with none (an action never
starts with the read mark: each starts with its verb). The journal is outside input (anyone
with the SSH user's rights may edit it): a line not of the written shape is left out, never an
error, and a mark not of its shape is action text.

A journal starts with the guard's mark (``STARTED``, written when it makes the state directory),
so a reader can tell a journal whole since then from one cut (by the guard's own bound, a
bounded read, or a hand that emptied it): only the first starts with the mark. A host with no
journal at all was never written to (``read_journal`` prints ``ABSENT``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CYCLE_MARK = "cycle="
"""How the first word of a journal line's text names the cycle that made the write."""

_CYCLE_ID = re.compile(r"[0-9a-f]{1,32}")
"""A cycle id as the engine makes it (hex); anything else after the mark is action text."""

READ_MARK = "read="
"""How the word after a cycle's mark names the change-log id its snapshot saw every entry to."""

_READ_ID = re.compile(r"0|[1-9][0-9]{0,17}")
"""A change-log id (a bigint): digits, no sign, no leading zero, at most 18 of them."""

STARTED = "# started "
"""The first line of a journal the guard made: ``# started <time>``."""

ABSENT = "# absent"
"""What ``guard.read_journal`` prints for a host with no journal: nothing was written there."""

_STARTED = re.compile(r"# started (?P<time>\d{1,12}(?:\.\d{1,9})?)")

_LINE = re.compile(r"(?P<fence>\d{1,18}) (?P<time>\d{1,12}(?:\.\d{1,9})?) (?P<text>.*)")


@dataclass(frozen=True)
class JournalEntry:
    """One write the host accepted: its lease's fence, when (wall clock, the host's), what it
    was, and the cycle that made it (None: made outside a cycle, or before cycles were named)."""

    fence: int
    time: float
    action: str
    cycle_id: str | None = None
    read_through: int | None = None
    """The change-log id up to which the cycle's snapshot saw every entry (None: not told)."""


def journal_text(action: str, cycle_id: str | None, read_through: int | None = None) -> str:
    """What the guard writes after the fence and time: ``action``, named by its cycle and, for a
    cycle that read the change log, how far it read it (never without a cycle)."""
    if cycle_id is None:
        return action
    read = "" if read_through is None else f"{READ_MARK}{read_through} "
    return f"{CYCLE_MARK}{cycle_id} {read}{action}"


def parse_journal(text: str) -> list[JournalEntry]:
    """The entries of a journal (or of its tail), oldest first; lines of another shape (a line
    cut by a bounded read, an edit by hand) are left out."""
    entries = []
    for line in text.splitlines():
        match = _LINE.fullmatch(line)
        if match is None:
            continue
        action, cycle_id, read_through = match["text"], None, None
        cycle_id = _marked(action, CYCLE_MARK, _CYCLE_ID)
        if cycle_id is not None:
            action = action.partition(" ")[2]
            read = _marked(action, READ_MARK, _READ_ID)
            if read is not None:
                action, read_through = action.partition(" ")[2], int(read)
        entries.append(JournalEntry(int(match["fence"]), float(match["time"]), action, cycle_id,
                                    read_through))  # fmt: skip
    return entries


def _marked(text: str, mark: str, value: re.Pattern[str]) -> str | None:
    """The value ``text``'s first word gives after ``mark``, when it is of its shape."""
    first = text.partition(" ")[0]
    if first.startswith(mark) and value.fullmatch(first[len(mark) :]):
        return first[len(mark) :]
    return None


def journal_started(text: str) -> float | None:
    """When the journal ``text`` (read from its head or tail) started, if it is whole: the time
    on the guard's mark when that is its first line, 0.0 for ``ABSENT``. None when it was cut
    (its first line is a write: the guard's bound, a bounded read) or emptied by hand."""
    first = text.split("\n", 1)[0]
    if first == ABSENT:
        return 0.0
    match = _STARTED.fullmatch(first)
    return None if match is None else float(match["time"])
