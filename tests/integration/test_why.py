"""``playguard why`` end to end against the lab: a cycle that moves a Playground to a new head is
shown with its replica and fence and the writes its host accepted, joined on cycle id; after
Redis loses everything the host's writes still show, marked; hostile text from Redis and from the
host's journal is bounded and inert; an unreachable host is said, with what Redis had."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from redis import Redis as SyncRedis

from playguard_async.coordination.keys import last_cycle_key, pause_key, pins_key
from playguard_lab import GitOrigin
from tests.support.cli import LAB_SETTINGS, Playguard
from tests.support.playgrounds import compose_yaml
from tests.support.world import LabWorld


def cycle(playguard: Playguard) -> subprocess.CompletedProcess[str]:
    done = playguard("cycle", "edge-1", timeout=180.0)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def why(playguard: Playguard, *args: str) -> tuple[int, dict[str, Any], str]:
    """``why edge-1`` as JSON and as text: exit status, the JSON, the text."""
    as_json = playguard("why", "edge-1", *args, "--json")
    as_text = playguard("why", "edge-1", *args)
    assert as_json.returncode == as_text.returncode, as_json.stderr + as_text.stderr
    return as_json.returncode, json.loads(as_json.stdout), as_text.stdout


def journal_file(lab: LabWorld) -> Path:
    return Path(lab.data["marquees"][0]["state_dir"]) / "journal"


def test_why_joins_a_cycle_with_its_host_writes_and_keeps_them_after_redis_is_flushed(
    playguard: Playguard, lab: LabWorld, git_origin: GitOrigin, busybox_image: str,
    store: SyncRedis,
) -> None:  # fmt: skip
    cycle(playguard)
    branch = lab.data["playgrounds"][0]["branch"]
    git_origin.commit(branch, {"compose.yaml": compose_yaml(busybox_image, sleep="86401")}, "Move")
    cycle(playguard)
    moved = json.loads(store.get(last_cycle_key("edge-1")) or "{}")

    status, told, text = why(playguard, "web-main")

    assert status == 0, text
    cycles = [event for event in told["events"] if event["kind"] == "cycle"]
    assert cycles[-1]["cycle"] == moved["cycle"]
    assert (cycles[-1]["by"], cycles[-1]["fence"]) == (
        f"replica {moved['replica']}",
        moved["fence"],
    )
    written = [(write["action"].split(" ")[0], write["cycle"]) for write in cycles[-1]["writes"]]
    assert ("update", moved["cycle"]) in written
    assert ("compose", moved["cycle"]) in written
    assert f"cycle {moved['cycle']}  ok  replica {moved['replica']}  fence {moved['fence']}" in text
    assert "    host     " in text
    assert "update playground web-main from " in text

    store.flushall()
    status, told, text = why(playguard)

    assert status == 0, text
    events = told["events"]
    assert not [event for event in events if event["kind"] == "cycle"]
    orphans = [event for event in events if event["kind"] == "host write"]
    assert {event["by"] for event in orphans} == {"no cycle record"}
    assert any(
        event["cycle"] == moved["cycle"] and event["text"].startswith("update playground web-main")
        for event in orphans
    )
    assert f"no cycle record; cycle {moved['cycle']}" in text

    status, told, text = why(playguard, "web-gone")
    assert status == 0, text
    assert told["playground_wanted"] is False
    assert "playground web-gone is not in the desired state now" in text


def test_hostile_text_is_bounded_and_inert_and_an_unreachable_host_is_said(
    playguard: Playguard, lab: LabWorld, store: SyncRedis
) -> None:
    hostile = "\x1b]0;owned\x07\x1b[2J<script>alert(1)</script>" + "A" * 100_000
    journal = journal_file(lab)
    journal.parent.mkdir(parents=True, exist_ok=True)
    with journal.open("a", encoding="utf-8") as appended:
        appended.write(f"9 {time.time():.6f} cycle=abc123 {hostile}\n")
    now = time.time()
    pause = {"user": "eve", "host": hostile, "reason": hostile, "since": now, "until": now + 600}
    store.set(pause_key("edge-1"), json.dumps(pause))
    pin = {"revision": "last-good", "user": hostile, "host": "h", "reason": hostile, "since": now}
    store.hset(pins_key("edge-1"), "web-main", json.dumps(pin))

    status, told, text = why(playguard, "--since", "7d")

    assert status == 0, text
    assert "\x1b" not in text
    assert "\x07" not in text
    assert "\\x1b]0;owned\\x07" in text
    assert max(len(line) for line in text.splitlines()) < 1_500
    assert len(json.dumps(told)) < 5_000

    lab.data["marquees"][0]["port"] = 1  # nothing listens there
    playguard.configure(lab.data, **LAB_SETTINGS)
    status, told, text = why(playguard)

    assert status == 1
    assert told["host_read"] is False
    assert told["host_unread"]
    assert sorted(event["kind"] for event in told["events"]) == ["pause", "pin"]
    assert "host journal not read: " in text
