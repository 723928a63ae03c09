"""What a running ``playguard run`` tells the people on call, read from its real log: a failed
cycle's ``cycle.finished`` stands out (warning or error, the outcome first), a skipped one stays
quiet, and a Redis outage is told once per change of state, not per Marquee per tick."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from playguard_async.lab import SshServer
from tests.support.cli import hold_lock
from tests.support.daemon import Daemon, DaemonRunner, marquee_entry, wait_for
from tests.support.world import ssh_marquee

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
    entries = [
        ssh_marquee(ssh_server, "reachable", tmp_path / "reachable"),
        ssh_marquee(ssh_server, "failing-1", tmp_path / "failing"),
        marquee_entry("gone-1"),  # its identity file does not exist
        marquee_entry("held-1"),
    ]
    daemons.inventory.write_text(json.dumps({"marquees": entries}), encoding="utf-8")
    hold_lock(daemons.redis_url, "held-1")
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
