"""What a real daemon and the operator commands tell their operators is safe and machine-readable:
a marker token put into every URL the daemon is given reaches no output and no Redis value, and
every line a daemon writes in the json format is one JSON object, OpenTelemetry's own lines with
its collector down included (README "Observability", "Configuration reference")."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
from collections.abc import Iterator
from typing import Any, NamedTuple
from urllib.parse import quote

import pytest
from redis import Redis as SyncRedis

from playguard_lab.process import free_port
from tests.integration.test_secrets import redis_dump
from tests.support.cli import Playguard
from tests.support.daemon import Daemon, DaemonRunner, marquee_entry, wait_for

pytestmark = pytest.mark.integration

MARKER = "MarkerT0ken"


class Placement(NamedTuple):
    settings: dict[str, object]
    repo: str
    refused: str | None  # the place a refusal names; None: taken, and masked wherever shown


def placements(redis_port: int) -> dict[str, Placement]:
    closed = free_port()
    plain_repo = f"http://127.0.0.1:{closed}/o/r.git"
    return {
        "playspec_repo": Placement(
            {}, f"https://deploy:{MARKER}@127.0.0.1:{closed}/o/r.git", "playspecs[0].repo"
        ),
        "playspec_repo_token_as_user": Placement(
            {}, f"https://{MARKER}@127.0.0.1:{closed}/o/r.git", "playspecs[0].repo"
        ),
        "redis_url": Placement(
            {"redis_url": f"redis://default:{MARKER}@127.0.0.1:{redis_port}/0"}, plain_repo, None
        ),
        "desired_state": Placement(
            {"desired_state": f"postgresql://app:{MARKER}@127.0.0.1:{closed}/fleet"},
            plain_repo,
            "desired_state",
        ),
        "otlp_endpoint": Placement(
            {"otlp_endpoint": f"https://app:{MARKER}@127.0.0.1:{closed}/v1/traces"},
            plain_repo,
            "otlp_endpoint",
        ),
        "webhook_url": Placement(
            {"webhook_url": f"http://127.0.0.1:{closed}/hooks/{MARKER}"}, plain_repo, None
        ),
    }


PLACES = sorted(placements(0))


def inventory(repo: str) -> dict[str, Any]:
    return {
        "marquees": [marquee_entry("m1")],
        "playspecs": [{"name": "app", "repo": repo}],
        "playgrounds": [{"name": "pg", "playspec": "app", "marquee": "m1", "branch": "main"}],
    }


def run_briefly(daemons: DaemonRunner, settings: dict[str, object]) -> Daemon:
    """A daemon with ``settings`` at debug level for three ticks (or until it stops by itself:
    refused settings), then stopped."""
    values = daemons.settings("sweep", tick_interval=1.0, log_level="debug", **settings)
    daemon = daemons.start("sweep", config=daemons.write_settings("sweep", values))
    wait_for(lambda: len(daemon.events("engine.tick")) >= 3 or daemon.process.poll() is not None,
             timeout=60, what="three ticks")  # fmt: skip
    if daemon.process.poll() is None:
        daemon.send(signal.SIGTERM)
    daemon.wait(30)
    return daemon


@pytest.mark.parametrize("place", PLACES)
def test_a_marker_token_in_any_url_reaches_no_output_and_no_redis_value(
    playguard: Playguard, daemons: DaemonRunner, store: SyncRedis, place: str
) -> None:
    redis_port = int(daemons.redis_url.rsplit(":", 1)[1].split("/")[0])
    placement = placements(redis_port)[place]
    playguard.configure(inventory(placement.repo), **placement.settings)
    commands = [
        ("check", "--json", "--timeout", "2"),
        ("plan", "m1", "--json"),
        ("--debug", "status"),
        ("describe", "m1"),
    ]
    outputs = {}
    for args in commands:
        done = playguard(*args)
        outputs[" ".join(args)] = done.stdout + done.stderr
    daemon = run_briefly(daemons, placement.settings)
    outputs["daemon log"] = daemon.stderr()
    outputs["Redis"] = redis_dump(store)
    if placement.refused is not None:
        assert placement.refused in outputs["daemon log"], outputs["daemon log"]
        assert placement.refused in outputs["check --json --timeout 2"]
    for where, text in outputs.items():
        for shown in (MARKER, quote(MARKER, safe="")):
            assert shown not in text, f"{place}: the token is in {where}:\n{text}"


@contextlib.contextmanager
def collector(state: str) -> Iterator[int]:
    """A port where the trace collector is ``down`` (nothing listens) or ``silent`` (the kernel
    accepts connections into a backlog nobody takes from: every export waits out its timeout)."""
    if state == "down":
        yield free_port()
        return
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener.getsockname()[1]


@pytest.mark.parametrize("state", ["down", "silent"])
def test_every_line_is_json_with_the_trace_collector_down_or_silent(
    daemons: DaemonRunner, state: str
) -> None:
    daemons.write_inventory(["m1", "m2"])
    with collector(state) as port:
        every_line_json_while_tracing_to(daemons, port)


def every_line_json_while_tracing_to(daemons: DaemonRunner, port: int) -> None:
    daemon = daemons.start(
        "traced",
        tick_interval=1.0,
        otlp_endpoint=f"http://127.0.0.1:{port}/v1/traces",
        otlp_timeout=0.5,
        trace_queue_size=4,
        trace_sample_ratio=1.0,
    )
    try:
        wait_for(
            lambda: any(
                str(line.get("logger", "")).startswith("opentelemetry") for line in daemon.events()
            ),
            timeout=60,
            what="OpenTelemetry's own warning about the collector",
        )
        wait_for(lambda: daemon.events("cycle.finished"), timeout=30, what="a cycle")
    finally:
        daemon.send(signal.SIGTERM)
        daemon.wait(30)
    lines = daemon.stderr().splitlines()
    assert lines
    for line in lines:
        decoded = json.loads(line)
        assert isinstance(decoded, dict), line
        assert {"event", "level", "timestamp"} <= decoded.keys(), line
