"""``describe``, ``history`` and ``status --watch``, run as real processes against the lab Redis.

The Marquees here run the witness phases (they never connect anywhere), so each cycle is quick
and what the commands show is what ``playguard cycle`` recorded.
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import time

import pytest
from redis import Redis as SyncRedis

from playguard_async.coordination.keys import (
    cycle_history_key,
    fence_key,
    last_cycle_key,
    marquee_lock_name,
)
from tests.support.cli import Playguard, assert_one_line_error, hold_lock
from tests.support.daemon import marquee_entry

pytestmark = pytest.mark.integration


@pytest.fixture
def two_cycles(playguard: Playguard) -> Playguard:
    playguard.configure({"marquees": [marquee_entry("m1"), marquee_entry("m2")]})
    for _ in range(2):
        done = playguard("cycle", "m1")
        assert done.returncode == 0, done.stdout + done.stderr
    return playguard


def test_describe_tells_the_lock_the_fences_the_phases_and_the_recent_cycles(
    two_cycles: Playguard, store: SyncRedis
) -> None:
    hold_lock(store_url(store), "m1", replica="holder-elsewhere")
    told = two_cycles("describe", "m1", "--json")
    assert told.returncode == 0, told.stderr
    story = json.loads(told.stdout)
    assert story["lock"]["replica"] == "holder-elsewhere"
    assert story["fence_counter"] == 3  # two cycles, then the lock held now
    assert story["last"]["outcome"] == "ok"
    assert [step["phase"] for step in story["phases"]] == ["first", "second"]
    assert all(step["seconds"] is not None for step in story["phases"])
    assert [cycle["fence"] for cycle in story["history"]] == [2, 1]
    assert (story["still_wrong"], story["fixed"]) == ([], [])

    text = two_cycles("describe", "m1")
    assert text.returncode == 0, text.stderr
    assert "holder-elsewhere" in text.stdout
    assert "  fence 3 (host unknown: its last cycle wrote nothing)" in text.stdout
    assert "    first: " in text.stdout
    assert "recent cycles (2)" in text.stdout


def test_describe_and_history_tell_a_cycles_own_time_apart_from_its_wait(
    two_cycles: Playguard, store: SyncRedis
) -> None:
    """A cycle of 1.8 s that waited 51.8 s for its start offset and a slot reads as 1.8 s, with
    the wait beside it, never as 53.6 s."""
    record = json.loads(store.get(last_cycle_key("m1")) or b"")
    record.update(duration=1.8, waited=51.8)
    store.set(last_cycle_key("m1"), json.dumps(record))
    store.lpush(cycle_history_key("m1"), json.dumps(record))
    told = two_cycles("describe", "m1")
    assert told.returncode == 0, told.stderr
    assert "  took 1.8 s, after waiting 51.8 s to start\n" in told.stdout
    assert "53.6" not in told.stdout
    history = two_cycles("history", "m1", "--limit", "1")
    assert history.returncode == 0, history.stderr
    header, row = history.stdout.splitlines()[:2]
    assert header.split()[4:6] == ["DURATION", "WAITED"]
    assert "1.8 s" in row
    assert "51.8 s" in row


def test_describe_and_status_tell_a_rollback_and_each_playgrounds_last_good_state(
    two_cycles: Playguard, store: SyncRedis
) -> None:
    """What the health gate wrote into the record: the rollback's words in describe's still
    wrong and in status's findings, the last good state in describe, host text shown clean."""
    good = "app=127.0.0.1:5000/shop@sha256:" + "a" * 64
    words = f"rolled back to {good} because app: unhealthy: \x1b[31mboom"
    record = json.loads(store.get(last_cycle_key("m1")) or b"")
    record.update(
        outcome="unhealthy",
        phase="reconcile_playgrounds",
        reason="playground web-main rolled back to its last good state",
        findings={"reconcile_playgrounds": {"playgrounds": {"web-main": {"last_good": good}}}},
        notices={
            "reconcile_playgrounds": [
                {"kind": "rolled_back", "subject": "web-main", "detail": words}
            ]
        },
    )
    store.set(last_cycle_key("m1"), json.dumps(record))

    told = json.loads(two_cycles("describe", "m1", "--json").stdout)
    shown = two_cycles("describe", "m1").stdout
    status = two_cycles("status").stdout

    assert told["last_good"] == {"web-main": good}
    assert f"web-main: {words}" in told["still_wrong"]
    assert f"web-main: {good}" in shown
    assert "\x1b" not in shown
    assert "rolled back to" in shown
    assert "\x1b" not in status
    assert "web-main: rolled back to" in " ".join(status.split())


def test_history_lists_the_records_newest_first_within_the_limit(two_cycles: Playguard) -> None:
    done = two_cycles("history", "m1", "--json", "--limit", "1")
    assert done.returncode == 0, done.stderr
    [cycle] = json.loads(done.stdout)["cycles"]
    assert cycle["fence"] == 2
    assert cycle["replica"]
    never = two_cycles("history", "m2")
    assert (never.returncode, never.stdout.strip()) == (0, "m2: no cycle recorded")


@pytest.mark.parametrize("command", ["describe", "history"])
def test_a_marquee_not_in_the_inventory_is_one_line_naming_the_file_and_exit_1(
    two_cycles: Playguard, command: str
) -> None:
    done = two_cycles(command, "nosuch")
    assert done.returncode == 1
    assert_one_line_error(done, f"no Marquee named 'nosuch' in {two_cycles.runner.inventory}")


GARBAGE = [b"not json", b"[1, 2]", b'{"outcome": 5}', b"\xff\xfe", b"{" * 5000, b'{"cycle": "x"}']


def test_records_this_project_did_not_write_read_as_unknown(
    two_cycles: Playguard, store: SyncRedis
) -> None:
    store.lpush(cycle_history_key("m1"), *GARBAGE)
    store.set(fence_key(marquee_lock_name("m1")), b"9" * 5000)
    for command in ("history", "describe"):
        done = two_cycles(command, "m1", "--json", "--limit", "20")
        assert done.returncode == 0, done.stderr
    history = json.loads(two_cycles("history", "m1", "--json", "--limit", "20").stdout)["cycles"]
    assert [cycle["outcome"] for cycle in history] == ["unknown"] * len(GARBAGE) + ["ok", "ok"]
    assert json.loads(two_cycles("describe", "m1", "--json").stdout)["fence_counter"] is None
    assert two_cycles("history", "m1", "--limit", "20").returncode == 0


def test_status_watch_redraws_until_interrupted(two_cycles: Playguard) -> None:
    watching = two_cycles.start("status", "--watch", "--interval", "0.5", phase_seconds=0.1)
    deadline = time.monotonic() + 30
    seen = ""
    assert watching.stdout is not None
    while seen.count("MARQUEE") < 2:
        assert time.monotonic() < deadline, f"no second table: {seen!r}"
        seen += watching.stdout.readline()
    watching.send_signal(signal.SIGINT)
    _, err = watching.communicate(timeout=10)
    assert watching.returncode == 0, err
    assert "Traceback" not in err
    refused = two_cycles("status", "--watch", "--json")
    assert refused.returncode == 2


CLEAR_SCREEN = "\x1b[2J"
LINE_UP = "\x1b[1A"
ERASE_LINE = "\x1b[2K"


def read_terminal(fd: int, until: str, count: int, deadline: float) -> str:
    """What the program wrote to its terminal, read until ``until`` appears ``count`` times."""
    seen = ""
    while seen.count(until) < count:
        assert time.monotonic() < deadline, f"{until!r} not seen {count} times: {seen[-2000:]!r}"
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            seen += os.read(fd, 65536).decode(errors="replace")
    return seen


@pytest.mark.parametrize("interval", ["0.5", "3600"])
def test_status_watch_on_a_terminal_draws_at_once_then_redraws_in_place(
    two_cycles: Playguard, interval: str
) -> None:
    """On a terminal the first table is there at once (not after an interval of blank screen),
    and each refresh is drawn over it (cursor up, erase line), not scrolled below it."""
    controller, terminal = pty.openpty()
    env = two_cycles.runner.environment(0.1) | {"TERM": "xterm", "COLUMNS": "160", "LINES": "50"}
    watching = subprocess.Popen(
        two_cycles.argv(("status", "--watch", "--interval", interval)),
        stdin=terminal, stdout=terminal, stderr=subprocess.PIPE, env=env,
        cwd=two_cycles.runner.workdir, start_new_session=True, text=True,
    )  # fmt: skip
    os.close(terminal)
    try:
        deadline = time.monotonic() + 30
        drawn = read_terminal(controller, "MARQUEE", 1, deadline)
        assert drawn.count(CLEAR_SCREEN) == 1
        assert drawn.index(CLEAR_SCREEN) < drawn.index("MARQUEE"), "cleared, then drawn at once"
        if interval == "0.5":
            drawn += read_terminal(controller, "MARQUEE", 3 - drawn.count("MARQUEE"), deadline)
            redraw = drawn[drawn.index("MARQUEE") :]
            assert LINE_UP in redraw, "drawn over the last table"
            assert ERASE_LINE in redraw
            assert drawn.count(CLEAR_SCREEN) == 1, "the screen is cleared once, at the start"
            assert "m1" in redraw[redraw.index(LINE_UP) :]
        watching.send_signal(signal.SIGINT)
        _, err = watching.communicate(timeout=10)
    finally:
        if watching.poll() is None:
            watching.kill()
            watching.wait()
        os.close(controller)
    assert watching.returncode == 0, err
    assert "Traceback" not in err


def store_url(store: SyncRedis) -> str:
    kwargs = store.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/0"


def test_cycle_json_is_one_object_with_the_record_and_a_holder_when_locked(
    two_cycles: Playguard, store: SyncRedis
) -> None:
    done = two_cycles("cycle", "m2", "--json")
    assert done.returncode == 0, done.stderr
    ran = json.loads(done.stdout)
    assert (ran["cycle"]["outcome"], ran["cycle"]["fence"], ran["holder"]) == ("ok", 1, None)
    assert list(ran["cycle"]["durations"]) == ["first", "second"]
    hold_lock(store_url(store), "m2", replica="holder-elsewhere")
    locked = two_cycles("cycle", "m2", "--json")
    assert locked.returncode == 3
    refused = json.loads(locked.stdout)
    assert refused["cycle"]["outcome"] == "locked"
    assert refused["holder"]["replica"] == "holder-elsewhere"
