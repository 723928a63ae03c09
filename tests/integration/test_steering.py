"""Steering the fleet from the command line, as real processes against the lab: ``pause`` and
``resume`` (kept in the lab's Redis, honoured by a cycle running in another process), a Marquee's
``mode``, and ``plan`` with its exit statuses."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
from pathlib import Path

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis
from structlog.testing import capture_logs

from playguard_async.coordination.keys import (
    FLEET_PAUSE_KEY,
    marquee_lock_key,
    pause_key,
)
from playguard_async.coordination.pause import (
    FLEET,
    REASON_MAX,
    Pause,
    lift_pause,
    take_pause,
)
from playguard_async.coordination.records import CycleRecords
from playguard_async.desired_state.model import Inventory
from playguard_async.engine.results import Outcome
from playguard_async.service.notifications import ChangeNotifier
from playguard_lab import RedisServer, SshServer
from playguard_lab.process import free_port
from tests.integration.test_rollout_desk import answering
from tests.support.cli import EXIT_NOT_OK, LAB_SETTINGS, Playguard, assert_one_line_error
from tests.support.daemon import marquee_entry, wait_for, witness_lines
from tests.support.engine import EngineHarness, ScriptedPhase, inventory_of, settings_for
from tests.support.fencing import journal
from tests.support.probes import http_get
from tests.support.state import StaticState
from tests.support.world import LabWorld, ssh_marquee

pytestmark = pytest.mark.integration

EXIT_CHANGES = 2


def pause_keys(store: SyncRedis) -> list[bytes]:
    return sorted(store.scan_iter(match="playguard:*pause*"))


def test_pause_and_resume_are_told_by_status_describe_and_a_cycle(
    playguard: Playguard, store: SyncRedis
) -> None:
    playguard.configure({"marquees": [marquee_entry("m1"), marquee_entry("m2")]})

    taken = playguard("pause", "m1", "--for", "1h", "--reason", "incident 42: disk full")
    # m1's host cannot be reached (marquee_entry): the pause stands in Redis, the host is named.
    assert taken.returncode == EXIT_NOT_OK, taken.stderr
    assert re.fullmatch(
        r"paused by \S+@\S+: incident 42: disk full \(until \S+\)\n"
        r"  on the hosts: 0 of 1 Marquees carry it\n  m1: not yet: unreachable: .*\n"
        r"  the pause in Redis stands: those read it there at their next cycle\n",
        taken.stdout,
    ), taken.stdout
    ttl = store.pttl(pause_key("m1"))
    assert 3_590_000 < ttl <= 3_600_000, "it expires by itself, after --for"

    statuses = {m["name"]: m for m in json.loads(playguard("status", "--json").stdout)["marquees"]}
    assert statuses["m1"]["paused"]["reason"] == "incident 42: disk full"
    assert statuses["m1"]["paused"]["known"] is True
    assert statuses["m2"]["paused"] is None
    assert re.search(r"^ *m1 \(paused\) .*paused by ", playguard("status").stdout, re.MULTILINE)
    described = playguard("describe", "m1")
    assert "  paused: paused by " in described.stdout, described.stdout

    cycle = playguard("cycle", "m1")
    assert cycle.returncode == EXIT_NOT_OK, cycle.stdout + cycle.stderr
    assert "m1: paused: paused by " in cycle.stdout
    assert witness_lines(playguard.runner.witness_dir) == [], "no phase ran"
    assert store.exists(marquee_lock_key("m1")) == 0, "no lock was taken"

    lifted = playguard("resume", "m1")
    assert (lifted.returncode, lifted.stdout.startswith("lifted: paused by ")) == (
        EXIT_NOT_OK,
        True,
    )
    again = playguard("resume", "m1")
    assert again.returncode == EXIT_NOT_OK, "the lift is not on m1's host either"
    assert again.stdout.startswith("m1 is not paused; nothing to lift\n  on the hosts: 0 of 1 ")
    assert playguard("cycle", "m1").returncode == 0


def test_a_fleet_wide_pause_holds_every_marquee_until_lifted(
    playguard: Playguard, store: SyncRedis
) -> None:
    playguard.configure({"marquees": [marquee_entry("m1"), marquee_entry("m2")]})
    assert playguard("pause", "--all", "--reason", "freeze").returncode == EXIT_NOT_OK
    assert store.pttl(FLEET_PAUSE_KEY) > 0, "pause_default_for applies without --for"

    for name in ("m1", "m2"):
        done = playguard("cycle", name)
        assert done.returncode == EXIT_NOT_OK
        assert f"{name}: paused: fleet paused by " in done.stdout, done.stdout
    assert playguard("resume", "m1").stdout.startswith("m1 is not paused; nothing to lift\n")
    fleet_lifted = playguard("resume", "--all", "--json")
    shown = json.loads(fleet_lifted.stdout)
    assert (shown["pause"]["scope"], shown["on_every_host"]) == ("*", False)
    assert [(h["marquee"], h["carries"]) for h in shown["hosts"]] == [("m1", False), ("m2", False)]
    assert playguard("cycle", "m2").returncode == 0


@pytest.mark.parametrize(
    ("args", "starts"),
    [
        (("m1", "--reason", "x" * (REASON_MAX + 1)), f"--reason of {REASON_MAX + 1} characters"),
        (("m1", "--reason", "  "), "--reason of 2 characters"),
        (("m1", "--reason", "two\nlines"), "--reason of 9 characters"),
        (("m1", "--for", "2x", "--reason", "r"), "--for '2x': not a duration"),
        (("m1", "--for", "0s", "--reason", "r"), "--for '0s': not a duration"),
        (("m1", "--for", "8d", "--reason", "r"), "--for '8d': not a duration"),
        (("m1", "--for", "", "--reason", "r"), "--for '': not a duration"),
        (("nope", "--reason", "r"), "no marquee named 'nope'"),
        (("m1", "--all", "--reason", "r"), "name one MARQUEE or give --all"),
        (("--reason", "r"), "name one MARQUEE or give --all"),
    ],
)
def test_a_bad_pause_is_one_line_naming_the_value_and_stores_nothing(
    playguard: Playguard, store: SyncRedis, args: tuple[str, ...], starts: str
) -> None:
    playguard.configure({"marquees": [marquee_entry("m1")]})
    done = playguard("pause", *args)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [done.stderr.strip()], done.stderr
    assert starts in done.stderr
    assert "Traceback" not in done.stderr
    assert pause_keys(store) == []


def test_resume_of_an_unknown_marquee_is_one_line(playguard: Playguard) -> None:
    playguard.configure({"marquees": [marquee_entry("m1")]})
    assert_one_line_error(playguard("resume", "nope"), "")


HOSTILE_PAUSES = [
    b"",
    b"not json",
    b"[1, 2]",
    b'{"user": 1, "host": "h", "reason": "r", "since": 1, "until": 2}',
    b'{"user": "u", "host": "h", "reason": "r", "since": "yesterday", "until": 2}',
    b'{"user": "u", "host": "h", "reason": "r", "since": NaN, "until": 2}',
    b'{"user": "u", "host": "h", "reason": "r", "since": true, "until": 2}',
    b"\xff\xfe\x00 binary \x1b[31m",
    b"[" * 100_000,
    b'{"reason": "' + b"y" * 200_000 + b'"}',
]


@pytest.mark.parametrize("raw", HOSTILE_PAUSES, ids=range(len(HOSTILE_PAUSES)))
def test_a_pause_this_project_did_not_write_still_pauses_and_crashes_nothing(
    playguard: Playguard, store: SyncRedis, raw: bytes
) -> None:
    playguard.configure({"marquees": [marquee_entry("m1")]})
    store.set(pause_key("m1"), raw)

    [m1] = json.loads(playguard("status", "--json").stdout)["marquees"]
    assert m1["paused"]["known"] is False
    assert m1["paused"]["reason"].startswith("unknown record ")
    assert len(m1["paused"]["reason"]) < 300
    for command in (("status",), ("describe", "m1"), ("describe", "m1", "--json")):
        shown = playguard(*command)
        assert shown.returncode == 0, (command, shown.stderr)
        assert "\x1b" not in shown.stdout
    cycle = playguard("cycle", "m1")
    assert cycle.returncode == EXIT_NOT_OK
    assert "m1: paused: paused: unknown record " in cycle.stdout
    assert playguard("resume", "m1").stdout.startswith("lifted: paused: unknown record ")


@pytest.mark.parametrize("scope", ["m1", "--all"])
def test_a_pause_from_another_process_stops_the_running_cycle_at_the_next_boundary(
    playguard: Playguard, store: SyncRedis, ssh_server: SshServer, tmp_path: Path, scope: str
) -> None:
    """A daemon's cycle is in ``first`` when the pause lands (the Marquee's, or the fleet's): the
    cycle ends ``paused`` after it, so the fenced write of the next phase never reaches the host,
    and the lease is released; no cycle writes while the pause lasts; once it has expired, the
    daemon's next tick writes, with no command given."""
    workdir = tmp_path / "host"
    state_dir = workdir.with_name("host-state")
    playguard.configure(
        {"marquees": [ssh_marquee(ssh_server, "m1", workdir)]},
        phases=["tests.support.phases:first", "tests.support.phases:fenced_write"],
        fleet_pause_read_interval=0.2,
        http_address=(address := f"127.0.0.1:{free_port()}"),
    )
    # ``playguard pause`` is a process of its own, whose start-up alone takes seconds on a busy
    # machine: the first ``first`` lasts long enough for the pause to land inside it wherever it
    # starts; the phases after the pause are quick (waiting 6 s in each proved nothing more).
    daemon = playguard.runner.start(
        config=playguard.config, phase_seconds=0.2, first_phase_seconds=6.0
    )
    wait_for(lambda: witness_lines(playguard.runner.witness_dir), timeout=20, what="a phase")
    paused = playguard("pause", scope, "--for", "8s", "--reason", "hands off")
    # A cycle holds m1's lock while ``first`` runs: that cycle reads the pause from Redis, and
    # m1's host is named as not carrying it yet (unless the command came after the cycle ended).
    assert paused.returncode in (0, EXIT_NOT_OK), paused.stderr
    if paused.returncode == EXIT_NOT_OK:
        assert "  m1: not yet: locked by replica " in paused.stdout, paused.stdout
    # The end the pause stored (its ``until``), not the command's return plus 8 s: the command
    # returns a while after it took the pause, and the quick first write after the pause must
    # not be measured against that while.
    taken = store.get(FLEET_PAUSE_KEY if scope == "--all" else pause_key("m1"))
    pause_ends = float(json.loads(taken or b"{}")["until"])

    ended = wait_for(
        lambda: daemon.events("cycle.finished", outcome="paused"), timeout=20, what="paused"
    )
    assert ended[0]["failed_phase"] == "first", ended
    assert ("fleet paused by " if scope == "--all" else "paused by ") in ended[0]["reason"]
    assert store.exists(marquee_lock_key("m1")) == 0, "the lease was released"
    status, metrics = http_get(f"http://{address}/metrics")
    assert status == 200
    assert re.search(r'^playguard_cycles_total\{outcome="paused"\} [1-9]', metrics, re.M)
    assert 'playguard_marquee_not_ok{marquee="m1",outcome="paused",reason="paused"} 1.0' in metrics
    wait_for(lambda: journal(state_dir), timeout=45, what="a write once the pause has expired")
    daemon.send(signal.SIGTERM)
    assert daemon.wait(timeout=30) == 0, daemon.stderr_tail()

    witnessed = [(line["phase"], line["event"]) for line in
                 witness_lines(playguard.runner.witness_dir)]  # fmt: skip
    assert witnessed[:3] == [("first", "enter"), ("first", "exit"), ("first", "enter")], (
        "no phase after the pause until it expired"
    )
    writes = journal(state_dir)
    assert writes, "converged with no command"
    assert all(entry.time >= pause_ends - 0.5 for entry in writes), (writes, pause_ends)


def test_a_marquee_with_mode_off_runs_no_cycle_and_status_says_so(
    playguard: Playguard,
) -> None:
    playguard.configure({"marquees": [{**marquee_entry("m1"), "mode": "off"}]})
    assert_one_line_error(playguard("cycle", "m1"), "")
    assert "has mode: off, so no cycle runs on it" in playguard("cycle", "m1").stderr
    assert re.search(r"^ *m1 \(mode off\) ", playguard("status").stdout, re.MULTILINE)
    [m1] = json.loads(playguard("status", "--json").stdout)["marquees"]
    assert m1["mode"] == "off"


def plan(playguard: Playguard, *args: str) -> subprocess.CompletedProcess[str]:
    return playguard("plan", *args, timeout=180.0)


def test_plan_exits_2_with_changes_0_in_sync_and_1_unreachable(
    playguard: Playguard, lab: LabWorld, store: SyncRedis
) -> None:
    pending = plan(playguard, "edge-1")
    assert pending.returncode == EXIT_CHANGES, pending.stdout + pending.stderr
    assert re.search(r"^sync_git\n  would clone ", pending.stdout, re.MULTILINE), pending.stdout
    assert re.search(r"^edge-1: \d+ changes pending \(sync_git 1, ", pending.stdout, re.MULTILINE)
    as_json = json.loads(plan(playguard, "edge-1", "--json").stdout)
    assert as_json["verdict"] == "changes"
    assert as_json["changes"]["sync_git"][0].startswith("would clone ")
    assert store.exists(marquee_lock_key("edge-1")) == 0

    assert playguard("cycle", "edge-1").returncode == 0
    in_sync = plan(playguard, "edge-1")
    assert (in_sync.returncode, in_sync.stdout) == (0, "edge-1: in sync\n")

    unreachable = marquee_entry("gone-1")  # its identity file does not exist
    playguard.configure({**lab.data, "marquees": [*lab.data["marquees"], unreachable]},
                        **LAB_SETTINGS)  # fmt: skip
    gone = plan(playguard, "gone-1")
    assert gone.returncode == 1, gone.stdout + gone.stderr
    assert "gone-1: error: unreachable: " in gone.stdout
    fleet = plan(playguard, "--all")
    assert fleet.returncode == 1, fleet.stdout + fleet.stderr
    lines = fleet.stdout.splitlines()
    assert lines[0] == "edge-1: in sync"
    assert lines[1].startswith("gone-1: error: unreachable: ")
    assert len(lines) == 2
    verdicts = [
        m["verdict"] for m in json.loads(plan(playguard, "--all", "--json").stdout)["marquees"]
    ]
    assert verdicts == ["in_sync", "error"]


async def test_a_tick_skips_a_marquee_with_mode_off(redis: Redis) -> None:
    inventory = inventory_of("m1", "m2", "m3")
    marquees = [m.model_copy(update={"mode": mode}) for m, mode in
                zip(inventory.marquees, ("apply", "off", "detect"), strict=True)]  # fmt: skip
    phase = ScriptedPhase("only")
    harness = EngineHarness(redis, phase, state=StaticState(Inventory(marquees=marquees)))
    results = await harness.tick()
    assert sorted((r.marquee, r.dry_run) for r in results) == [("m1", False), ("m3", True)]
    assert sorted(phase.entered) == ["m1", "m3"]


async def test_a_pause_and_its_end_are_told_once_and_a_paused_start_runs_no_phase(
    redis: Redis,
) -> None:
    phase = ScriptedPhase("only")
    records = CycleRecords(redis, history_length=10, timeout=2.0)
    notifier = ChangeNotifier(settings_for(), redis)
    harness = EngineHarness(redis, phase, records=records, listeners=[notifier.notify_cycle])
    await take_pause(redis, Pause.taken_now("m1", "incident", 60.0), 2.0)

    with capture_logs() as logs:
        paused = [await harness.cycle() for _ in range(3)]
        await lift_pause(redis, "m1", 2.0)
        resumed = [await harness.cycle() for _ in range(2)]

    assert [(r.outcome, r.phase) for r in paused] == [(Outcome.PAUSED, None)] * 3
    assert all(r.reason and "incident" in r.reason for r in paused)
    assert [r.outcome for r in resumed] == [Outcome.OK] * 2
    assert phase.entered == ["m1", "m1"], "no phase ran while paused"
    assert await redis.exists(marquee_lock_key("m1")) == 0, "each lease was released"
    history = await records.history("m1")
    assert [r["outcome"] for r in history] == ["ok", "ok"], "a paused start is not recorded"
    told = [log["transition"] for log in logs if log["event"] == "marquee.transition"]
    assert told == ["paused", "resumed"]


READ_INTERVAL = 0.001
"""The fleet pause's read interval in the forgotten-pause test: short, so a cycle a little later
reads the key anew."""


async def forgotten(redis: Redis, server: RedisServer, loss: str) -> None:
    """Redis forgets every key: FLUSHALL, or a restart of a server without persistence."""
    if loss == "flushall":
        await redis.flushall()
        return
    server.kill()
    server.restart()
    await answering(redis)


@pytest.mark.parametrize("loss", ["flushall", "restart"])
@pytest.mark.parametrize("scope", ["m1", FLEET])
async def test_a_pause_redis_forgot_holds_until_its_end_and_a_lifted_one_stays_lifted(
    redis: Redis, live_redis_server: RedisServer, scope: str, loss: str
) -> None:
    phase = ScriptedPhase("only")
    harness = EngineHarness(redis, phase, fleet_pause_read_interval=READ_INTERVAL)
    key = FLEET_PAUSE_KEY if scope == FLEET else pause_key("m1")
    await take_pause(redis, Pause.taken_now(scope, "incident", 60.0), 2.0)
    met = await harness.cycle()
    await forgotten(redis, live_redis_server, loss)

    with capture_logs() as logs:
        held = [await harness.cycle() for _ in range(3)]

    assert [r.outcome for r in [met, *held]] == [Outcome.PAUSED] * 4
    assert all(r.reason and "incident" in r.reason for r in held)
    assert phase.entered == [], "no phase ran"
    assert 0 < await redis.pttl(key) <= 60_000, "written back until its end, not longer"
    rebuilt = [log for log in logs if log["event"] == "decisions.rebuilt"]
    assert [(log["kind"], log["scope"]) for log in rebuilt] == [("pause", scope)]

    await lift_pause(redis, scope, 2.0)
    # The fleet's key is read again once its read interval has passed since the last read (a
    # cycle here takes a fraction of a millisecond, so the next one could still use the last
    # answer, as designed): past it, only the replica's memory could bring the pause back.
    await asyncio.sleep(2 * READ_INTERVAL)
    resumed = [await harness.cycle() for _ in range(2)]
    assert [r.outcome for r in resumed] == [Outcome.OK] * 2, "a lifted pause stays lifted"
    assert await redis.exists(key) == 0


def test_describe_says_when_the_next_window_opens(playguard: Playguard) -> None:
    """A window one minute long on 1 January: closed at any time the test is likely to run."""
    yearly = {"kind": "allow", "cron": "0 0 1 1 *", "duration": 60, "timezone": "UTC"}
    playguard.configure(
        {"marquees": [{**marquee_entry("m1"), "windows": [yearly]}, marquee_entry("m2")]}
    )
    described = playguard("describe", "m1")
    assert described.returncode == 0, described.stderr
    assert re.search(
        r"^  windows: 1, closed \(cycles run as detect\); next opens \d{4}-01-01 00:00:00 UTC$",
        described.stdout,
        re.MULTILINE,
    ), described.stdout
    as_json = json.loads(playguard("describe", "m1", "--json").stdout)
    assert (as_json["windows"], as_json["next_opening"][4:]) == (1, "-01-01T00:00:00+00:00")
    assert "  windows: none (changes allowed at any time)" in playguard("describe", "m2").stdout
