"""One vocabulary: the words the docs' Glossary defines are the words a cycle's causes use, in the
records phases write and in what every surface prints from them (history, status, describe,
why), and the fence reads one way everywhere."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest

from playguard_async.coordination.marquee_reads import LastCycle, MarqueeStatus, fence_shown
from playguard_async.coordination.pause import Pause
from playguard_async.coordination.pins import Pin
from playguard_async.cycle_record import NoticeKind, PlaygroundFinding
from playguard_async.engine.results import CycleResult
from playguard_async.kits.vocabulary import Cause, fence_words, is_bookkeeping
from playguard_async.operator import display
from playguard_async.operator.rollout import unknown_rollout
from playguard_async.phases.causes import (
    CHANGE_NOTICES,
    ChangeCause,
    change_cause,
    change_notices,
    put_down_cause,
)
from playguard_async.phases.holds import Hold
from playguard_async.remote.last_good import LastGood
from playguard_async.remote.revision import Revision
from playguard_async.service.notifications import causes_of, news_of

ROOT = Path(__file__).resolve().parents[2]
A, B = "81fc54f" + "0" * 33, "3491e24" + "1" * 33


def glossary() -> dict[str, str]:
    """The docs' Glossary (docs/concepts/index.md): each ``**term, term**`` with its ``: meaning``
    (a definition list), term -> meaning; a term defined twice is a failure."""
    page = (ROOT / "docs" / "concepts" / "index.md").read_text(encoding="utf-8")
    section = page.split("\n## Glossary\n", 1)[1].split("\n## ", 1)[0]
    defined: dict[str, str] = {}
    for terms, meaning in re.findall(r"^\*\*([^*]+)\*\*\n: (.+)$", section, re.MULTILINE):
        for term in terms.split(", "):
            assert term not in defined, f"{term} defined twice"
            defined[term] = meaning
    return defined


def test_the_glossary_defines_each_word_once() -> None:
    assert {
        "Marquee", "Playspec", "Playground", "AgentChat", "release", "drift", "rollback", "pin",
        "hold", "pause", "rollout", "fence",
    } <= set(glossary())  # fmt: skip


@pytest.mark.parametrize("cause", list(Cause))
def test_each_cause_is_a_glossary_word(cause: Cause) -> None:
    assert cause.word in glossary()


@pytest.mark.parametrize(("cause", "kind"), list(CHANGE_NOTICES.items()))
def test_a_change_is_recorded_under_its_glossary_word(cause: Cause, kind: NoticeKind) -> None:
    assert kind.value == cause.word
    [notice] = change_notices("web", ChangeCause(cause, "what moved"), ("app: missing",))
    assert (notice.kind, notice.subject) == (kind, "web")


GOOD = LastGood(inputs="in-1", compose="c-1", revision=Revision(A, {"app": "r@sha256:1"}, "e-1"))
PIN = Pin("web", A, "alice", "box", "demo", 0.0)
CASES: dict[str, tuple[dict[str, Any], Cause, str]] = {
    "a first deploy is a release": (
        {"good": None, "inputs": "in-2", "commit": B}, Cause.RELEASE, "first deploy at 3491e24"),
    "a new commit is a release": (
        {"good": GOOD, "inputs": "in-2", "commit": B}, Cause.RELEASE, "commit 81fc54f -> 3491e24"),
    "a new .env is a release": (
        {"good": GOOD, "inputs": "in-2", "commit": A, "files": {"env": "e-2", "compose": "c-1"}},
        Cause.RELEASE, "settings changed (.env)"),
    "an image behind a tag is a release": (
        {"good": GOOD, "inputs": "in-2", "commit": A, "files": {"env": "e-1", "compose": "c-1"}},
        Cause.RELEASE, "an image behind a tag or a setting moved"),
    "the host moved with inputs as verified is drift": (
        {"good": GOOD, "inputs": "in-1", "commit": A}, Cause.DRIFT, "app: missing; app: x exited"),
    "a pin moving it is a pin": (
        {"good": GOOD, "inputs": "in-2", "commit": A,
         "hold": Hold(A, None, "pinned", pin=PIN)}, Cause.PIN, PIN.shown()),
    "a rollout keeping it is a hold": (
        {"good": GOOD, "inputs": "in-2", "commit": A,
         "hold": Hold(A, None, "held by rollout web@main, wave 1 of 2", rollout=True)},
        Cause.HOLD, "held by rollout web@main, wave 1 of 2"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_change_is_named_for_what_moved(case: str) -> None:
    given, cause, detail = CASES[case]
    found = change_cause(
        given["good"], inputs=given["inputs"], files=given.get("files", {}),
        commit=given["commit"], hold=given.get("hold"), drift=["app: missing", "app: x exited"],
    )  # fmt: skip
    assert (found.cause, found.detail) == (cause, detail)
    assert str(found) == f"{cause.word}: {detail}"


@pytest.mark.parametrize(
    ("finding", "cause"),
    [
        (PlaygroundFinding("expired", ("expired at 2026-01-01",)), Cause.RELEASE),
        (PlaygroundFinding("stopped", ("state is stopped",)), Cause.RELEASE),
        (PlaygroundFinding("branch_gone", ("branch x is gone",)), Cause.RELEASE),
        (PlaygroundFinding("stopped", ("aborted",), held_by="aborted"), Cause.HOLD),
    ],
)
def test_a_playground_put_down_is_a_release_or_a_rollouts_hold(
    finding: PlaygroundFinding, cause: Cause
) -> None:
    assert put_down_cause(finding) == ChangeCause(cause, finding.drift[0])


def last_cycle(*notices: tuple[NoticeKind, str], dry_run: bool = False) -> LastCycle:
    record: dict[str, Any] = {
        **CycleResult(marquee="m1", cycle_id="c1", dry_run=dry_run).to_record(),
        "notices": {"reconcile_playgrounds": [
            {"kind": kind.value, "subject": "web-1", "detail": detail} for kind, detail in notices
        ]},
    }  # fmt: skip
    return LastCycle.from_record(record)


@pytest.mark.parametrize(
    ("notices", "dry_run", "said"),
    [
        ([(NoticeKind.RELEASE, "commit 81fc54f -> 3491e24")], False,
         ["released web-1: commit 81fc54f -> 3491e24"]),
        ([(NoticeKind.RELEASE, "first deploy at 3491e24")], True,
         ["release pending (dry run) web-1: first deploy at 3491e24"]),
        ([(NoticeKind.DRIFT, "app: missing")], False, ["fixed drift web-1: app: missing"]),
        ([(NoticeKind.DRIFT, "app: missing")], True,
         ["drift, not fixed (dry run) web-1: app: missing"]),
        ([(NoticeKind.PIN, "pinned at 81fc54f by alice")], False,
         ["applied pin web-1: pinned at 81fc54f by alice"]),
        ([(NoticeKind.HOLD, "held by rollout web@main")], False,
         ["applied hold web-1: held by rollout web@main"]),
    ],
)  # fmt: skip
def test_history_and_status_say_what_a_cycle_changed_in_the_glossarys_words(
    notices: list[tuple[NoticeKind, str]], dry_run: bool, said: list[str]
) -> None:
    last = last_cycle(*notices, dry_run=dry_run)
    assert last.change_lines() == said
    assert display.findings_text(last) == "; ".join(said)


def test_a_paused_marquee_with_nothing_found_reads_as_its_pause_alone() -> None:
    status = MarqueeStatus(
        "m1", True, None, last_cycle(), pause=Pause.taken_now("m1", "disk", 60.0)
    )
    out = io.StringIO()
    display.PipeConsole(width=display.PIPE_WIDTH, file=out).print(display.status_table([status], 0))
    [row] = out.getvalue().splitlines()[1:]
    assert "paused by " in row
    assert "none" not in row


@pytest.mark.parametrize(
    ("fence", "host", "unknown", "said"),
    [
        (20, 20, "x", "fence 20 (host 20)"),
        (0, 1, "x", "fence 0 (host 1)"),
        (20, None, "no cycle recorded", "fence 20 (host unknown: no cycle recorded)"),
        (None, None, "it accepted no fenced write yet",
         "fence ? (host unknown: it accepted no fenced write yet)"),
    ],
)  # fmt: skip
def test_the_fence_reads_one_way(
    fence: int | None, host: int | None, unknown: str, said: str
) -> None:
    assert fence_words(fence, host, host_unknown=unknown) == said


def test_a_marquees_fence_names_why_its_hosts_is_not_known() -> None:
    assert fence_shown(3, None) == "fence 3 (host unknown: no cycle recorded)"
    assert fence_shown(3, last_cycle()) == "fence 3 (host unknown: its last cycle wrote nothing)"


@pytest.mark.parametrize(
    ("action", "bookkeeping"),
    [
        ("keep compose answers", True),
        ("keep a copy of pins", True),
        ("compose up playground web (release: first deploy at 3491e24)", False),
        ("record the health of playground web", False),
    ],
)
def test_bookkeeping_on_the_host_is_told_apart_from_changes(action: str, bookkeeping: bool) -> None:
    assert is_bookkeeping(action) is bookkeeping


@pytest.mark.parametrize(("scope", "hint"), [("web", True), ("nothing@main", False), ("", True)])
def test_an_unknown_rollout_names_the_form_a_rollouts_name_has(scope: str, hint: bool) -> None:
    said = unknown_rollout(scope)
    assert said.startswith(f"no rollout {scope!r}")
    assert ("PLAYSPEC@BRANCH" in said) is hint


@pytest.mark.parametrize(
    ("kind", "told"),
    [
        ("release", ["release web-1: what moved"]),
        ("drift", ["drift web-1: what moved"]),
        ("pin", ["pin web-1: what moved"]),
        ("hold", ["hold web-1: what moved"]),
        ("rolled_back", ["rollback web-1: what moved"]),
        ("unhealthy", []),
        ("branch_gone", []),
    ],
)
def test_a_notification_says_why_in_the_glossarys_words(kind: str, told: list[str]) -> None:
    result = CycleResult(marquee="m1", cycle_id="c1", dry_run=True)
    result.notices = {"reconcile_playgrounds": [
        {"kind": kind, "subject": "web-1", "detail": "what moved"}]}  # fmt: skip
    assert causes_of(result) == told


@pytest.mark.parametrize(
    ("actions", "kinds", "health"),
    [
        ({"sync_git": ["would update"], "reconcile_playgrounds": ["would up"]}, ["release"],
         "release_pending"),
        ({"pull_images": ["would pull"], "reconcile_playgrounds": ["would up"]}, ["release"],
         "release_pending"),
        ({"reconcile_playgrounds": ["would up"]}, ["drift"], "drifted"),
        ({"reconcile_playgrounds": ["would up", "would up"]}, ["release", "drift"], "drifted"),
        ({"reconcile_playgrounds": ["would up"]}, ["rolled_back"], "drifted"),
        ({"sweep_orphans": ["would remove"], "reconcile_playgrounds": ["would up"]}, ["release"],
         "drifted"),
        ({"sweep_orphans": ["would remove"]}, [], "drifted"),
        ({}, ["release"], "ok"),
    ],
)  # fmt: skip
def test_a_pending_release_reads_as_a_release_not_as_drift(
    actions: dict[str, list[str]], kinds: list[str], health: str
) -> None:
    """A detect cycle whose every change is a release (the desired state moved) says
    ``release_pending``; drift, a rollback or a change no release explains keeps ``drifted``."""
    result = CycleResult(marquee="m1", cycle_id="c1", dry_run=True, actions=actions)
    result.notices = {"reconcile_playgrounds": [
        {"kind": kind, "subject": "web-1", "detail": "what moved"} for kind in kinds]}  # fmt: skip
    assert news_of(result) == (health, None)
