"""The inputs of ``playguard why`` without servers: each desired-state change joined to the first
cycle that acted after it, a YAML file's version (digest, git commit) and the events its new
versions make, and the kept operator actions bounded in bytes and inert."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
from pathlib import Path

import pytest

from playguard_async.coordination.operator_actions import (
    ENTRY_MAX,
    REASON_MAX,
    WHO_MAX,
    OperatorAction,
    acting_user,
)
from playguard_async.cycle_record import DesiredVersion, describe_version, desired_version
from playguard_async.desired_state.file_version import file_version, git_head
from playguard_async.desired_state.postgres.change_log import ChangeEntry
from playguard_async.operator.display import timeline_lines
from playguard_async.operator.why import (
    Event,
    Sources,
    Timeline,
    change_event,
    including_cycles,
    joined,
    version_events,
)

HOSTILE = "\x1b]0;owned\x07<script>alert(1)</script>\u202e" + "A" * 1_000_000


def cycle(cycle_id: str, at: float) -> Event:
    return Event(at, "cycle", f"cycle {cycle_id} ok", "replica r1", cycle_id, 3, "ok",
                 actions=("update playground web from a to b",))  # fmt: skip


@pytest.mark.parametrize(
    ("ids", "cycles", "included_in", "or_before"),
    [
        pytest.param(
            [10],
            [
                ("c1", 5.0, {"change": 9}),
                ("c2", 12.0, {"change": 10}),
                ("c3", 20.0, {"change": 11}),
            ],
            ["c2"],
            [None],
            id="the first cycle that read it",
        ),
        pytest.param(
            [10, 11],
            [("c1", 5.0, {"change": 9}), ("c2", 6.0, {"change": 11})],
            ["c2", "c2"],
            [None, None],
            id="two changes, one cycle",
        ),
        pytest.param(
            [10],
            [
                ("c1", 5.0, {"change": 9}),
                ("c2", 6.0, {"change": 12, "unseen": [10]}),
                ("c3", 7.0, {"change": 12}),
            ],
            ["c3"],
            [None],
            id="not the cycle whose snapshot did not see it",
        ),
        pytest.param(
            [10],
            [("c1", 5.0, None), ("c2", 6.0, {"change": 10})],
            [None],
            ["c2"],
            id="a record before that read no log tells nothing",
        ),
        pytest.param(
            [10],
            [("c3", 20.0, {"change": 12}), ("c4", 30.0, {"change": 12})],
            [None],
            ["c3"],
            id="its first reader no longer recorded",
        ),
        pytest.param([30], [("c1", 5.0, {"change": 9})], [None], [None], id="no reader yet"),
    ],
)
def test_a_change_joins_the_first_cycle_that_read_it_never_by_time(
    ids: list[int], cycles: list[tuple[str, float, DesiredVersion | None]],
    included_in: list[str | None], or_before: list[str | None],
) -> None:  # fmt: skip
    changes = [Event(0.0, "change", f"change {n}: playguard.playgrounds web: branch changed",
                     "alice", change_id=n) for n in ids]  # fmt: skip

    joined_inputs, joined_cycles = including_cycles(
        changes, [(cycle(cycle_id, at), read) for cycle_id, at, read in cycles]
    )

    assert [event.included_in for event in joined_inputs] == included_in
    assert [event.read_by_or_before for event in joined_inputs] == or_before
    including = {c.cycle_id: len(c.includes) for c in joined_cycles if c.includes}
    assert including == {name: included_in.count(name) for name in set(included_in) if name}


@pytest.mark.parametrize(
    ("entry", "text"),
    [
        (
            ChangeEntry(7, 1.0, "playguard.playgrounds", "web", ("branch",), "UPDATE", "alice"),
            "change 7: playguard.playgrounds web: branch changed",
        ),
        (
            ChangeEntry(8, 1.0, "public.marquees", "edge-1", ("host", "name"), "INSERT", "app"),
            "change 8: public.marquees edge-1: inserted",
        ),
        (
            ChangeEntry(9, 1.0, "playguard.playgrounds", None, ("name",), "DELETE", "app"),
            "change 9: playguard.playgrounds ?: deleted",
        ),
    ],
)
def test_a_change_log_entry_reads_as_relation_key_columns_and_actor(
    entry: ChangeEntry, text: str
) -> None:
    event = change_event(entry)

    assert (event.kind, event.text, event.by, event.at) == ("change", text, entry.actor, 1.0)


def test_a_hostile_actor_is_bounded_and_shown_inert() -> None:
    event = change_event(ChangeEntry(1, 1.0, "r", "k", ("c",), "UPDATE", HOSTILE))
    lines = timeline_lines(Timeline("m1", None, 0.0, [event]))

    assert len(event.by) == 200
    assert not any(mark in "\n".join(lines) for mark in ("\x1b", "\x07"))
    assert max(len(line) for line in lines) < 1_000


def record(cycle_id: str, at: float, desired: object) -> dict[str, object]:
    return {"marquee": "m1", "cycle": cycle_id, "outcome": "ok", "finished_at": at + 1,
            "duration": 1.0, "desired": desired}  # fmt: skip


V1 = {"digest": "aaaaaaaaaaaa", "mtime": 50.0}
V2 = {"digest": "bbbbbbbbbbbb", "mtime": 150.0, "commit": "c" * 40}


@pytest.mark.parametrize(
    ("desired", "events"),
    [
        pytest.param([V1, V1, V1], [], id="unchanged: nothing"),
        pytest.param(
            [V1, V2, V2],
            [(150.0, "file sha256 bbbbbbbbbbbb (commit cccccccccccc)")],
            id="a new version, at its mtime",
        ),
        pytest.param([V2], [], id="the first record kept tells no change"),
        pytest.param(
            [V1, None, V2],
            [(150.0, "file sha256 bbbbbbbbbbbb (commit cccccccccccc)")],
            id="a record without a version is passed over",
        ),
        pytest.param([{"change": 4}, {"change": 9}], [], id="PostgreSQL's: its change log tells"),
        pytest.param([V1, {"digest": "not hex!"}], [], id="a version of another shape: none"),
    ],
)
def test_a_yaml_files_new_version_is_an_event(
    desired: list[object], events: list[tuple[float, str]]
) -> None:
    records = [record(f"c{n}", 100.0 * n, value) for n, value in enumerate(desired)]

    made = version_events(records)

    assert [(event.at, event.text.removeprefix("desired state file changed: "))
            for event in made] == events  # fmt: skip
    assert {event.kind for event in made} <= {"desired state"}
    assert [event.included_in for event in made] == [f"c{desired.index(V2)}" for _ in made], (
        "included in the first cycle whose record names the new version"
    )


def git(directory: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(directory), *args], check=True, capture_output=True,
                          text=True, env={"GIT_CONFIG_GLOBAL": "/dev/null", "HOME": "/nonexistent",
                                          "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                                          "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
                                          "PATH": "/usr/bin:/bin"})  # fmt: skip
    return done.stdout.strip()


def test_a_files_version_names_its_digest_mtime_and_git_head(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "config").mkdir(parents=True)
    assert git_head(repo / "config") is None, "outside a work tree: no commit"
    git(repo, "init", "-q", "-b", "main")
    (repo / "config" / "inv.yaml").write_text("marquees: []\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "one")
    head = git(repo, "rev-parse", "HEAD")

    version = file_version(repo / "config" / "inv.yaml", "ab" * 32, 1_700_000_000_500_000_000)

    assert version == {"digest": "ab" * 6, "mtime": 1_700_000_000.5, "commit": head}
    assert describe_version(version) == f"file sha256 {'ab' * 6} (commit {head[:12]})"
    git(repo, "pack-refs", "--all")
    assert git_head(repo / "config") == head, "a ref in packed-refs"
    git(repo, "checkout", "-q", "--detach")
    assert git_head(repo) == head, "a detached HEAD"
    git(repo, "worktree", "add", "-q", str(tmp_path / "linked"), "-b", "other")
    assert git_head(tmp_path / "linked" / "config") == head, "a linked work tree"
    (repo / ".git" / "HEAD").write_text("ref: ../../etc/passwd\n")
    assert git_head(repo) is None, "a HEAD of another shape"


@pytest.mark.parametrize(
    ("value", "version"),
    [
        ({"change": 12}, {"change": 12}),
        ({"change": 12, "unseen": [11, 9]}, {"change": 12, "unseen": [9, 11]}),
        ({"change": 12, "unseen": [12]}, None),
        ({"change": 12, "unseen": list(range(1, 12)) * 3}, None),
        ({"change": 12, "unseen": "9"}, None),
        ({"digest": "ab" * 32, "mtime": 5}, {"digest": "ab" * 6, "mtime": 5.0}),
        ({"change": True}, None),
        ({"commit": "xyz"}, None),
        ({"mtime": float("nan")}, None),
        ([], None),
        ({}, None),
    ],
)
def test_a_version_read_back_keeps_only_its_shape(value: object, version: object) -> None:
    assert desired_version(value) == version


@pytest.mark.parametrize(
    "action",
    [
        OperatorAction(1.0, "m1", "pause", HOSTILE, HOSTILE, HOSTILE),
        OperatorAction(1.0, "m1", HOSTILE, "alice@ops-1", "disk full", "until 2"),
        OperatorAction(1.0, "*", "rollout abort", "a@b", "\x00" * 10_000, "web@main"),
        OperatorAction(
            1.0,
            "m1",
            "\U0001f600" * 9_000,
            "\U0001f600" * 9_000,
            "\U0001f600" * 9_000,
            "\U0001f600" * 9_000,
        ),
    ],
)
def test_a_kept_action_is_bounded_in_bytes_and_reads_back_inert(action: OperatorAction) -> None:
    encoded = action.encode()
    back = OperatorAction.parse(action.scope, encoded)

    assert len(encoded.encode()) <= ENTRY_MAX
    assert back is not None
    assert len(back.by) <= WHO_MAX
    assert len(back.reason) <= REASON_MAX
    event = Event(back.at, "pause", back.reason, back.by)
    text = "\n".join(timeline_lines(Timeline("m1", None, 0.0, [event])))
    assert not any(mark in text for mark in ("\x1b", "\x07", "\x00"))


@pytest.mark.parametrize(
    "raw",
    [
        "not json",
        "[]",
        json.dumps({"at": "x", "action": "a", "by": "b", "reason": "", "target": ""}),
        json.dumps({"at": 1, "action": 5, "by": "b", "reason": "", "target": ""}),
        json.dumps({"at": True, "action": "a", "by": "b", "reason": "", "target": ""}),
        b"\xff",
    ],
)
def test_an_entry_not_of_the_written_shape_is_left_out(raw: str | bytes) -> None:
    assert OperatorAction.parse("m1", raw) is None


@pytest.mark.parametrize(
    ("findings", "causes"),
    [
        pytest.param(
            {"reconcile_playgrounds": {"playgrounds": {"web": {
                "state": "running", "drift": ["app: missing"], "actions": ["compose up"],
                "rollback": "rolled back to app=r@sha256:aa because unhealthy",
                "pinned": "held at last-good by alice: canary"}}}},
            ["playground web: rollback: rolled back to app=r@sha256:aa because unhealthy",
             "playground web: pin: held at last-good by alice: canary"],
            id="a playground's rollback and pin (its drift is told by its notices)",
        ),
        pytest.param(
            {"pull_images": {"images": {
                "r/shop:1": {"state": "pulled", "digest": "sha256:" + "b" * 64},
                "r/db:2": {"state": "unchanged", "digest": "sha256:" + "c" * 64}}}},
            ["image r/shop:1: its tag now names bbbbbbbbbbbb (pulled)"],
            id="an image whose tag moved, not one that did not",
        ),
        pytest.param(
            {"reconcile_playgrounds": {"rollouts": {"shop@main": {
                "status": "running", "wave": 2, "waves": 4, "release": "abc", "held": False,
                "failed_here": False, "halted_here": None}}}},
            ["rollout shop@main: wave 2 of 4, running"],
            id="a rollout wave",
        ),
        pytest.param({"pull_images": {"images": ["not", "a", "map"]}, "x": 5}, [],
                     id="findings of another shape"),
    ],
)  # fmt: skip
def test_a_cycle_names_the_causes_its_phases_found(
    findings: dict[str, object], causes: list[str]
) -> None:
    recorded = {"marquee": "m1", "cycle": "c1", "outcome": "ok", "finished_at": 10.0,
                "duration": 1.0, "actions": {"sync_git": ["x"]}, "findings": findings}  # fmt: skip

    (event,) = joined(Sources(records=[recorded]), extra=(), playground=None, since=0.0)

    assert list(event.causes) == causes


@pytest.mark.parametrize(
    ("notices", "causes"),
    [
        ([("release", "web", "commit 81fc54f -> 3491e24")],
         ["playground web: release: commit 81fc54f -> 3491e24"]),
        ([("release", "web", "first deploy at 3491e24")],
         ["playground web: release: first deploy at 3491e24"]),
        ([("drift", "web", "app: missing"), ("drift", "web", "app: web-app-1 exited")],
         ["playground web: drift: app: missing", "playground web: drift: app: web-app-1 exited"]),
        ([("pin", "web", "pinned at 3491e24 by alice")],
         ["playground web: pin: pinned at 3491e24 by alice"]),
        ([("hold", "web", "held by rollout web@main, wave 1 of 2")],
         ["playground web: hold: held by rollout web@main, wave 1 of 2"]),
        ([("unhealthy", "web", "app: exited")], []),
        ([("no such kind", "web", "x")], []),
    ],
)  # fmt: skip
def test_a_cycle_names_why_it_changed_a_playground_in_the_glossarys_words(
    notices: list[tuple[str, str, str]], causes: list[str]
) -> None:
    finding = {"state": "running", "drift": ["app: missing"], "actions": ["compose up"]}
    recorded = {"marquee": "m1", "cycle": "c1", "outcome": "ok", "finished_at": 10.0,
                "duration": 1.0, "actions": {"reconcile_playgrounds": ["compose up"]},
                "findings": {"reconcile_playgrounds": {"playgrounds": {"web": finding}}},
                "notices": {"reconcile_playgrounds": [
                    {"kind": kind, "subject": subject, "detail": detail}
                    for kind, subject, detail in notices]}}  # fmt: skip

    (event,) = joined(Sources(records=[recorded]), extra=(), playground=None, since=0.0)

    assert list(event.causes) == causes


@pytest.mark.parametrize("variable", ["USER", "LOGNAME", "LNAME", "USERNAME"])
def test_the_operators_name_is_the_oss_for_the_uid_not_the_environments(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "cto@example.com")

    assert acting_user() == pwd.getpwuid(os.getuid()).pw_name
