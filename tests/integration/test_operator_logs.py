"""What a running ``playguard run`` tells the people on call, read from its real log: a failed
cycle's ``cycle.finished`` stands out (warning or error, the outcome first), a skipped one stays
quiet, and a Redis outage is told once per change of state, not per Marquee per tick."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from playguard_lab import RedisServer, SshServer
from tests.support.cli import write_mixed_fleet
from tests.support.daemon import Daemon, DaemonRunner, wait_for

pytestmark = pytest.mark.integration

EXPECTED_LEVELS = {
    "reachable": ("ok", "info"),
    "failing-1": ("phase_failed", "warning"),
    "gone-1": ("unreachable", "warning"),
    "held-1": ("locked", "debug"),
}


def finished_by_marquee(daemon: Daemon) -> dict[str, dict[str, Any]]:
    return {str(line["marquee"]): line for line in daemon.events("cycle.finished")}


def test_cycle_finished_is_logged_at_the_level_of_its_outcome_with_the_outcome_first(
    daemons: DaemonRunner, ssh_server: SshServer, tmp_path: Path
) -> None:
    write_mixed_fleet(daemons, ssh_server, tmp_path)
    run = daemons.start(
        "r1", phases=["tests.support.phases:remote_probe"], log_level="debug", tick_jitter=0.0
    )

    def every_marquee_finished() -> dict[str, dict[str, Any]] | None:
        seen = finished_by_marquee(run)
        return seen if seen.keys() >= EXPECTED_LEVELS.keys() else None

    finished = wait_for(every_marquee_finished, timeout=30, what="a cycle.finished of each")
    for marquee, (outcome, level) in EXPECTED_LEVELS.items():
        line = finished[marquee]
        assert (line["outcome"], line["level"]) == (outcome, level), line
        assert next(iter(line)) == "outcome", f"the outcome comes first: {line}"
    assert str(finished["gone-1"]["reason"]).startswith("identity_file /nonexistent/id: ")
    assert finished["failing-1"]["failed_phase"] == "probe"


OUTAGE_EVENTS = {"redis.down", "redis.still_down", "redis.back"}


def test_a_redis_outage_is_told_once_per_change_of_state_not_per_marquee_per_tick(
    daemons: DaemonRunner, live_redis_server: RedisServer
) -> None:
    names = [f"m{index}" for index in range(4)]
    daemons.write_inventory(names)
    run = daemons.start(
        "r1", phase_seconds=0.05, tick_interval=0.5, redis_down_log_interval=1.0, tick_jitter=0.0
    )
    wait_for(lambda: len(run.events("cycle.finished", outcome="ok")) >= 4, timeout=20, what="ok")
    live_redis_server.kill()
    try:
        wait_for(lambda: len(run.events("redis.still_down")) >= 2, timeout=20, what="reminders")
    finally:
        live_redis_server.restart()
    [back] = wait_for(lambda: run.events("redis.back"), timeout=20, what="redis.back")
    served = len(run.events("cycle.finished", outcome="ok"))
    wait_for(
        lambda: len(run.events("cycle.finished", outcome="ok")) >= served + len(names),
        timeout=20,
        what="ok cycles after the outage",
    )

    lines = run.events()
    told = [line for line in lines if line["event"] in OUTAGE_EVENTS]
    down = next(index for index, line in enumerate(lines) if line["event"] == "redis.down")
    assert [line["event"] for line in told][:1] == ["redis.down"]
    assert [line["event"] for line in told].count("redis.down") == 1
    assert told[-1] == back, "nothing is told after Redis is back"
    assert back["down_for"] >= 2.0, back
    assert back["failed_calls"] >= 2 * len(names), "the outage lasted several ticks"
    reminders = [line for line in told if line["event"] == "redis.still_down"]
    assert all(line["down_for"] >= 1.0 for line in reminders), reminders
    assert len(reminders) <= back["down_for"] / 1.0 + 1, "a reminder every interval, no more"
    # Besides the outage's own lines, only the cycles in flight when Redis went may say they
    # lost their lease (lost, released unknown, finished): nothing per Marquee per tick.
    loud = [
        line["event"]
        for line in lines[down:]
        if line["level"] in ("warning", "error") and line["event"] not in OUTAGE_EVENTS
    ]
    assert len(loud) <= 3 * len(names), loud
    assert "Traceback" not in run.stderr()
