"""The host's journal of accepted writes: the one shape of its line, and the one way it is read.

The fence guard (``remote.guard``) appends ``<fence> <time> <text>`` for every write it lets
through, just before it runs it. A write made by a cycle starts its text with
``cycle=<cycle id>``, so what the host accepted joins the cycle record that meant it
(``playguard why``); a write made outside a cycle, and every line written before cycles were
named, has the text alone, and reads with no cycle. The journal is outside input (anyone with the
SSH user's rights may edit it): a line not of the written shape is left out, never an error.

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


def journal_text(action: str, cycle_id: str | None) -> str:
    """What the guard writes after the fence and time: ``action``, named by its cycle."""
    return action if cycle_id is None else f"{CYCLE_MARK}{cycle_id} {action}"


def parse_journal(text: str) -> list[JournalEntry]:
    """The entries of a journal (or of its tail), oldest first; lines of another shape (a line
    cut by a bounded read, an edit by hand) are left out."""
    entries = []
    for line in text.splitlines():
        match = _LINE.fullmatch(line)
        if match is None:
            continue
        action, cycle_id = match["text"], None
        first, _, rest = action.partition(" ")
        if first.startswith(CYCLE_MARK) and _CYCLE_ID.fullmatch(first[len(CYCLE_MARK) :]):
            action, cycle_id = rest, first[len(CYCLE_MARK) :]
        entries.append(JournalEntry(int(match["fence"]), float(match["time"]), action, cycle_id))
    return entries


def journal_started(text: str) -> float | None:
    """When the journal ``text`` (read from its head or tail) started, if it is whole: the time
    on the guard's mark when that is its first line, 0.0 for ``ABSENT``. None when it was cut
    (its first line is a write: the guard's bound, a bounded read) or emptied by hand."""
    first = text.split("\n", 1)[0]
    if first == ABSENT:
        return 0.0
    match = _STARTED.fullmatch(first)
    return None if match is None else float(match["time"])
