"""A real ``playguard run`` reading its desired state from the lab's PostgreSQL: cycles from the
database, and through a database outage the last snapshot in force, /readyz and the metrics
saying so, one log line each way, and the password in none of its output."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest

from playguard_async.operator.command_kit import EXIT_CONFIG
from tests.support.daemon import PLAYGUARD, Daemon, DaemonRunner, wait_for
from tests.support.postgres import LabDatabase, migrated_fleet
from tests.support.probes import (
    CYCLES,
    NotifySocket,
    answer_once,
    notify_socket,
    scrape,
    scrape_until,
    start_serving,
)

REACHABLE = "playguard_desired_state_reachable"
LOADED = "playguard_desired_state_loaded"
TICKS = "playguard_tick_lag_seconds_count"
WRITE_FAILURES = "playguard_observed_state_write_failures_total"


async def test_daemon_runs_from_the_database_and_rides_out_its_outage(
    daemons: DaemonRunner, postgres: LabDatabase
) -> None:
    connection = await migrated_fleet(postgres, daemons.write_inventory(["alpha", "beta"]))
    await connection.close()
    daemons.inventory.unlink()  # the database is the only desired state
    daemon, base = start_serving(
        daemons,
        tick_interval=1.0,
        phase_seconds=0.05,
        desired_state=postgres.url,
        desired_state_timeout=1.0,
        env={"PLAYGUARD_DESIRED_STATE_PASSWORD": postgres.password},
    )
    first = scrape_until(base, lambda m: m.value(CYCLES, outcome="ok") >= 2, what="ok cycles")
    assert first.value(REACHABLE) == 1
    assert answer_once(base, "/readyz", 200) == "ready: Redis answers\n"

    postgres.server.stop()
    try:
        body = answer_once(base, "/readyz", 503)
        assert body.startswith(f"not ready: desired state {postgres.url} unreachable: ")
        # Counted from the outage's notice, not from ``first``: cycles that ended between that
        # scrape and the stop ran on a reachable database. Each cycle's write-back fails after
        # its end, off the cycle, so its count is waited for too.
        noticed = scrape(f"{base}/metrics").value(CYCLES, outcome="ok")
        during = scrape_until(
            base,
            lambda m: m.value(CYCLES, outcome="ok") >= noticed + 2 and m.value(WRITE_FAILURES) >= 1,
            what="cycles on the last snapshot, their write-back failed and counted",
        )
        assert during.value(REACHABLE) == 0
        age = during.value("playguard_desired_state_snapshot_age_seconds")
        assert not math.isnan(age)
        assert age > 0
    finally:
        postgres.server.start()
    answer_once(base, "/readyz", 200)
    scrape_until(base, lambda m: m.value(REACHABLE) == 1, what="the database reachable again")
    assert daemons.stop_all([daemon], timeout=15) == {"r1": 0}

    assert len(daemon.events("desired_state.unreachable")) == 1
    assert len(daemon.events("desired_state.reachable")) == 1
    assert {line["marquee"] for line in daemon.events("cycle.finished")} >= {"alpha", "beta"}
    assert postgres.password not in daemon.stderr()


async def test_daemon_started_while_the_database_is_down_waits_then_cycles_once_it_is_up(
    daemons: DaemonRunner, postgres: LabDatabase, tmp_path: Path
) -> None:
    connection = await migrated_fleet(postgres, daemons.write_inventory(["alpha", "beta"]))
    await connection.close()
    daemons.inventory.unlink()  # the database is the only desired state
    with notify_socket(tmp_path / "notify") as manager:
        daemon, base = _wait_out_the_database(daemons, postgres, manager)
        up_at = len(manager.receive())
        manager.wait_for(
            lambda messages: any(
                "STATUS" in m and "desired state" not in m["STATUS"] for m in messages[up_at:]
            ),
            timeout=20,
            what="a STATUS line without the outage",
        )
    up = scrape_until(base, lambda m: m.value(CYCLES, outcome="ok") >= 2, what="ok cycles")
    assert (up.value(LOADED), up.value(REACHABLE)) == (1, 1)
    assert answer_once(base, "/readyz", 200) == "ready: Redis answers\n"
    assert daemons.stop_all([daemon], timeout=15) == {"r1": 0}

    events = [line["event"] for line in daemon.events()]
    assert events.count("desired_state.unreachable") == 1, "once, not once per tick"
    assert events.count("desired_state.reachable") == 1
    assert "inventory.invalid" not in events
    assert events.index("desired_state.reachable") < events.index("cycle.finished")
    [started] = daemon.events("engine.started")
    assert started["waiting_for_desired_state"].startswith(f"{postgres.url}: cannot connect: ")
    assert {line["marquee"] for line in daemon.events("cycle.finished")} == {"alpha", "beta"}
    assert postgres.password not in daemon.stderr()


def _wait_out_the_database(
    daemons: DaemonRunner, postgres: LabDatabase, manager: NotifySocket
) -> tuple[Daemon, str]:
    """Start a daemon while the database is down; see it tick without cycles and say why on
    /readyz, the metrics and systemd's STATUS; start the database again."""
    postgres.server.stop()
    try:
        daemon, base = start_serving(  # fails at once if the daemon exits
            daemons,
            tick_interval=1.0,
            phase_seconds=0.05,
            desired_state=postgres.url,
            desired_state_timeout=1.0,
            env={
                "PLAYGUARD_DESIRED_STATE_PASSWORD": postgres.password,
                "NOTIFY_SOCKET": str(manager.path),
                "WATCHDOG_USEC": "2000000",
            },
        )
        body = answer_once(base, "/readyz", 503)
        assert body.startswith(f"not ready: desired state {postgres.url} unreachable: "), body
        assert body.endswith("; no snapshot yet: no cycles\n"), body
        waiting = scrape_until(
            base, lambda m: m.value(TICKS) >= 3, what="three ticks without a desired state"
        )
        assert waiting.value(CYCLES) == 0
        assert waiting.value(LOADED) == 0
        assert waiting.value(REACHABLE) == 0
        assert math.isnan(waiting.value("playguard_desired_state_snapshot_age_seconds"))
        assert daemon.process.poll() is None
        statuses = [m["STATUS"] for m in manager.receive() if "STATUS" in m]
        assert statuses, "systemd heard from it"
        assert statuses[-1].endswith("; no snapshot yet: no cycles"), statuses[-1]
    finally:
        postgres.server.start()
    return daemon, base


@pytest.mark.parametrize("mistake", ["missing password file", "password in the URL"])
def test_what_the_settings_get_wrong_is_still_a_configuration_error_at_start(
    daemons: DaemonRunner, postgres: LabDatabase, mistake: str
) -> None:
    missing = daemons.workdir / "no-such-password-file"
    if mistake == "missing password file":
        settings: dict[str, object] = {
            "desired_state": postgres.url,
            "desired_state_password_file": missing,
        }
        said = f"desired_state_password_file {missing}: "
    else:
        url = postgres.url.replace("@", f":{postgres.password}@", 1)
        settings, said = {"desired_state": url}, "must not carry a password"
    postgres.server.stop()  # the database's absence changes nothing: the settings are wrong
    try:
        config = daemons.write_settings("r1", daemons.settings("r1", **settings))
        daemon = daemons.start(config=config)
        assert daemon.wait(30) == EXIT_CONFIG
    finally:
        postgres.server.start()
    assert said in daemon.stderr()
    assert postgres.password not in daemon.stderr()


def _cycles_of(daemon: Daemon, marquee: str) -> int:
    return len(daemon.events("cycle.finished", marquee=marquee))


async def test_a_row_changed_in_sql_starts_its_marquees_cycle_before_the_tick(
    daemons: DaemonRunner, postgres: LabDatabase
) -> None:
    connection = await migrated_fleet(postgres, daemons.write_inventory(["alpha", "beta"]))
    try:
        daemon, _ = start_serving(
            daemons,
            tick_interval=600.0,  # no second tick during the test: any later cycle was woken
            tick_jitter=0.0,
            phase_seconds=0.05,
            desired_state=postgres.url,
            env={"PLAYGUARD_DESIRED_STATE_PASSWORD": postgres.password},
        )
        wait_for(
            lambda: (
                _cycles_of(daemon, "alpha") == _cycles_of(daemon, "beta") == 1
                and daemon.events("desired_state.listening")
            ),
            timeout=20,
            what="the first tick's cycles and the listener",
        )

        await connection.execute("UPDATE playguard.marquees SET port = 2222 WHERE name = 'alpha'")
        wait_for(lambda: _cycles_of(daemon, "alpha") == 2, timeout=10, what="alpha woken")
        assert _cycles_of(daemon, "beta") == 1, "only the changed Marquee is woken"
        [woken] = daemon.events("engine.woken")
        assert woken["started"] == ["cycle:alpha"]

        postgres.server.stop()
        postgres.server.start()  # notifications sent meanwhile would be lost: a full tick
        wait_for(
            lambda: _cycles_of(daemon, "beta") == 2 and _cycles_of(daemon, "alpha") == 3,
            timeout=20,
            what="a full tick after the listener reconnected",
        )
        assert len(daemon.events("desired_state.listening")) == 2
        assert daemons.stop_all([daemon], timeout=15) == {"r1": 0}
    finally:
        await connection.close()


async def test_status_rows_match_playguard_status_json(
    daemons: DaemonRunner, postgres: LabDatabase
) -> None:
    connection = await migrated_fleet(postgres, daemons.write_inventory(["alpha", "beta"]))
    try:
        env = {"PLAYGUARD_DESIRED_STATE_PASSWORD": postgres.password}
        daemon, base = start_serving(
            daemons, tick_interval=1.0, phase_seconds=0.05, desired_state=postgres.url, env=env
        )
        scrape_until(base, lambda m: m.value(CYCLES, outcome="ok") >= 2, what="ok cycles")
        assert daemons.stop_all([daemon], timeout=15) == {"r1": 0}
        rows = {
            row["marquee"]: row
            for row in await connection.fetch(
                "SELECT * FROM playguard.marquee_status ORDER BY marquee"
            )
        }
    finally:
        await connection.close()
    shown = subprocess.run(  # noqa: ASYNC221 - the daemon is stopped; nothing else runs
        [str(PLAYGUARD), "status", "--json", "--config", str(daemon.config)],
        env={**daemons.environment(0.05), **env}, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    statuses = {entry["name"]: entry["last"] for entry in json.loads(shown.stdout)["marquees"]}

    assert sorted(rows) == sorted(statuses) == ["alpha", "beta"]
    for name, last in statuses.items():
        row = rows[name]
        assert (row["cycle"], row["outcome"], row["fence"], row["phase"], row["reason"]) == (
            last["cycle"], last["outcome"], last["fence"], last["phase"], last["reason"],
        )  # fmt: skip
        assert row["actions"] == last["actions"]
        assert row["replica"] == "r1"
        assert row["finished_at"].timestamp() == pytest.approx(last["finished_at"], abs=1e-3)
        assert set(json.loads(row["durations"])) == {"first", "second"}
