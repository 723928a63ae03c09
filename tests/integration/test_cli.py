"""The installed ``playguard`` command, run as a real process against the lab.

Each test writes a settings file and an inventory of its own (the lab's Marquee for cycles and
checks; Marquees that are never reached for what only needs Redis) and reads what the command
printed, its exit status and what it left in Redis.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import click
import pytest
from redis import Redis as SyncRedis

from playguard_async import __version__
from playguard_async.coordination.keys import (
    RESUME_KEY,
    fence_key,
    lock_key,
    marquee_lock_key,
    marquee_lock_name,
)
from playguard_async.operator.cli import cli
from playguard_async.settings.sections import DEFAULT_PHASES
from playguard_lab import RedisServer, SshServer
from tests.support.cli import (
    EXIT_LOCKED,
    EXIT_NOT_OK,
    LAB_SETTINGS,
    Playguard,
    assert_one_line_error,
    hold_lock,
)
from tests.support.daemon import PLAYGUARD, marquee_entry, wait_for, witness_lines
from tests.support.playgrounds import checkout_of
from tests.support.world import LabWorld

pytestmark = pytest.mark.integration

PHASE_LINE = re.compile(r"^  (\w+) +(\d+) actions? ", re.MULTILINE)
CHECK_ROW = re.compile(
    r"^ *(settings|inventory|redis topology|redis|marquee \S+|registry \S+) +(ok|FAIL) ",
    re.MULTILINE,
)


def phase_counts(stdout: str) -> dict[str, int]:
    return {phase: int(count) for phase, count in PHASE_LINE.findall(stdout)}


def verdicts(stdout: str) -> dict[str, str]:
    return dict(CHECK_ROW.findall(stdout))


def test_cycle_converges_a_fresh_marquee_then_takes_no_action(
    playguard: Playguard, lab: LabWorld, store: SyncRedis
) -> None:
    dry = playguard("cycle", "edge-1", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "would clone" in dry.stdout
    assert not checkout_of(lab).exists(), "a dry run changes nothing"
    [dry_edge] = json.loads(playguard("status", "--json").stdout)["marquees"]
    assert dry_edge["last"]["dry_run"] is True
    assert "ok (dry run)" in playguard("status").stdout, "a dry run reads as converged"

    first = playguard("cycle", "edge-1")
    assert first.returncode == 0, first.stdout + first.stderr
    counts = phase_counts(first.stdout)
    assert list(counts) == list(DEFAULT_PHASES), first.stdout
    assert counts["sync_git"] == 1
    assert counts["reconcile_playgrounds"] >= 1
    assert "compose up playground web-main" in first.stdout
    assert "edge-1: ok;" in first.stdout

    second = playguard("cycle", "edge-1")
    assert second.returncode == 0, second.stdout + second.stderr
    assert phase_counts(second.stdout) == dict.fromkeys(DEFAULT_PHASES, 0)
    assert "edge-1: ok; 0 actions taken" in second.stdout
    assert "fence 3" in second.stdout  # dry run, first, second
    assert store.exists(marquee_lock_key("edge-1")) == 0

    status = playguard("status", "--json")
    assert status.returncode == 0, status.stderr
    [edge] = json.loads(status.stdout)["marquees"]
    assert edge["name"] == "edge-1"
    assert edge["lock"] is None
    last = edge["last"]
    assert (last["outcome"], last["fence"], last["actions"]) == ("ok", 3, 0)
    assert (last["drift"], last["failed"]) == ({}, [])
    assert last["dry_run"] is False
    assert last["replica"]
    assert 0 <= last["age"] < 60
    table = playguard("status")
    fence = re.escape("fence 3 (host unknown: its last cycle wrote nothing)")
    assert re.search(rf"^ *edge-1 +- +{fence} +- +ok ", table.stdout, re.MULTILINE), table.stdout


def test_failed_phase_exits_4_and_status_names_phase_and_item(
    playguard: Playguard, lab: LabWorld
) -> None:
    lab.password_file.write_text("not-the-password")
    done = playguard("cycle", "edge-1")
    assert done.returncode == EXIT_NOT_OK, done.stdout + done.stderr
    assert re.search(r"^  refresh_credentials +phase_failed ", done.stdout, re.MULTILINE)
    assert "pull_images" not in done.stdout, "no phase runs after a failed one"
    assert "edge-1: phase_failed in refresh_credentials" in done.stdout

    [edge] = json.loads(playguard("status", "--json").stdout)["marquees"]
    last = edge["last"]
    assert (last["outcome"], last["phase"]) == ("phase_failed", "refresh_credentials")
    assert last["failed"] == ["refresh_credentials: lab"]
    assert "still failing: refresh_credentials: lab" in playguard("status").stdout


def test_cycle_on_a_locked_marquee_names_the_holder_and_exits_3(
    playguard: Playguard, store: SyncRedis, live_redis_server: RedisServer
) -> None:
    playguard.configure({"marquees": [marquee_entry("m1")]})
    lease = hold_lock(live_redis_server.url, "m1")
    done = playguard("cycle", "m1")
    assert done.returncode == EXIT_LOCKED, done.stdout + done.stderr
    assert done.stdout == "", "no phase ran"
    assert done.stderr.startswith("Error: m1 is locked by replica other-replica (host ")
    assert f"pid {os.getpid()}, since " in done.stderr
    assert f"fence {lease.fence}, " in done.stderr
    assert " s left; no cycle ran" in done.stderr
    assert store.get(marquee_lock_key("m1")) == lease.record.encode()
    [m1] = json.loads(playguard("status", "--json").stdout)["marquees"]
    assert m1["last"] is None, "a cycle that found the lock held is not recorded"


def test_locks_and_status_show_a_held_lock(
    playguard: Playguard, store: SyncRedis, live_redis_server: RedisServer
) -> None:
    playguard.configure({"marquees": [marquee_entry("m1"), marquee_entry("m2")]})
    lease = hold_lock(live_redis_server.url, "m1")

    listed = playguard("locks")
    assert listed.returncode == 0, listed.stderr
    assert re.search(
        rf"^ *marquee:m1 +other-replica +\S+ +{os.getpid()} +\S+ +{lease.fence} +",
        listed.stdout,
        re.MULTILINE,
    ), listed.stdout
    [held] = json.loads(playguard("locks", "--json").stdout)["locks"]
    assert (held["name"], held["replica"], held["pid"], held["fence"]) == (
        "marquee:m1", "other-replica", os.getpid(), lease.fence,
    )  # fmt: skip
    assert 0 < held["ttl_left"] <= 60

    m1, m2 = json.loads(playguard("status", "--json").stdout)["marquees"]
    assert (m1["lock"]["replica"], m1["lock"]["fence"]) == ("other-replica", lease.fence)
    assert m2["lock"] is None
    assert re.search(r"^ *m1 +other-replica \(", playguard("status").stdout, re.MULTILINE)


def test_unlock_without_force_deletes_nothing_and_says_what_it_would(
    playguard: Playguard, store: SyncRedis, live_redis_server: RedisServer
) -> None:
    playguard.configure({"marquees": [marquee_entry("m1")]})
    lease = hold_lock(live_redis_server.url, "m1")
    done = playguard("unlock", "m1")
    assert done.returncode == 1, done.stdout + done.stderr
    key = marquee_lock_key("m1")
    assert f"would delete {key}: held by replica other-replica" in done.stdout
    assert f"fence {lease.fence}" in done.stdout
    assert "nothing deleted: add --force" in done.stdout
    assert store.get(key) == lease.record.encode()


def test_unlock_force_deletes_the_lock_key_and_keeps_the_fence(
    playguard: Playguard, store: SyncRedis, live_redis_server: RedisServer
) -> None:
    playguard.configure({"marquees": [marquee_entry("m1")]})
    lease = hold_lock(live_redis_server.url, "m1")
    name = marquee_lock_name("m1")
    done = playguard("unlock", "m1", "--force")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"deleted {lock_key(name)}: held by replica other-replica" in done.stdout
    assert f"the fence counter {fence_key(name)} stays at {lease.fence}" in done.stdout
    assert store.exists(lock_key(name)) == 0
    assert store.get(fence_key(name)) == str(lease.fence).encode()

    again = playguard("unlock", "m1", "--force")
    assert (again.returncode, again.stdout.startswith("m1 is not locked")) == (0, True)
    assert playguard("locks").stdout.strip() == "no lock is held"
    assert hold_lock(live_redis_server.url, "m1").fence == lease.fence + 1


def test_check_passes_on_the_lab(
    playguard: Playguard, lab_world: LabWorld, ssh_server: SshServer, store: SyncRedis
) -> None:
    playguard.configure(lab_world.data, **LAB_SETTINGS)
    done = playguard("check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert verdicts(done.stdout) == {
        "settings": "ok", "inventory": "ok", "redis": "ok", "redis topology": "ok",
        "marquee edge-1": "ok", "registry lab": "ok",
    }  # fmt: skip
    assert "logged in from edge-1" in done.stdout
    assert f"host key {ssh_server.host_key_fingerprint};" in done.stdout
    assert re.search(r"Docker \S+ \(API 1\.\d+\); docker-compose version 1\.", done.stdout)
    assert re.search(r"Redis \d+\.\d+\.\d+, [\d.]+ ms", done.stdout)
    assert re.search(r"single: primary 127\.0\.0\.1:\d+, replicas: none", done.stdout)


def test_check_json_and_a_refused_registry_password_never_shown(
    playguard: Playguard, lab_world: LabWorld
) -> None:
    lab_world.password_file.write_text("not-the-password\n")
    playguard.configure(lab_world.data, **LAB_SETTINGS)
    done = playguard("check", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    verdict = {check["subject"]: check["ok"] for check in report["checks"]}
    assert report["ok"] is False
    assert (verdict["marquee edge-1"], verdict["registry lab"]) == (True, False)
    [registry] = [check for check in report["checks"] if check["subject"] == "registry lab"]
    assert "login to 127.0.0.1:" in registry["detail"]
    assert "not-the-password" not in done.stdout + done.stderr


def test_check_names_a_registry_password_file_that_is_missing(
    playguard: Playguard, lab_world: LabWorld, tmp_path: Path
) -> None:
    missing = tmp_path / "gone" / "password"
    lab_world.data["registries"][0]["password_file"] = str(missing)
    playguard.configure(lab_world.data, **LAB_SETTINGS)
    done = playguard("check")
    assert done.returncode == 1, done.stdout + done.stderr
    assert verdicts(done.stdout)["registry lab"] == "FAIL"
    assert str(missing) in done.stdout


def test_check_names_the_fingerprint_of_an_unknown_host_key(
    playguard: Playguard, lab_world: LabWorld, ssh_server: SshServer, tmp_path: Path
) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    lab_world.data["marquees"][0]["known_hosts"] = str(empty)
    playguard.configure(lab_world.data, **LAB_SETTINGS)
    done = playguard("check")
    assert done.returncode == 1, done.stdout + done.stderr
    assert verdicts(done.stdout)["marquee edge-1"] == "FAIL"
    assert verdicts(done.stdout)["redis"] == "ok"
    assert f"host key {ssh_server.host_key_fingerprint} is not trusted by {empty}" in done.stdout


def test_check_with_sshd_stopped_fails_that_marquee(
    playguard: Playguard, lab_world: LabWorld, ssh_server: SshServer
) -> None:
    playguard.configure(lab_world.data, **LAB_SETTINGS)
    ssh_server.stop()
    try:
        done = playguard("check")
    finally:
        ssh_server.restart()
    assert done.returncode == 1, done.stdout + done.stderr
    assert verdicts(done.stdout) == {
        "settings": "ok", "inventory": "ok", "redis": "ok", "redis topology": "ok",
        "marquee edge-1": "FAIL", "registry lab": "FAIL",
    }  # fmt: skip
    assert "ssh: edge-1 (127.0.0.1:" in done.stdout
    assert "cannot connect over SSH" in done.stdout


def test_redis_down_is_one_readable_line_not_a_traceback(
    playguard: Playguard, redis_server: RedisServer, live_redis_server: RedisServer
) -> None:
    playguard.configure({"marquees": [marquee_entry("m1")]})
    commands = [("status",), ("locks",), ("unlock", "m1", "--force"), ("cycle", "m1")]
    redis_server.kill()
    try:
        failed = {command: playguard(*command) for command in commands}
        checked = playguard("check")
        debugged = playguard("--debug", "status")
    finally:
        redis_server.restart()
    for command, done in failed.items():
        assert done.stdout == "", command
        assert_one_line_error(done, f"Redis at {redis_server.url} unavailable: ")
    assert checked.returncode == 1
    assert verdicts(checked.stdout)["redis"] == "FAIL"
    assert f"Redis at {redis_server.url} unavailable: " in checked.stdout
    assert "Traceback" in debugged.stderr, "--debug shows the traceback"


def test_a_broken_inventory_is_one_line_naming_file_and_line(playguard: Playguard) -> None:
    playguard.configure({"marquees": [marquee_entry("Bad_Name")]})
    inventory = playguard.runner.inventory
    line = inventory.read_text().splitlines().index('   "name": "Bad_Name",') + 1
    for command in (("status",), ("cycle", "m1")):
        done = playguard(*command)
        assert_one_line_error(done, f"{inventory}:{line}: marquees[0].name: ")
        assert "'Bad_Name'" in done.stderr


def test_unknown_marquee_is_one_line_naming_the_known_ones(
    playguard: Playguard, store: SyncRedis
) -> None:
    playguard.configure({"marquees": [marquee_entry("m1"), marquee_entry("m2")]})
    done = playguard("cycle", "m3")
    assert_one_line_error(done, f"{playguard.runner.inventory}: no marquee named 'm3' ")
    assert "(known: m1, m2)" in done.stderr


@pytest.mark.parametrize("force", [(), ("--force",)], ids=["shown", "forced"])
def test_unlock_of_a_name_not_in_the_inventory_says_so_and_exits_1(
    playguard: Playguard, store: SyncRedis, live_redis_server: RedisServer, force: tuple[str, ...]
) -> None:
    playguard.configure({"marquees": [marquee_entry("m1"), marquee_entry("m2")]})
    hold_lock(live_redis_server.url, "m3")  # a lock of that name is not reason to touch it
    done = playguard("unlock", "m3", *force)
    assert_one_line_error(done, f"{playguard.runner.inventory}: no marquee named 'm3' ")
    assert "(known: m1, m2)" in done.stderr
    assert done.stdout == ""
    assert store.exists(marquee_lock_key("m3")) == 1, "nothing deleted"


def test_first_interrupt_lets_the_phase_finish_and_starts_no_other(
    playguard: Playguard, store: SyncRedis
) -> None:
    playguard.configure({"marquees": [marquee_entry("m1")]})
    process = playguard.start("cycle", "m1", phase_seconds=2.0)
    try:
        wait_for(lambda: witness_lines(playguard.runner.witness_dir), timeout=20, what="a phase")
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == EXIT_NOT_OK, stdout + stderr
    witnessed = [(line["phase"], line["event"], line.get("status")) for line in
                 witness_lines(playguard.runner.witness_dir)]  # fmt: skip
    assert witnessed == [("first", "enter", None), ("first", "exit", "ok")]
    assert phase_counts(stdout) == {"first": 1}
    assert "m1: interrupted; 1 action taken" in stdout
    assert store.exists(marquee_lock_key("m1")) == 0
    assert store.zscore(RESUME_KEY, "m1") is not None, "the next start reconciles m1 first"


def test_second_interrupt_cancels_the_running_phase(playguard: Playguard, store: SyncRedis) -> None:
    playguard.configure({"marquees": [marquee_entry("m1")]})
    process = playguard.start("cycle", "m1", phase_seconds=60.0)
    try:
        wait_for(lambda: witness_lines(playguard.runner.witness_dir), timeout=20, what="a phase")
        # Two different stop signals: two SIGINTs sent at once may merge into one while pending.
        process.send_signal(signal.SIGTERM)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == EXIT_NOT_OK, stdout + stderr
    assert stderr.startswith("Error: cycle of m1 cancelled in the middle of a phase"), stderr
    [*_, exit_line] = witness_lines(playguard.runner.witness_dir)
    assert (exit_line["phase"], exit_line["status"]) == ("first", "cancelled")
    assert store.exists(marquee_lock_key("m1")) == 0


def every_command() -> list[tuple[str, ...]]:
    """Every command and subcommand of ``playguard``, ``lab`` included, as click itself lists
    them: a command added later is covered without editing a list here."""
    found: list[tuple[str, ...]] = []

    def walk(group: click.Group, path: tuple[str, ...], context: click.Context) -> None:
        for name in group.list_commands(context):
            command = group.get_command(context, name)
            assert command is not None, (*path, name)
            found.append((*path, name))
            if isinstance(command, click.Group):
                walk(command, (*path, name), click.Context(command, parent=context, info_name=name))

    walk(cli, (), click.Context(cli, info_name="playguard"))
    return found


def test_every_command_is_found_groups_and_their_subcommands_included() -> None:
    commands = every_command()
    for expected in [("describe",), ("history",), ("db",), ("db", "migrate"), ("lab", "up")]:
        assert expected in commands, expected


def test_version_help_on_every_command_and_bad_usage(playguard: Playguard) -> None:
    invocations: dict[tuple[str, ...], int] = {
        ("--version",): 0,
        **{(*command, "--help"): 0 for command in every_command()},
        ("cycle",): 2,
        ("status", "--bogus"): 2,
        ("check", "--timeout", "0"): 2,
        ("no-such-command",): 2,
    }
    # Started together: each one's cost is mostly the interpreter importing the package.
    started = {
        args: subprocess.Popen(
            [str(PLAYGUARD), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=playguard.runner.environment(phase_seconds=0.2),
        )
        for args in invocations
    }
    for args, process in started.items():
        stdout, stderr = process.communicate(timeout=60)
        assert process.returncode == invocations[args], (args, stdout, stderr)
        if args == ("--version",):
            assert stdout == f"playguard, version {__version__}\n"
        elif args[-1] == "--help":
            assert stdout.startswith(f"Usage: playguard {' '.join(args[:-1])} "), stdout
        else:
            assert "Usage: playguard" in stderr, stderr
            assert "Traceback" not in stderr


def test_cycle_records_the_hosts_fence_and_check_shows_it_beside_redis(
    playguard: Playguard, lab: LabWorld, store: SyncRedis
) -> None:
    done = playguard("cycle", "edge-1")
    assert done.returncode == 0, done.stdout + done.stderr
    [edge] = json.loads(playguard("status", "--json").stdout)["marquees"]
    assert edge["last"]["fence"] == edge["last"]["host_fence"] == 1, "the first cycle wrote"

    checked = playguard("check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "; fence 1 (host 1)" in checked.stdout

    store.set(fence_key(marquee_lock_name("edge-1")), 0)  # as after a FLUSHALL and one lease
    workdir = Path(lab.data["marquees"][0]["workdir"])
    [override] = workdir.glob("playgrounds/*/override.yaml")
    override.write_text("# edited by hand: the next cycle has a write to make\n")
    behind = playguard("check")
    assert "; fence 0 (host 1) (Redis is behind the host" in behind.stdout
    second = playguard("cycle", "edge-1")
    assert second.returncode == EXIT_NOT_OK, second.stdout + second.stderr
    assert "lock_lost" in second.stdout
    [edge] = json.loads(playguard("status", "--json").stdout)["marquees"]
    assert (edge["last"]["outcome"], edge["last"]["reason"]) == ("lock_lost", "fenced")
    assert (edge["last"]["fence"], edge["last"]["host_fence"]) == (1, 1)
    assert override.read_text().startswith("# edited by hand"), "the refused write did not run"
    assert playguard("cycle", "edge-1").returncode == 0, "the counter was lifted: it healed"
    assert not override.read_text().startswith("# edited by hand")
