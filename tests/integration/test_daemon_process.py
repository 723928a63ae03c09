"""``playguard run`` as a real process against the lab's redis-server: signals, drain, resume, and
start-up errors as an operator sees them.

The engine's own behaviour is proved in-process by test_engine.py; these tests prove the wiring
around it: signal handlers, exit statuses, what lands in Redis and on stderr.
"""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest
from redis import Redis

from playguard_async.coordination.keys import RESUME_KEY, marquee_lock_key
from playguard_async.operator.command_kit import EXIT_CONFIG
from tests.support.daemon import DaemonRunner, wait_for

pytestmark = pytest.mark.integration

GRACE = 5.0
PHASE = 2.0
ZETA_LOCK = marquee_lock_key("zeta")


def lock_keys(store: Redis) -> list[bytes]:
    return list(store.scan_iter(match=marquee_lock_key("*")))


def phases_seen(witness: list[dict[str, Any]]) -> list[tuple[str, str, str, str | None]]:
    return [(w["event"], w["phase"], w["marquee"], w.get("status")) for w in witness]


def test_sigterm_mid_phase_finishes_it_records_resume_and_next_start_runs_it_first(
    daemons: DaemonRunner, store: Redis
) -> None:
    daemons.write_inventory(["zeta"])
    first_run = daemons.start("r1", phase_seconds=PHASE, shutdown_grace=GRACE)
    enter = wait_for(
        lambda: first_run.witness(daemons.witness_dir), timeout=20, what="first phase entered"
    )[0]
    assert (enter["event"], enter["phase"], enter["marquee"]) == ("enter", "first", "zeta")
    signalled = first_run.send(signal.SIGTERM)
    assert first_run.wait(GRACE + 3) == 0
    assert time.monotonic() - signalled < GRACE + 1

    witness = first_run.witness(daemons.witness_dir)
    assert phases_seen(witness) == [
        ("enter", "first", "zeta", None),
        ("exit", "first", "zeta", "ok"),
    ], "the running phase finishes; the next one does not start"
    # However soon after the enter the signal landed, the phase ran its whole length past it.
    assert witness[1]["t"] > signalled, "the signal landed after the phase had ended"
    assert witness[1]["t"] - enter["t"] >= PHASE - 0.01, "the phase was cut short"
    finished = first_run.events("cycle.finished", marquee="zeta")
    assert [(f["outcome"], f["fence"]) for f in finished] == [("interrupted", enter["fence"])]
    assert first_run.events("engine.stopped")
    assert store.exists(ZETA_LOCK) == 0
    assert store.zscore(RESUME_KEY, "zeta") is not None

    daemons.write_inventory(["alpha", "beta", "zeta"])
    second_run = daemons.start("r1", phase_seconds=0.3, max_concurrent_cycles=1, tick_interval=1.0)
    first_seen = wait_for(
        lambda: second_run.witness(daemons.witness_dir), timeout=20, what="phase of the restart"
    )[0]
    assert (first_seen["event"], first_seen["marquee"]) == ("enter", "zeta")
    assert first_seen["fence"] > enter["fence"]
    resumed = wait_for(
        lambda: second_run.events("cycle.finished", marquee="zeta"),
        timeout=15,
        what="end of zeta's resumed cycle",
    )[0]  # the first of the run; a later tick may have ended another by the time it is read
    assert resumed["outcome"] == "ok"
    assert store.zscore(RESUME_KEY, "zeta") is None
    assert daemons.stop_all([second_run], timeout=GRACE + 3) == {"r1": 0}
    assert lock_keys(store) == []


def _bad_settings(daemons: DaemonRunner) -> tuple[dict[str, Any], list[str]]:
    config = daemons.workdir / "bad.toml"
    return {"lock_ttl": -1}, [str(config), "lock_ttl"]


def _bad_inventory(daemons: DaemonRunner) -> tuple[dict[str, Any], list[str]]:
    daemons.inventory.write_text(
        "marquees:\n  - {name: Zeta, host: 127.0.0.1, user: root, identity_file: /x, "
        "known_hosts: /y}\n",
        encoding="utf-8",
    )
    return {}, [str(daemons.inventory), "marquees[0].name"]


def _missing_inventory(daemons: DaemonRunner) -> tuple[dict[str, Any], list[str]]:
    missing = daemons.workdir / "absent.yaml"
    return {"inventory": missing}, [str(missing)]


def _unknown_phase(daemons: DaemonRunner) -> tuple[dict[str, Any], list[str]]:
    phases = ["tests.support.phases:first", "tests.support.phases:nope"]
    return {"phases": phases}, ["tests.support.phases:nope"]


@pytest.mark.parametrize(
    ("breakage", "exception"),
    [
        pytest.param(_bad_settings, "SettingsError", id="bad-settings"),
        pytest.param(_bad_inventory, "InventoryError", id="bad-inventory"),
        pytest.param(_missing_inventory, "InventoryError", id="missing-inventory"),
        pytest.param(_unknown_phase, "UnknownPhase", id="unknown-phase"),
    ],
)
def test_unusable_start_exits_non_zero_with_one_readable_error(
    daemons: DaemonRunner, store: Redis, breakage: Any, exception: str
) -> None:
    daemons.write_inventory(["zeta"])
    overrides, names = breakage(daemons)
    config = daemons.write_settings("bad", daemons.settings("bad", **overrides))

    plain = daemons.start("bad", config=config)
    assert plain.wait(15) == EXIT_CONFIG, "a configuration error, not a crash"
    stderr = plain.stderr()
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert lines[0].startswith("Error: "), stderr
    # Settings errors put "invalid settings:" above one line per problem; the rest take one line.
    assert len(lines) <= 2, stderr
    naming = [line for line in lines if all(name in line for name in names)]
    assert len(naming) == 1, f"no single line names {names}:\n{stderr}"

    debug = daemons.start("bad", config=config, debug=True)
    assert debug.wait(15) == EXIT_CONFIG
    assert "Traceback (most recent call last)" in debug.stderr()
    assert exception in debug.stderr_tail(3)

    assert not list(daemons.witness_dir.iterdir()), "no phase ran"
    assert store.dbsize() == 0, "nothing was written to Redis"


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("PLAYGUARD_PHASES", "sync_git", "phases = 'sync_git': not JSON"),
        ("PLAYGUARD_PHASES", '{"a": 1}', "phases = "),
        ("PLAYGUARD_LOCK_TTL", "abc", "lock_ttl = 'abc': "),
        ("PLAYGUARD_TICK_INTERVAL", "inf", "tick_interval = 'inf': "),
        ("PLAYGUARD_LOG_FORMAT", "xml", "log_format = 'xml': "),
        ("playguard_redis_url", "http://h", "redis_url = 'http://h': "),
    ],
)
def test_a_bad_value_from_the_environment_is_one_line_blaming_the_variable_and_exits_78(
    daemons: DaemonRunner, store: Redis, variable: str, value: str, says: str
) -> None:
    daemons.write_inventory(["zeta"])
    # The settings file sets every one of these fields well: the environment's value is bad.
    config = daemons.write_settings("file", daemons.settings("file", log_format="json"))
    run = daemons.start("file", config=config, env={variable: value})
    assert run.wait(15) == EXIT_CONFIG
    [line] = run.stderr().splitlines()
    assert line.startswith(f"Error: invalid settings: environment {variable}: {says}"), line
    assert str(config) not in line, "the file is not to blame"
    assert not list(daemons.witness_dir.iterdir()), "no phase ran"
    assert store.dbsize() == 0


def test_second_sigterm_cancels_a_long_phase_at_once_and_still_cleans_up(
    daemons: DaemonRunner, store: Redis
) -> None:
    daemons.write_inventory(["zeta"])
    run = daemons.start("r1", phase_seconds=30.0, shutdown_grace=30.0)
    [enter] = wait_for(
        lambda: run.witness(daemons.witness_dir), timeout=20, what="first phase entered"
    )
    run.send(signal.SIGTERM)
    wait_for(lambda: run.events("engine.stopping"), timeout=5, what="engine.stopping")
    assert run.process.poll() is None, "one SIGTERM lets the phase run on"
    signalled = run.send(signal.SIGTERM)
    assert run.wait(5) == 0
    took = time.monotonic() - signalled
    assert took < 2.0, f"second SIGTERM took {took:.2f} s to end the process"

    witness = run.witness(daemons.witness_dir)
    assert phases_seen(witness) == [
        ("enter", "first", "zeta", None),
        ("exit", "first", "zeta", "cancelled"),
    ]
    [finished] = run.events("cycle.finished", marquee="zeta")
    assert (finished["outcome"], finished["fence"]) == ("interrupted", enter["fence"])
    assert run.events("engine.stop_now")
    assert store.exists(ZETA_LOCK) == 0
    assert store.zscore(RESUME_KEY, "zeta") is not None
