"""What a converged Marquee costs its host, before and after, side by side in one run.

Starts a lab (redis-server, registry, git origin, ONE sshd + dockerd standing for the host) and
runs the daemon's own engine (``wiring.build_engine``, all seven phases, real lock) against it:

1. ``one``: a Marquee with ``--playgrounds`` Playgrounds (20), converged first, then
   ``--cycles`` cycles that have nothing to do;
2. ``fleet``: ``--fleet`` Marquees (50) sharing that host (``lab.shared_host``: a workdir,
   state directory and project names of their own each), ``--fleet-playgrounds`` each, converged,
   then ``--ticks`` ticks of the whole fleet.

Each is measured twice, in child processes: "before" runs the code of git ref ``--before`` (by
default where this branch left main), extracted to a scratch directory with the current lab
package over it, so both are driven and measured alike; "after" runs this checkout. Per cycle
(per tick for the fleet) it prints wall seconds, the host's CPU seconds (the sshd tree: sessions,
shells, git, compose; plus the dockerd tree, from /proc), SSH channels and connections opened,
compose and ``ls-remote`` runs and Docker API calls, and the Redis commands the replica sent (from
``INFO commandstats``: all of them, and those that are not reads; EVAL/EVALSHA count as writes
here, whatever their script does), then after/before as ratios.

With ``--cold``, ``one`` is also measured as ``--cycles`` fresh processes, each running one
cycle of the converged Marquee (a restarted daemon, a replica taking it over, an operator's
``cycle``), and their cost is printed beside a warm cycle's, for both code versions.

    .venv/bin/python bench/converged_marquee.py [--playgrounds 20] [--cycles 3] [--cold]
        [--fleet 50] [--fleet-playgrounds 1] [--ticks 2] [--before REF]

Never part of the tests. Takes several minutes: converging starts every container once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import asyncssh
from code_versions import ROOT, extract, git_output
from redis import Redis

from playguard_lab import Lab
from playguard_lab.process import descendants, tree_cpu_seconds
from playguard_lab.shared_host import shared_host_inventory, write_inventory

FIGURES = (
    "wall", "host_cpu", "channels", "connections", "compose", "ls_remote", "docker_api",
    "redis_cmds", "redis_writes",
)  # fmt: skip


# ---- the child: cycles of one code version, counted -------------------------------------------


class Counts:
    """What the child's asyncssh and aiohttp did, counted where every caller passes."""

    def __init__(self, compose_command: str) -> None:
        self.counts: Counter[str] = Counter()
        self.live_connections = 0
        counts = self.counts
        live = self

        channel_init = asyncssh.channel.SSHChannel.__init__
        made = asyncssh.connection.SSHConnection.connection_made
        lost = asyncssh.connection.SSHConnection.connection_lost
        create_process = asyncssh.SSHClientConnection.create_process
        request = aiohttp.ClientSession._request

        def counted_channel(self: Any, *args: Any, **kwargs: Any) -> None:
            counts["channels"] += 1
            channel_init(self, *args, **kwargs)

        def counted_made(self: Any, transport: Any) -> None:
            counts["connections"] += 1
            live.live_connections += 1
            made(self, transport)

        def counted_lost(self: Any, exc: Exception | None) -> None:
            live.live_connections -= 1
            lost(self, exc)

        async def counted_process(self: Any, command: str = "", *args: Any, **kw: Any) -> Any:
            counts["compose"] += f" {compose_command} " in f" {command} "
            counts["ls_remote"] += " ls-remote " in command
            return await create_process(self, command, *args, **kw)

        async def counted_request(self: Any, *args: Any, **kwargs: Any) -> Any:
            counts["docker_api"] += 1
            return await request(self, *args, **kwargs)

        asyncssh.channel.SSHChannel.__init__ = counted_channel  # type: ignore[method-assign]
        asyncssh.connection.SSHConnection.connection_made = counted_made  # type: ignore[method-assign]
        asyncssh.connection.SSHConnection.connection_lost = counted_lost  # type: ignore[method-assign,assignment]
        asyncssh.SSHClientConnection.create_process = counted_process  # type: ignore[method-assign,assignment]
        aiohttp.ClientSession._request = counted_request  # type: ignore[method-assign]


def host_cpu(pids: list[int]) -> float:
    return sum(tree_cpu_seconds(pid) for pid in pids)


async def host_settled(sshd: int, live_connections: int, deadline: float = 5.0) -> None:
    """Wait until the host has finished the cycle's work: no command left under sshd (its
    sessions' shells, git, compose) and no session process of a closed connection, so its CPU
    has been reaped into the tree's account."""
    until = time.monotonic() + deadline
    while time.monotonic() < until:
        tree = descendants([sshd])
        commands = [proc for proc in tree if not proc.cmdline.startswith("sshd")]
        if not commands and (live_connections or not tree):
            return
        await asyncio.sleep(0.02)


async def redis_counts(redis: Any) -> Counter[str]:
    """Commands Redis processed, and how many of them wrote (``INFO``'s ``commandstats``, less
    the read-only commands a cycle sends); the ``INFO`` calls themselves are left out."""
    stats = await redis.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    read_only = {"get", "mget", "exists", "ttl", "pttl", "type", "lrange", "hget", "hgetall",
                 "zrange", "zrangebyscore", "smembers", "info", "ping", "evalsha_ro", "eval_ro",
                 "script|load", "script", "hmget", "scard", "zcard", "llen", "time"}  # fmt: skip
    total = sum(n for name, n in calls.items() if name != "info")
    writes = sum(n for name, n in calls.items() if name not in read_only)
    return Counter({"redis_cmds": total, "redis_writes": writes})


async def child(args: argparse.Namespace) -> list[dict[str, Any]]:
    from playguard_async.service import wiring  # noqa: PLC0415 - after PYTHONPATH chose the code
    from playguard_async.service.logs import configure_logging  # noqa: PLC0415
    from playguard_async.settings import load_settings  # noqa: PLC0415

    configure_logging("console", "error")
    settings = load_settings(Path(args.child))
    counts = Counts(" ".join(settings.compose_command))
    layer_class = getattr(wiring, "RemoteLayer", None)  # absent before the pool
    remote = layer_class(settings) if layer_class is not None else None
    engine = wiring.build_engine(settings, **({"remote": remote} if remote else {}))
    pids = [args.sshd, args.dockerd]
    rounds: list[dict[str, Any]] = []
    try:
        for _ in range(args.rounds):
            before = Counter(counts.counts)
            redis_before = await redis_counts(engine.redis)
            cpu, started = host_cpu(pids), time.perf_counter()
            tasks = await engine.tick()
            results = await asyncio.gather(*tasks)
            wall = time.perf_counter() - started
            await host_settled(args.sshd, counts.live_connections)
            done = Counter(counts.counts)
            done.subtract(before)
            done.update(await redis_counts(engine.redis))
            done.subtract(redis_before)
            rounds.append(
                {
                    "wall": wall,
                    "host_cpu": host_cpu(pids) - cpu,
                    **{name: done[name] for name in FIGURES[2:]},
                    "actions": sum(len(a) for r in results for a in r.actions.values()),
                    "outcomes": sorted({r.outcome.value for r in results}),
                    "failures": sorted(
                        f"{r.marquee}: {r.outcome.value} in {r.phase}: {r.reason}"[:300]
                        for r in results
                        if r.outcome.value != "ok"
                    ),
                    "cycles": len(results),
                }
            )
            if args.until_converged and rounds[-1]["actions"] == 0:
                break
    finally:
        if remote is not None:
            await remote.close()
        await engine.redis.aclose()
    return rounds


# ---- the parent: the lab, the two code versions, the table ------------------------------------


def run_child(
    code: Path, settings: Path, lab: Lab, rounds: int, *, until_converged: bool = False
) -> list[dict[str, Any]]:
    host = lab.marquees[0]
    assert host.ssh.pid is not None
    assert host.docker.pid is not None
    argv = [
        sys.executable, __file__, "--child", str(settings), "--rounds", str(rounds),
        "--sshd", str(host.ssh.pid), "--dockerd", str(host.docker.pid),
    ]  # fmt: skip
    if until_converged:
        argv.append("--until-converged")
    env = {**os.environ, "PYTHONPATH": str(code)}
    # Alone: the last child's ticks announced it for a tick, and this one would find its Marquees
    # shared with it (the fence counter and locks stay: the host has accepted their fences).
    from playguard_async.coordination.keys import REPLICAS_KEY  # noqa: PLC0415 - the parent's

    Redis.from_url(lab.redis.url).delete(REPLICAS_KEY)
    done = subprocess.run(argv, check=True, capture_output=True, text=True, env=env)
    return list(json.loads(done.stdout.splitlines()[-1]))


def write_settings(lab: Lab, directory: Path, inventory: Path) -> Path:
    path = directory / "playguard.toml"
    path.write_text(
        f'redis_url = "{lab.redis.url}"\n'
        f'inventory = "{inventory}"\n'
        "lock_ttl = 300\n"
        "remote_command_timeout = 120\n"
        "docker_api_timeout = 120\n"
        "tick_jitter = 0\n"
        'compose_command = ["docker-compose"]\n'
        "orphan_grace = 0\n"
        'http_address = ""\n'
        'log_level = "error"\n'
    )
    return path


@contextmanager
def timed(what: str) -> Iterator[None]:
    started = time.perf_counter()
    print(f"... {what}", file=sys.stderr, flush=True)
    yield
    print(f"    {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)


def scenario(
    lab: Lab,
    directory: Path,
    before: Path,
    *,
    marquees: int,
    playgrounds: int,
    rounds: int,
    cold: bool = False,
) -> dict[str, list[dict[str, Any]]]:
    inventory = shared_host_inventory(lab, directory, marquees=marquees, playgrounds=playgrounds)
    settings = write_settings(lab, directory, write_inventory(inventory, directory / "inv.yaml"))
    with timed(f"converging {marquees} x {playgrounds}"):
        converging = run_child(ROOT, settings, lab, 6, until_converged=True)
    if converging[-1]["actions"]:
        raise SystemExit(f"did not converge: {converging[-1]}")
    measured: dict[str, list[dict[str, Any]]] = {}
    for label, code in (("before", before), ("after", ROOT)):
        with timed(f"{label}: {rounds} converged rounds"):
            measured[label] = run_child(code, settings, lab, rounds + 1)[1:]  # first: warm-up
        if cold:
            with timed(f"{label}: {rounds} first cycles of fresh processes"):
                measured[f"{label} cold"] = [
                    run_child(code, settings, lab, 1)[0] for _ in range(rounds)
                ]
    return measured


def _ratio(new: float, old: float) -> str:
    return f"{new / old:.2f}x" if old else "-"


def report(title: str, unit: str, measured: dict[str, list[dict[str, Any]]]) -> None:
    print(f"\n{title} (median per {unit}; after = this checkout)")
    print(f"{'figure':<14}{'before':>12}{'after':>12}{'after/before':>14}")
    for figure in FIGURES:
        old = statistics.median(r[figure] for r in measured["before"])
        new = statistics.median(r[figure] for r in measured["after"])
        ratio = f"{new / old:.3f}" if old else "-"
        print(f"{figure:<14}{old:>12.3f}{new:>12.3f}{ratio:>14}")
    if "after cold" in measured:
        print(f"\n{title}, the first cycle of a fresh process against a warm one (median)")
        print(f"{'figure':<14}{'before':>10}{'cold/warm':>11}{'after':>10}{'cold/warm':>11}"
              f"{'after/before':>14}")  # fmt: skip
        for figure in FIGURES:
            cold = {label: statistics.median(r[figure] for r in measured[f"{label} cold"])
                    for label in ("before", "after")}  # fmt: skip
            warm = {label: statistics.median(r[figure] for r in measured[label])
                    for label in ("before", "after")}  # fmt: skip
            print(f"{figure:<14}{cold['before']:>10.3f}{_ratio(cold['before'], warm['before']):>11}"
                  f"{cold['after']:>10.3f}{_ratio(cold['after'], warm['after']):>11}"
                  f"{_ratio(cold['after'], cold['before']):>14}")  # fmt: skip
    outcomes = sorted({o for rounds in measured.values() for r in rounds for o in r["outcomes"]})
    actions = sum(r["actions"] for rounds in measured.values() for r in rounds)
    print(f"outcomes: {', '.join(outcomes)}; actions in measured rounds: {actions}")
    for label, rounds in measured.items():
        failures = Counter(f for r in rounds for f in r["failures"])
        for failure, times in failures.most_common(5):
            print(f"  {label}, {times} x: {failure}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--playgrounds", type=int, default=20)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--fleet", type=int, default=50, help="Marquees; 0 skips the fleet")
    parser.add_argument("--fleet-playgrounds", type=int, default=1)
    parser.add_argument("--ticks", type=int, default=2)
    parser.add_argument(
        "--before", help="git ref of the 'before' code (default: where this branch left main)"
    )
    parser.add_argument(
        "--cold",
        action="store_true",
        help="also measure the first cycle of fresh processes on the converged Marquee",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--sshd", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--dockerd", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--until-converged", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(args))))
        return
    with tempfile.TemporaryDirectory(prefix="pg-bench-", dir="/tmp") as scratch:
        workdir = Path(scratch)
        commit = git_output(
            "rev-parse", "--short", args.before or git_output("merge-base", "HEAD", "main")
        )
        before = extract(commit, workdir / "before")
        # The one host stands for a fleet of hosts: it takes their handshakes all at once.
        with Lab(workdir / "lab", marquees=1, ssh_max_startups=max(args.fleet, 10)) as lab:
            one = scenario(lab, workdir / "one", before, marquees=1,
                           playgrounds=args.playgrounds, rounds=args.cycles,
                           cold=args.cold)  # fmt: skip
            fleet = (
                scenario(
                    lab,
                    workdir / "fleet",
                    before,
                    marquees=args.fleet,
                    playgrounds=args.fleet_playgrounds,
                    rounds=args.ticks,
                )
                if args.fleet
                else None
            )
    print(f"lab host: one sshd + one dockerd on this machine ({os.cpu_count()} cores); "
          f"before = {commit}, load {os.getloadavg()[0]:.1f}")  # fmt: skip
    report(f"one converged Marquee, {args.playgrounds} Playgrounds", "cycle", one)
    if fleet is not None:
        report(
            f"converged fleet, {args.fleet} Marquees x {args.fleet_playgrounds} Playgrounds on "
            "one host",
            "tick",
            fleet,
        )


if __name__ == "__main__":
    main()
