"""A flood of idle connections from clients with no credential against a real ``playguard run``
whose open-files limit is low (``prlimit``): its cycles keep ending ok, /healthz keeps
answering, and what the caps refused is counted and told once."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.support.daemon import DaemonRunner, wait_for
from tests.support.flood import Flood
from tests.support.probes import CYCLES, http_get, scrape, start_serving

pytestmark = pytest.mark.integration

OPEN_FILES = 300
"""The daemon's limit (soft and hard): the flood alone offers twice as many connections."""

SOURCES = [f"127.0.2.{number}" for number in range(1, 5)]
PER_SOURCE = 150
PER_CLIENT = 16
FLOOD_SECONDS = 8.0
HEADER_TIMEOUT = 2.0
REFUSED = "playguard_http_connections_refused_total"


def cycles_by_outcome(base: str) -> dict[str, float]:
    samples = scrape(f"{base}/metrics").samples
    return {sample.labels["outcome"]: sample.value for sample in samples if sample.name == CYCLES}


async def test_an_idle_connection_flood_under_a_low_file_limit_leaves_cycles_ok_and_probes_answered(
    daemons: DaemonRunner,
) -> None:
    daemons.write_inventory([f"m-{number}" for number in range(4)])
    daemon, base = start_serving(
        daemons,
        "r1",
        wrapper=["prlimit", f"--nofile={OPEN_FILES}:{OPEN_FILES}", "--"],
        phase_seconds=0.05,
        tick_interval=1.0,
        ssh_pool_size=16,
        redis_max_connections=8,
        http_header_timeout=HEADER_TIMEOUT,
        http_connections_per_client=PER_CLIENT,
    )
    wait_for(lambda: cycles_by_outcome(base).get("ok", 0) >= 4, timeout=30, what="first cycles")
    before = cycles_by_outcome(base)
    probes: list[int] = []
    held: list[float] = []
    port = int(base.rpartition(":")[2])
    async with Flood(port=port, sources=SOURCES, per_source=PER_SOURCE) as flood:
        deadline = time.monotonic() + FLOOD_SECONDS
        while time.monotonic() < deadline:
            status, _ = await asyncio.to_thread(http_get, f"{base}/healthz", timeout=2)
            probes.append(status)
            metrics = await asyncio.to_thread(scrape, f"{base}/metrics")
            held.append(metrics.value("playguard_http_connections"))
            await asyncio.sleep(0.5)
        closed = flood.closed_by_server
    after = cycles_by_outcome(base)
    assert set(probes) == {200}, probes
    not_ok = {outcome: after[outcome] - before.get(outcome, 0) for outcome in after}
    assert not_ok.pop("ok") >= 4 * FLOOD_SECONDS / 2, (before, after)
    assert set(not_ok.values()) == {0}, not_ok
    assert max(held) <= len(SOURCES) * PER_CLIENT + 1, "held past the per-client cap"
    assert max(held) >= len(SOURCES) * PER_CLIENT / 2, "the flood reached the server"
    assert closed >= len(SOURCES) * PER_SOURCE, "every flooding connection was closed"
    metrics = scrape(f"{base}/metrics")
    assert metrics.value(REFUSED, reason="connections_per_client") > 0
    assert metrics.value(REFUSED, reason="connections_total") == 0
    [room] = daemon.events("http.connection_room")
    assert room["open_files"] == OPEN_FILES
    assert room["files_left"] >= 0
    refused_lines = daemon.events("http.refused")
    assert len(refused_lines) == 1, "told once a minute at most"
    assert not [line for line in daemon.events() if "Too many open files" in str(line)]
