"""Issue 48: after any Redis fault the daemon cycles again, answers its probes and idles.

A daemon with its web view on (so its cycle-end subscription runs) met five faults of Redis, each
its own daemon against a Redis of its own, all at once so that one window of measuring serves
them all: a black hole longer than every timeout (iptables DROP in the daemon's network namespace:
the kernel ends the subscriber's connection with ETIMEDOUT, which redis-py 8.1's ``get_message``
took for "no message", forever, and the daemon spun), a restart without persistence, a SIGSTOP,
a Sentinel failover, and connections reset mid-message (a fault proxy). Before the fix the black
hole's daemon used 100 % of a core from 12 s into the hole (the default 15 s keepalive) and never
cycled again.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from playguard_lab import RedisServer, free_port
from playguard_lab.process import tree_cpu_seconds
from playguard_lab.topologies import SentinelGroup
from tests.support.daemon import Daemon, DaemonRunner, marquee_entry, wait_for, witness_lines
from tests.support.fault_proxy import Direction, ThreadedProxy
from tests.support.netns import Namespace
from tests.support.probes import http_get
from tests.support.web_users import write_users

pytestmark = pytest.mark.integration

TICK = 4.0
KEEPALIVE = 6.0
"""The daemons' ``redis_keepalive``: the kernel ends a black-holed connection with ETIMEDOUT
6 s into the hole (3 s idle, three probes a second apart), the fault that spun, as the default
15 s did 12 s into it."""
HOLD = 10.0
"""How long each fault lasts: longer than every timeout of the daemon's settings below,
``KEEPALIVE`` (what ends a black-holed connection) included."""
AFTER = 15.0
"""The seconds after the faults over which each daemon's CPU is measured: a spinning daemon uses
most of a core from before the fault ends (the black hole's, ``KEEPALIVE`` into it), so 15 s
tells it from an idle one (0.1 s) by two orders of magnitude, as the minute this once was did."""
CPU_SHARE = 0.2
READY_ANSWER = 1.0
"""Seconds within which /readyz must answer (200 or 503) at every probe."""
HTTP_PORT = 8081


@dataclass
class Scenario:
    """One fault, the daemon that meets it, and what its /readyz answered."""

    name: str
    redis_url: str
    inflict: Callable[[], object]
    heal: Callable[[], object]
    daemon: Daemon | None = None
    base: str = ""
    silences: list[float] = field(default_factory=list)
    """When a /readyz probe got no answer within ``READY_ANSWER``."""
    probes: int = 0

    @property
    def pid(self) -> int:
        assert self.daemon is not None
        return self.daemon.pid

    @property
    def marquees(self) -> list[str]:
        return [f"{self.name}-1", f"{self.name}-2"]


def ok_cycle_after(daemons: DaemonRunner, marquee: str, since: float) -> float | None:
    """When ``marquee``'s first whole cycle begun after ``since`` ended (witness clock)."""
    enters: dict[int, float] = {}
    for line in witness_lines(daemons.witness_dir):
        if line["marquee"] != marquee:
            continue
        if line["event"] == "enter" and line["phase"] == "first" and line["t"] > since:
            enters.setdefault(line["pid"], line["t"])
        if (
            line["event"] == "exit"
            and line["phase"] == "second"
            and line["status"] == "ok"
            and line["pid"] in enters
            and line["t"] > enters[line["pid"]]
        ):
            return float(line["t"])
    return None


def probe_readiness(scenarios: Sequence[Scenario], stop: threading.Event) -> list[threading.Thread]:
    """A thread per scenario asking its daemon's /readyz twice a second until ``stop``."""

    def probe(scenario: Scenario) -> None:
        while not stop.is_set():
            asked = time.monotonic()
            try:
                http_get(f"{scenario.base}/readyz", timeout=READY_ANSWER)
            except OSError:
                scenario.silences.append(asked)
            scenario.probes += 1
            stop.wait(max(0.0, asked + 0.5 - time.monotonic()))

    threads = [threading.Thread(target=probe, args=(s,), daemon=True) for s in scenarios]
    for thread in threads:
        thread.start()
    return threads


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[Callable[[str], RedisServer]]:
    made: list[RedisServer] = []

    def make(name: str) -> RedisServer:
        server = RedisServer(tmp_path / f"redis-{name}")
        server.start()
        made.append(server)
        return server

    try:
        yield make
    finally:
        for server in made:
            server.stop()


@pytest.mark.timeout(300)
def test_daemon_cycles_answers_and_idles_after_each_redis_fault(
    daemons: DaemonRunner,
    netns: Callable[[Sequence[int]], Namespace],
    own_redis: Callable[[str], RedisServer],
    sentinel: SentinelGroup,
    tmp_path: Path,
) -> None:
    users = write_users(tmp_path / "users", {"ad": ("admin", "correct horse battery")})
    holed, restarted, stopped, proxied = (
        own_redis(name) for name in ("hole", "restart", "stop", "reset")
    )
    namespace = netns([holed.port])
    with ThreadedProxy("127.0.0.1", proxied.port) as proxy:

        def reset_mid_message() -> None:
            # Replies trickle, so the cut finds answers half sent; new connections are cut too.
            proxy.throttle(64, (Direction.DOWN,))
            time.sleep(1.0)
            proxy.cut()

        scenarios = [
            Scenario(
                "hole",
                holed.url,
                lambda: namespace.black_hole(holed.port),
                lambda: namespace.lift(holed.port),
            ),
            Scenario("restart", restarted.url, restarted.kill, restarted.start),
            Scenario("stop", stopped.url, stopped.pause, stopped.resume),
            # The failover is the fault's end: the primary killed, a replica promoted.
            Scenario("failover", sentinel.url, lambda: None, sentinel.fail_primary),
            Scenario("reset", f"redis://127.0.0.1:{proxy.port}/0", reset_mid_message, proxy.heal),
        ]
        for scenario in scenarios:
            start_daemon(daemons, scenario, tmp_path, users, namespace)
        started = time.monotonic()
        for scenario in scenarios:
            for marquee in scenario.marquees:
                wait_for(
                    functools.partial(ok_cycle_after, daemons, marquee, started), timeout=40,
                    what=f"a first cycle of {marquee}",
                )  # fmt: skip
        stop_probing = threading.Event()
        probers = probe_readiness(scenarios, stop_probing)
        try:
            for scenario in scenarios:
                scenario.inflict()
            time.sleep(HOLD)
            healed: dict[str, float] = {}
            for scenario in scenarios:
                scenario.heal()
                healed[scenario.name] = time.monotonic()
            cpu_before = {s.name: tree_cpu_seconds(s.pid) for s in scenarios}
            time.sleep(AFTER)
            cpu = {s.name: tree_cpu_seconds(s.pid) - cpu_before[s.name] for s in scenarios}
        finally:
            stop_probing.set()
            for thread in probers:
                thread.join(5)
    print(  # the figures first: bench/README.md quotes them
        f"\nCPU seconds in the {AFTER:g} s after each fault: "
        + ", ".join(f"{name} {seconds:.2f}" for name, seconds in cpu.items())
    )
    for scenario in scenarios:
        assert scenario.daemon is not None
        assert scenario.daemon.process.poll() is None, f"{scenario.name}: the daemon ended"
        for marquee in scenario.marquees:
            back = ok_cycle_after(daemons, marquee, healed[scenario.name])
            assert back is not None, f"{scenario.name}: {marquee} never cycled after the fault"
            assert back - healed[scenario.name] <= 2 * TICK + 1.0, (
                f"{scenario.name}: {marquee} cycled {back - healed[scenario.name]:.1f} s "
                "after the fault ended"
            )
        assert scenario.probes > (HOLD + AFTER) / 1.5, f"{scenario.name}: too few probes"
        assert scenario.silences == [], (
            f"{scenario.name}: /readyz silent past {READY_ANSWER:g} s "
            f"{len(scenario.silences)} of {scenario.probes} times"
        )
        assert cpu[scenario.name] < CPU_SHARE * AFTER, (
            f"{scenario.name}: {cpu[scenario.name]:.1f} s of CPU in the {AFTER:g} s after"
        )


def start_daemon(
    daemons: DaemonRunner, scenario: Scenario, tmp_path: Path, users: Path, namespace: Namespace
) -> None:
    """``scenario``'s daemon on its Redis, with its two Marquees; the black hole's in
    ``namespace`` (its endpoints on the namespace's address), the others on loopback."""
    inventory = tmp_path / f"{scenario.name}.json"
    document = {"marquees": [marquee_entry(name) for name in scenario.marquees]}
    inventory.write_text(json.dumps(document), encoding="utf-8")
    in_hole = scenario.name == "hole"
    host = namespace.inside if in_hole else "127.0.0.1"
    port = HTTP_PORT if in_hole else free_port()
    scenario.base = f"http://{host}:{port}"
    scenario.daemon = daemons.start(
        scenario.name, wrapper=namespace.exec_prefix if in_hole else (),
        redis_url=scenario.redis_url, inventory=inventory, tick_interval=TICK, lock_ttl=30.0,
        redis_socket_timeout=2.0, redis_connect_timeout=2.0, redis_keepalive=KEEPALIVE,
        phase_seconds=0.1,
        http_address=f"{host}:{port}", web_credential_file=users,
    )  # fmt: skip
