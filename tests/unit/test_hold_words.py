"""Who holds a Playground, in the same words on every surface: ``pinned at <commit> by <who>``
for an operator's pin, ``held by rollout <scope>, wave k of n`` for a rollout that has not
admitted it, from the finding a cycle records to ``status``, ``describe`` and the web view."""

from __future__ import annotations

import io
import time
from dataclasses import replace
from typing import Any

import pytest
from rich.console import Console

from playguard_async.coordination.marquee_reads import (
    LastCycle,
    MarqueeStatus,
    playground_revisions,
)
from playguard_async.coordination.pins import Pin
from playguard_async.cycle_record import PlaygroundFinding, RevisionRecord
from playguard_async.operator.display import status_table
from playguard_async.phases.holds import Hold
from tests.support.web_view import picture_of, serving, view_of
from tests.unit.test_web_view import hostile_fleet, hostile_story

COMMIT = "0123456789ab" + "c" * 28
PIN = Pin("web", COMMIT, "ann", "desk", "the demo", 0.0)
ROLLOUT = "held by rollout web@main, wave 2 of 2 (wave 1 runs)"
REVISION: RevisionRecord = {"commit": COMMIT, "images": {}, "env": "-", "override": "d" * 64}

# (hold, the words every surface shows, whether the finding says it is pinned)
HOLDS = [
    (Hold(COMMIT, None, PIN.describe(), PIN), "pinned at 0123456789ab by ann@desk", True),
    (
        Hold(COMMIT, None, PIN.describe(), replace(PIN, revision="last-good")),
        "pinned at last-good by ann@desk",
        True,
    ),
    (Hold(COMMIT, None, ROLLOUT, rollout=True), ROLLOUT, False),
]


def record_of(hold: Hold, *, revision: bool = True) -> dict[str, Any]:
    """A stored cycle record whose reconcile_playgrounds finding holds ``web`` as a cycle
    writes it (``running_playground``)."""
    finding = PlaygroundFinding(
        "running",
        revision=REVISION if revision else None,
        pinned=None if hold.pin is None else hold.why,
        held_by=hold.shown,
    )
    return {"findings": {"reconcile_playgrounds": {"playgrounds": {"web": finding.to_json()}}}}


def status_row(record: dict[str, Any]) -> str:
    last = LastCycle(
        "c1", "ok", None, None, 3, 3, time.time(), 1.0, 0, {}, {}, []
    )  # fmt: skip
    status = MarqueeStatus("m-0", True, None, last, revisions=playground_revisions(record))
    out = io.StringIO()
    Console(file=out, width=400, color_system=None).print(status_table([status], time.time()))
    return " ".join(out.getvalue().split())


@pytest.mark.parametrize(("hold", "words", "pinned"), HOLDS)
@pytest.mark.parametrize("revision", [True, False])
def test_status_and_describe_name_who_holds_a_playground(
    hold: Hold, words: str, pinned: bool, revision: bool
) -> None:
    record = record_of(hold, revision=revision)
    [told] = playground_revisions(record).values()

    assert hold.shown == words
    assert f"web {words}" in status_row(record)
    assert "?" not in status_row(record)
    assert told.short().endswith(f"; {words}")
    assert told.to_json()["held_by"] == words
    assert (told.pinned is not None) is pinned


def test_a_record_from_before_held_by_shows_its_pinned_words() -> None:
    finding = {"state": "running", "drift": [], "actions": [], "revision": REVISION,
               "pinned": ROLLOUT}  # fmt: skip
    record = {"findings": {"reconcile_playgrounds": {"playgrounds": {"web": finding}}}}

    assert f"web {ROLLOUT}" in status_row(record)


@pytest.mark.parametrize(("hold", "words", "pinned"), HOLDS)
async def test_the_marquee_page_names_who_holds_each_playground(
    hold: Hold, words: str, pinned: bool
) -> None:
    story = replace(hostile_story(), revisions=playground_revisions(record_of(hold)))
    async with serving(view_of(picture_of(hostile_fleet(), story))) as served:
        html = await (await served.get("/marquee/m-0")).text()

    assert "<th>Held</th>" in html
    assert f"<td>{words}</td>" in html
