"""What operators and service managers see of a running ``playguard run`` process: metrics scraped
from /metrics, the health endpoints, systemd's notify messages, and the image's health check.

Every daemon here is a real process against the lab's redis-server, running the witness phases.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from playguard_async.operator.command_kit import EXIT_CONFIG
from playguard_lab import RedisServer, SshServer, free_port
from tests.support.cli import hold_lock, write_mixed_fleet
from tests.support.daemon import DaemonRunner, wait_for
from tests.support.packaging import healthcheck_command
from tests.support.probes import (
    CYCLES,
    Scrape,
    answer_once,
    http_get,
    notify_socket,
    scrape,
    scrape_until,
    start_serving,
)
from tests.support.web_users import basic, write_users

pytestmark = pytest.mark.integration

WATCHDOG_USEC = "1000000"  # a heartbeat every 0.5 s


def kind(message: dict[str, str]) -> str:
    """What a notify message says besides its STATUS line."""
    others = [key for key in message if key != "STATUS"]
    return others[0] if others else "STATUS"


def test_metrics_count_cycles_phases_releases_ticks_and_headroom(daemons: DaemonRunner) -> None:
    daemons.write_inventory(["alpha", "beta"])
    daemon, base = start_serving(daemons, tick_interval=1.0, phase_seconds=0.1)
    metrics = scrape_until(
        base, lambda m: m.value(CYCLES, outcome="ok") >= 4, what="four ok cycles"
    )
    ok = metrics.value(CYCLES, outcome="ok")
    assert metrics.value(CYCLES) == ok, "one replica: no other outcome"
    assert metrics.label_values("playguard_phase_duration_seconds_count", "phase") == {
        "first",
        "second",
    }
    for phase in ("first", "second"):
        assert metrics.value("playguard_phase_duration_seconds_count", phase=phase) == ok
    # A lease is released before its cycle is counted: the releases are at least the cycles.
    assert metrics.value("playguard_lock_releases_total", result="released") >= ok
    assert metrics.value("playguard_lock_releases_total") == metrics.value(
        "playguard_lock_releases_total", result="released"
    )
    assert metrics.value("playguard_lock_lost_total") == 0
    ticks = metrics.value("playguard_tick_lag_seconds_count")
    assert ticks >= 2
    assert metrics.value("playguard_tick_lag_seconds_bucket", le="0.5") == ticks
    renewals = metrics.value("playguard_lease_headroom_seconds_count")
    assert renewals >= 2 * ok, "a renewal after every phase"
    # lock_ttl 10 s, phases of 0.1 s: each renewal finds almost the whole lease left.
    assert metrics.value("playguard_lease_headroom_seconds_bucket", le="9.0") == 0
    assert metrics.value("playguard_lease_headroom_seconds_bucket", le="10.0") == renewals
    assert metrics.value("playguard_cycles_in_flight") >= 0
    assert daemons.stop_all([daemon], timeout=10) == {"r1": 0}


LAST_SUCCESS = "playguard_marquee_last_success_timestamp_seconds"
NOT_OK = "playguard_marquee_not_ok"


def test_only_marquees_not_ok_have_series_of_their_own(
    daemons: DaemonRunner, ssh_server: SshServer, tmp_path: Path
) -> None:
    """What alerting needs per Marquee, scraped from a running daemon: one that converges, one
    whose phase fails, one out of reach and one another replica holds (which says nothing of
    its health, and is not held long enough to count as not ok). The fine ones are counted, the
    failing ones shown one by one, with the outcome as a label value."""
    write_mixed_fleet(daemons, ssh_server, tmp_path)
    daemon, base = start_serving(
        daemons, phases=["tests.support.phases:remote_probe"], tick_interval=0.5, tick_jitter=0.0
    )

    def settled(metrics: Scrape) -> bool:
        seen = {s.labels.get("marquee"): s.value for s in metrics.samples if s.name == NOT_OK}
        return min(seen.get("failing-1", 0), seen.get("gone-1", 0)) >= 2

    metrics = scrape_until(base, settled, what="two failed cycles of each failing Marquee")
    assert daemons.stop_all([daemon], timeout=10) == {"r1": 0}
    shown = {
        sample.labels["marquee"]: (sample.labels["reason"], sample.labels["outcome"])
        for sample in metrics.samples
        if sample.name == NOT_OK
    }
    held_long = shown.pop("held-1", None)  # 3 cycles found locked make it not ok too
    assert held_long in (None, ("locked", "locked"))
    assert shown == {
        "failing-1": ("failing", "phase_failed"),
        "gone-1": ("failing", "unreachable"),
    }
    assert metrics.value("playguard_marquees", outcome="ok") == 1
    assert metrics.value("playguard_marquees", outcome="phase_failed") == 1
    assert metrics.value("playguard_marquees", outcome="unreachable") == 1
    assert metrics.value("playguard_marquees", outcome="locked") == 1
    assert metrics.value("playguard_marquees_by_health", health="ok") == 1
    assert metrics.value("playguard_marquees_by_health", health="failing") == 2
    assert metrics.value("playguard_marquees_by_mode", mode="apply") == 4
    assert metrics.value("playguard_marquees_not_ok", reason="failing") == 2
    assert metrics.value("playguard_marquees_not_ok_unshown") == 0
    # Never ok here: no last success to tell; the Marquee that is ok has no series of its own.
    assert metrics.label_values(LAST_SUCCESS, "marquee") == set()


def test_a_marquee_held_elsewhere_counts_as_locked_and_replicas_split_the_rest(
    daemons: DaemonRunner,
) -> None:
    names = ["alpha", "beta", "gamma", "delta"]
    daemons.write_inventory(names)
    hold_lock(daemons.redis_url, "alpha", replica="a-holder-elsewhere")
    replicas = [
        start_serving(daemons, name, tick_interval=1.0, phase_seconds=0.2) for name in ("r1", "r2")
    ]

    def settled() -> list[Scrape] | None:
        scrapes = [scrape(f"{base}/metrics") for _, base in replicas]
        ok, locked = (sum(m.value(CYCLES, outcome=o) for m in scrapes) for o in ("ok", "locked"))
        sharing = all(m.value("playguard_replicas") == 2 for m in scrapes)
        return scrapes if sharing and ok >= 3 and locked >= 1 else None

    scrapes = wait_for(settled, timeout=30, what="both sharing, ok and locked cycles", interval=0.2)
    assigned = [metrics.value("playguard_marquees_assigned") for metrics in scrapes]
    assert sum(assigned) == len(names), assigned  # disjoint shares covering the fleet
    for metrics in scrapes:
        assert metrics.value("playguard_lock_lost_total") == 0
        assert metrics.value("playguard_lock_releases_total", result="released") == metrics.value(
            "playguard_lock_releases_total"
        )
    assert daemons.stop_all([daemon for daemon, _ in replicas], timeout=10) == {"r1": 0, "r2": 0}


def test_readyz_follows_redis_while_healthz_stays_alive(
    daemons: DaemonRunner, live_redis_server: RedisServer
) -> None:
    daemons.write_inventory(["alpha"])
    daemon, base = start_serving(daemons)  # tick 2 s, Redis timeout 1 s
    assert http_get(f"{base}/readyz") == (200, "ready: Redis answers\n")
    live_redis_server.pause()
    try:
        body = answer_once(base, "/readyz", 503)
        assert body == "not ready: Redis does not answer PING within 0.75 s\n"
        scrape_until(
            base,
            lambda m: m.value(CYCLES, outcome="redis_unavailable") >= 1,
            what="a redis_unavailable cycle",
        )
        status, body = http_get(f"{base}/healthz")
        assert (status, body.split(",")[0]) == (200, "ticking"), "a Redis outage is not a dead loop"
    finally:
        live_redis_server.resume()
    answer_once(base, "/readyz", 200)
    assert daemons.stop_all([daemon], timeout=10) == {"r1": 0}


def test_systemd_hears_ready_once_redis_answers_then_heartbeats_then_stopping(
    daemons: DaemonRunner, live_redis_server: RedisServer, tmp_path: Path
) -> None:
    daemons.write_inventory(["alpha"])
    with notify_socket(tmp_path / "notify") as manager:
        environment = {"NOTIFY_SOCKET": str(manager.path), "WATCHDOG_USEC": WATCHDOG_USEC}
        live_redis_server.pause()
        try:
            daemon = daemons.start("r1", tick_interval=1.0, env=environment)
            wait_for(lambda: daemon.events("engine.started"), timeout=20, what="engine.started")
            time.sleep(1.5)
            assert manager.receive() == [], "no READY=1 (nor anything) while Redis is silent"
        finally:
            live_redis_server.resume()
        manager.wait_for(
            lambda messages: [kind(m) for m in messages].count("WATCHDOG") >= 3,
            timeout=10,
            what="three heartbeats",
        )
        before_signal = len(manager.receive())
        daemon.send(signal.SIGTERM)
        assert daemon.wait(10) == 0
        messages = manager.receive()

    kinds = [kind(message) for message in messages]
    assert kinds[0] == "READY"
    assert set(kinds[1:before_signal]) == {"WATCHDOG"}
    assert kinds[before_signal:].count("STOPPING") == 1, kinds
    assert kinds.count("READY") == 1
    assert set(kinds) == {"READY", "WATCHDOG", "STOPPING"}
    assert all("cycles in flight" in message["STATUS"] for message in messages)


def test_stalled_tick_loop_fails_healthz_and_stops_the_watchdog_until_it_turns_again(
    daemons: DaemonRunner, tmp_path: Path
) -> None:
    # While the flag file exists, the daemon's tick hangs as one with an unbounded await would
    # (tests.support.stall), while the event loop, and with it the HTTP server and the
    # heartbeat, runs on.
    daemons.write_inventory(["alpha"])
    flag = tmp_path / "stall"
    address = f"127.0.0.1:{free_port()}"
    base = f"http://{address}"
    with notify_socket(tmp_path / "notify") as manager:
        daemon = daemons.start(
            "r1",
            http_address=address,
            tick_interval=1.0,
            phases=["tests.support.stall:phase"],
            env={
                "NOTIFY_SOCKET": str(manager.path),
                "WATCHDOG_USEC": WATCHDOG_USEC,
                "PLAYGUARD_TEST_STALL_FLAG": str(flag),
            },
        )
        manager.wait_for(lambda ms: any("READY" in m for m in ms), timeout=10, what="READY=1")
        flag.touch()

        body = answer_once(base, "/healthz", 503)
        assert body.startswith("tick loop stalled, last tick "), body
        assert http_get(f"{base}/readyz")[0] == 200, "Redis answers: ready, but not alive"
        stalled_at = len(manager.receive())
        manager.wait_for(
            lambda ms: len(ms) >= stalled_at + 3, timeout=5, what="three heartbeats while stalled"
        )
        while_stalled = manager.receive()[stalled_at:]
        assert all(kind(m) == "STATUS" for m in while_stalled), "no WATCHDOG=1 while stalled"
        assert "tick loop stalled" in while_stalled[-1]["STATUS"]

        flag.unlink()
        answer_once(base, "/healthz", 200)
        recovered_at = len(manager.receive())
        manager.wait_for(
            lambda ms: any(kind(m) == "WATCHDOG" for m in ms[recovered_at:]),
            timeout=5,
            what="heartbeat after the stall",
        )
        assert daemons.stop_all([daemon], timeout=10) == {"r1": 0}


def test_event_loop_lag_is_exported_and_a_loop_not_held_is_ready(daemons: DaemonRunner) -> None:
    daemons.write_inventory(["alpha"])
    daemon, base = start_serving(daemons, web_view=False)
    metrics = scrape(f"{base}/metrics")
    assert metrics.value("playguard_event_loop_lag_seconds") >= 0
    assert metrics.value("playguard_event_loop_held_total") >= 0
    assert http_get(f"{base}/readyz") == (200, "ready: Redis answers\n")
    assert daemons.stop_all([daemon], timeout=10) == {"r1": 0}


def test_a_phase_holding_the_event_loop_is_logged_by_name_counted_and_unready(
    daemons: DaemonRunner,
) -> None:
    # Every cycle's phase blocks the loop for 5 bounds (tests.support.hold_loop), as a reader
    # that never waits would; the watchdog's thread runs on beside it.
    daemons.write_inventory(["alpha"])
    daemon, base = start_serving(
        daemons,
        web_view=False,
        loop_lag_bound=0.2,
        phases=["tests.support.hold_loop:phase"],
        env={"PLAYGUARD_TEST_HOLD_SECONDS": "1.0"},
    )
    body = answer_once(base, "/readyz", 503)
    assert body.startswith("not ready: event loop lagging "), body
    assert body.endswith(" s (bound 0.2 s)\n"), body

    def held_by_the_phase() -> list[dict[str, Any]]:
        return [
            line
            for line in daemon.events("loop.held")
            if line["where"]
            and line["where"][0].startswith("HoldingPhase.__call__ (tests/support/hold_loop.py:")
        ]

    held = wait_for(held_by_the_phase, timeout=20, what="a loop.held line naming the phase")
    assert held[0]["held_seconds"] > 0.2
    assert held[0]["level"] == "warning"
    metrics = scrape_until(
        base, lambda m: m.value("playguard_event_loop_held_total") >= 1, what="a hold counted"
    )
    assert metrics.value("playguard_event_loop_lag_seconds") > 0.2
    assert daemons.stop_all([daemon], timeout=15) == {"r1": 0}


def test_image_healthcheck_passes_against_live_healthz_and_fails_without_it(
    daemons: DaemonRunner,
) -> None:
    daemons.write_inventory(["alpha"])
    daemon, base = start_serving(daemons)
    python, *arguments = healthcheck_command()
    assert python == "python"
    environment = {
        "PATH": os.environ.get("PATH", ""),
        "PLAYGUARD_HTTP_ADDRESS": base.removeprefix("http://"),
        # A proxy that would refuse everything: the check must not go through it.
        "http_proxy": f"http://127.0.0.1:{free_port()}",
    }

    def health_check() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *arguments],
            env=environment,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    passed = health_check()
    assert passed.returncode == 0, passed.stderr
    assert daemons.stop_all([daemon], timeout=10) == {"r1": 0}
    failed = health_check()
    assert failed.returncode != 0
    assert "Connection refused" in failed.stderr


def _answer(url: str, headers: dict[str, str]) -> int:
    """The status of a GET with ``headers`` (a Host of our choosing included)."""
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
            request, timeout=5
        ) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        with error:
            return error.code


def test_metrics_behind_the_credential_and_a_rebinding_host_refused_by_a_real_daemon(
    daemons: DaemonRunner, tmp_path: Path
) -> None:
    daemons.write_inventory(["alpha"])
    users = write_users(tmp_path / "users", {"prometheus": ("viewer", "s3cret")})
    daemon, base = start_serving(
        daemons,
        web_credential_file=users,
        metrics_require_credential=True,
        http_allowed_hosts=["playguard.internal"],
    )
    scraper = {"Authorization": basic("prometheus", "s3cret")}
    assert _answer(f"{base}/metrics", {}) == 401
    assert _answer(f"{base}/metrics", {"Authorization": "Bearer \xff\xfe"}) == 401
    assert _answer(f"{base}/metrics", {"Authorization": "Bearer s3cret"}) == 401
    assert _answer(f"{base}/metrics", scraper) == 200
    assert _answer(f"{base}/healthz", {}) == 200
    for path in ("/healthz", "/metrics", "/"):
        assert _answer(f"{base}{path}", {**scraper, "Host": "evil.example"}) == 421
    assert _answer(f"{base}/healthz", {"Host": "playguard.internal:9464"}) == 200
    assert _answer(f"{base}/", {**scraper, "Host": "localhost"}) == 200
    assert daemons.stop_all([daemon], timeout=10) == {"r1": 0}
    assert "Traceback" not in daemon.stderr()


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_a_credential_file_others_may_read_stops_the_start_with_one_line(
    daemons: DaemonRunner, tmp_path: Path, mode: int
) -> None:
    daemons.write_inventory(["alpha"])
    credential = tmp_path / "credential"
    credential.write_text("s3cret\n")
    credential.chmod(mode)
    daemon = daemons.start(
        "r1", http_address=f"127.0.0.1:{free_port()}", web_credential_file=credential
    )
    assert daemon.wait(15) == EXIT_CONFIG
    [line] = daemon.stderr().splitlines()
    assert line == (
        f"Error: web_credential_file {credential}: mode {mode:04o} lets group or others read or "
        "write it: chmod 600 it"
    )
