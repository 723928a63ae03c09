"""Soak: 3 ``playguard run`` replicas x 10 real Marquees under a seeded random schedule of faults.

Every replica runs in a network namespace of its own (``tests.support.netns``) and reaches Redis
through a fault proxy of its own, and every Marquee (one lab sshd, ten state directories) through
one of its own, so link faults hit one replica's Redis or one host: a stall (open, no byte
moves), a 1 s delay each way, a throttle, a cut, and a black hole (iptables DROP in the replica's
namespace, one way or both, between it and its Redis or one host). Between them the
process faults the tests use: a replica SIGKILLed and restarted, a replica SIGSTOPped past its
ttl, Redis paused, Redis killed and restarted empty. One fault at a time, each held for a few
seconds, then healed; the last ``CALM`` seconds have none. Every cycle writes to its Marquee
through the fenced funnel (``tests.support.phases:windowed_write``).

Afterwards the hosts judge, as in ``tests/integration/test_chaos.py``: on each, the fences of the
guard's journal never go down and match what ran, 0 writes ran from a fence below one already
accepted, no two write windows overlapped, every Marquee was written again once the faults
ended; no lock key is left once the replicas stopped (each exits 0 on SIGTERM). And each
replica's RSS and open files at the start (after a warm-up) and at the end (after the calm).
One summary line; exit status 1 when a check fails.

    .venv/bin/python bench/soak.py [--minutes 30] [--seed 1]

Starts its own redis-server and sshd from the lab on ephemeral loopback ports; sends nothing
anywhere else. Not part of the pytest run; ``scripts/test.sh`` runs it for 5 minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # the test support: the lab's daemons, phases, fault proxy

from redis import Redis  # noqa: E402

from playguard_async.coordination.keys import marquee_lock_key  # noqa: E402
from playguard_lab import RedisServer, SshServer  # noqa: E402
from tests.support.daemon import Daemon, DaemonRunner, witness_lines  # noqa: E402
from tests.support.fault_proxy import ThreadedProxy  # noqa: E402
from tests.support.fencing import host_records, journal, stale_writes  # noqa: E402
from tests.support.netns import Direction, Namespace, network_namespace  # noqa: E402
from tests.support.world import ssh_marquee_through  # noqa: E402

REPLICAS = ("r1", "r2", "r3")
MARQUEES = tuple(f"m{index:02d}" for index in range(10))
TTL = 6.0
TICK = 2.0
WARM_UP = 20.0
"""Seconds of calm before the first fault; RSS and open files are read at its end."""
CALM = 40.0
"""Seconds without faults at the end: the fleet converges, idle SSH connections expire."""
FD_SLACK = 16
"""Open files a replica may hold beyond its warm-up count at the end (Redis pool connections
are kept once made); more is a leak."""
SETTINGS: dict[str, Any] = {
    "phases": ["tests.support.phases:windowed_write"],
    "lock_ttl": TTL,
    "tick_interval": TICK,
    "redis_socket_timeout": 1.0,
    "redis_connect_timeout": 1.0,
    "redis_keepalive": 3.0,
    "remote_command_timeout": 2.5,
    "docker_api_timeout": 2.5,
    "ssh_connect_timeout": 3.0,
    "ssh_keepalive_interval": 2.0,
    "ssh_keepalive_count_max": 2,
    "ssh_pool_idle_timeout": 3 * TICK,
    "max_concurrent_cycles": 10,
    "shutdown_grace": 5.0,
}


@dataclass
class Soak:
    """The lab, the fleet, its proxies and the faults done to it, on one time line."""

    workdir: Path
    redis_server: RedisServer
    ssh: SshServer
    rng: random.Random
    namespaces: contextlib.ExitStack
    daemons: DaemonRunner = field(init=False)
    redis_links: dict[str, ThreadedProxy] = field(default_factory=dict)
    host_links: dict[str, ThreadedProxy] = field(default_factory=dict)
    fleet: dict[str, Daemon] = field(default_factory=dict)
    netns: dict[str, Namespace] = field(default_factory=dict)
    faults: Counter[str] = field(default_factory=Counter)
    window_dir: Path = field(init=False)
    started_at: dict[str, float] = field(default_factory=dict)
    baseline: dict[str, Usage] = field(default_factory=dict)
    """Each replica's usage ``WARM_UP`` seconds after its (last) start."""

    def __post_init__(self) -> None:
        self.daemons = DaemonRunner(self.workdir / "daemons", self.redis_server.url)
        self.window_dir = self.workdir / "windows"
        self.window_dir.mkdir()

    def open_links(self) -> None:
        for replica in REPLICAS:
            self.redis_links[replica] = ThreadedProxy("127.0.0.1", self.redis_server.port)
            self.redis_links[replica].__enter__()
        for marquee in MARQUEES:
            self.host_links[marquee] = ThreadedProxy(self.ssh.host, self.ssh.port)
            self.host_links[marquee].__enter__()
        self.daemons.write_inventory(
            MARQUEES,
            lambda name: ssh_marquee_through(
                self.ssh, self.host_links[name].port, name, self.workdir / "hosts" / name
            ),
        )
        host_ports = [link.port for link in self.host_links.values()]
        for replica in REPLICAS:
            ports = [self.redis_links[replica].port, *host_ports]
            self.netns[replica] = self.namespaces.enter_context(network_namespace(ports))

    def start(self, replica: str) -> None:
        self.started_at[replica] = time.monotonic()
        self.fleet[replica] = self.daemons.start(
            replica,
            wrapper=self.netns[replica].exec_prefix,
            phase_seconds=0.3,
            env={"PLAYGUARD_TEST_HOST_WINDOW_DIR": str(self.window_dir)},
            redis_url=f"redis://127.0.0.1:{self.redis_links[replica].port}/0",
            **SETTINGS,
        )

    def take_baselines(self) -> None:
        """Read the usage of each replica process warm for ``WARM_UP`` s and not read yet."""
        for replica, daemon in self.fleet.items():
            known = self.baseline.get(replica)
            warm = time.monotonic() - self.started_at[replica] >= WARM_UP
            if warm and (known is None or known.pid != daemon.pid):
                self.baseline[replica] = usage(daemon.pid)

    def close(self) -> None:
        self.daemons.kill_all()
        for link in [*self.redis_links.values(), *self.host_links.values()]:
            link.close()

    # -- faults: each returns its undo ------------------------------------------------------

    def link_fault(self) -> Callable[[], None]:
        kind = self.rng.choice(("stall", "delay", "throttle", "cut"))
        if self.rng.random() < 0.5:
            link, where = self.redis_links[self.rng.choice(REPLICAS)], "Redis link"
        else:
            link, where = self.host_links[self.rng.choice(MARQUEES)], "host link"
        self.faults[f"{kind} {where}"] += 1
        if kind == "stall":
            link.stall()
        elif kind == "delay":
            link.delay(1.0)
        elif kind == "throttle":
            link.throttle(2_000.0)
        else:
            link.cut()
        return link.heal

    def black_hole(self) -> Callable[[], None]:
        replica = self.rng.choice(REPLICAS)
        direction: Direction = self.rng.choice(("out", "in", "both"))
        if self.rng.random() < 0.5:
            port, where = self.redis_links[replica].port, "Redis"
        else:
            port, where = self.host_links[self.rng.choice(MARQUEES)].port, "host"
        namespace = self.netns[replica]
        namespace.black_hole(port, direction)
        self.faults[f"DROP {where} {direction}"] += 1
        return lambda: namespace.lift(port, direction)

    def kill(self) -> Callable[[], None]:
        replica = self.rng.choice(REPLICAS[1:])  # r1 lives the whole run: its usage is the trend
        self.fleet[replica].send(signal.SIGKILL)
        self.fleet[replica].wait(10)
        self.faults["SIGKILL replica"] += 1
        return lambda: self.start(replica)

    def freeze(self) -> Callable[[], None]:
        replica = self.rng.choice(REPLICAS)
        daemon = self.fleet[replica]
        daemon.send(signal.SIGSTOP)
        self.faults["SIGSTOP replica"] += 1

        def thaw() -> None:
            daemon.send(signal.SIGCONT)

        return thaw

    def pause_redis(self) -> Callable[[], None]:
        self.redis_server.pause()
        self.faults["Redis paused"] += 1
        return self.redis_server.resume

    def restart_redis(self) -> Callable[[], None]:
        self.redis_server.kill()
        self.redis_server.start()
        self.faults["Redis restarted empty"] += 1
        return lambda: None

    def one_fault(self) -> tuple[Callable[[], None], float]:
        """A fault, done now, its undo and how long to hold it."""
        pick = self.rng.random()
        if pick < 0.4:
            return self.link_fault(), self.rng.uniform(2.0, 10.0)
        if pick < 0.6:
            return self.black_hole(), self.rng.uniform(2.0, 20.0)
        if pick < 0.72:
            return self.kill(), self.rng.uniform(1.0, 4.0)
        if pick < 0.84:
            return self.freeze(), TTL + self.rng.uniform(1.0, 3.0)
        if pick < 0.94:
            return self.pause_redis(), self.rng.uniform(1.0, 4.0)
        return self.restart_redis(), 0.0


@dataclass(frozen=True)
class Usage:
    pid: int
    rss_mib: float
    files: int


def usage(pid: int) -> Usage:
    """A process's resident memory and open files now."""
    status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    rss_kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS"))
    return Usage(pid, rss_kib / 1024, len(list(Path(f"/proc/{pid}/fd").iterdir())))


def overlapping_windows(window_dir: Path) -> list[str]:
    """Write windows on one Marquee that overlapped: a torn line (another write's start landed
    inside) or a window that starts before the previous one ended."""
    problems = []
    for path in sorted(window_dir.iterdir()):
        previous_end = 0
        for line in path.read_text(encoding="utf-8").splitlines():
            fields = line.split()
            if len(fields) != 4:
                problems.append(f"{path.name}: torn window line {line!r}")
                continue
            start, end = int(fields[2]), int(fields[3])
            if start < previous_end:
                problems.append(f"{path.name}: window {line!r} starts before the last ended")
            previous_end = end
    return problems


@dataclass
class Verdict:
    """What the hosts, Redis and the replicas' processes say once the run is over."""

    writes: int
    refused: int
    stale: int
    fence_regressions: int
    journal_mismatch: list[str]
    overlaps: list[str]
    converged: int
    lock_keys: int
    exits: dict[str, int]
    before: dict[str, Usage]
    after: dict[str, Usage]

    def problems(self) -> list[str]:
        found = [f"{replica} exited {status} on SIGTERM" for replica, status in self.exits.items()
                 if status]  # fmt: skip
        found += [f"{name} {count}" for name, count in (
            ("stale writes accepted", self.stale), ("fence regressions", self.fence_regressions),
            ("lock keys left", self.lock_keys)) if count]  # fmt: skip
        found += [f"journal and writes disagree on {name}" for name in self.journal_mismatch]
        found += self.overlaps
        if self.converged != len(MARQUEES):
            found.append(f"converged {self.converged}/{len(MARQUEES)}")
        found += [
            f"{replica} open files {self.before[replica].files} -> {self.after[replica].files}"
            for replica in REPLICAS
            if self.after[replica].files > self.before[replica].files + FD_SLACK
        ]
        return found

    def line(self, minutes: float, seed: int, faults: Counter[str]) -> str:
        kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(faults.items()))
        rss = " ".join(
            f"{r} {self.before[r].rss_mib:.0f}->{self.after[r].rss_mib:.0f}" for r in REPLICAS
        )
        files = " ".join(f"{r} {self.before[r].files}->{self.after[r].files}" for r in REPLICAS)
        problems = self.problems()
        return (
            f"soak: {minutes:g} min, seed {seed}, {len(REPLICAS)} replicas x {len(MARQUEES)} "
            f"Marquees; faults {sum(faults.values())} ({kinds}); writes accepted {self.writes}, "
            f"refused {self.refused}; stale accepted {self.stale}; fence regressions "
            f"{self.fence_regressions}; overlapping windows {len(self.overlaps)}; converged "
            f"{self.converged}/{len(MARQUEES)}; lock keys left {self.lock_keys}; RSS MiB {rss}; "
            f"open files {files}; " + ("ok" if not problems else "FAILED: " + "; ".join(problems))
        )


def judge(
    soak: Soak, store: Redis, calm_from: float, exits: dict[str, int], after: dict[str, Usage]
) -> Verdict:
    """The hosts' verdict, and what is left in Redis once every replica stopped."""
    ran = host_records(soak.daemons.host_record_dir)
    regressions = 0
    mismatched = []
    for marquee in MARQUEES:
        fences = [fence for name, fence, _ in ran if name == marquee]
        accepted = [entry.fence for entry in journal(soak.workdir / "hosts" / f"{marquee}-state")]
        regressions += sum(later < earlier for earlier, later in itertools.pairwise(accepted))
        if accepted != fences:
            mismatched.append(marquee)
    writes = [line for line in witness_lines(soak.daemons.witness_dir) if line["event"] == "write"]
    converged = {
        line["marquee"]
        for line in writes
        if line["outcome"] == "accepted" and line["t"] > calm_from + TTL
    }
    return Verdict(
        writes=len(ran),
        refused=sum(line["outcome"] == "refused" for line in writes),
        stale=len(stale_writes(soak.daemons.host_record_dir)),
        fence_regressions=regressions,
        journal_mismatch=mismatched,
        overlaps=overlapping_windows(soak.window_dir),
        converged=len(converged),
        lock_keys=len(list(store.scan_iter(match=marquee_lock_key("*")))),
        exits=exits,
        before=dict(soak.baseline),
        after=after,
    )


def run(minutes: float, seed: int, workdir: Path) -> int:
    rng = random.Random(seed)
    with RedisServer(workdir / "redis") as redis_server, SshServer(
        workdir / "sshd", max_startups=64
    ) as ssh, Redis.from_url(redis_server.url, socket_timeout=2) as store:  # fmt: skip
        namespaces = contextlib.ExitStack()
        soak = Soak(workdir, redis_server, ssh, rng, namespaces)
        try:
            soak.open_links()
            for replica in REPLICAS:
                soak.start(replica)
            started = time.monotonic()
            time.sleep(WARM_UP)
            soak.take_baselines()
            faults_until = started + minutes * 60 - CALM
            while time.monotonic() < faults_until:
                undo, hold = soak.one_fault()
                time.sleep(max(0.0, min(hold, faults_until - time.monotonic())))
                undo()
                time.sleep(rng.uniform(1.0, 4.0))
                soak.take_baselines()
            redis_server.ensure_running()
            calm_from = time.monotonic()
            time.sleep(max(0.0, started + minutes * 60 - time.monotonic()))
            soak.take_baselines()
            after = {replica: usage(soak.fleet[replica].pid) for replica in REPLICAS}
            exits = soak.daemons.stop_all(list(soak.fleet.values()), timeout=15)
            verdict = judge(soak, store, calm_from, exits, after)
        finally:
            soak.close()  # the daemons first: a process left inside keeps its namespace
            namespaces.close()
    print(verdict.line(minutes, seed, soak.faults), flush=True)
    return 1 if verdict.problems() else 0


def main() -> int:
    parser = argparse.ArgumentParser(description="3 replicas x 10 Marquees under random faults")
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the run")
    parser.add_argument("--seed", type=int, default=1, help="seed of the fault schedule")
    args = parser.parse_args()
    if args.minutes * 60 < WARM_UP + CALM + 10:
        parser.error(f"--minutes must leave room for {WARM_UP + CALM + 10:g} s of warm-up and calm")
    with tempfile.TemporaryDirectory(prefix="playguard-soak-") as workdir:
        return run(args.minutes, args.seed, Path(workdir))


if __name__ == "__main__":
    sys.exit(main())
