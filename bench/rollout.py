"""A release rolled out to a simulated fleet in waves (issue 38), and what it costs a cycle.

One generated inventory (``inventory_load.write_inventory``): ``--fleet`` Marquees, one
Playground each, all of Playspec ``shop`` at branch ``feature/0``, so one rollout scope whose
cohort is the whole fleet. ``--replicas`` replica processes split it as the daemon does
(``fleet_simulation.replica``: ``Engine.run()``, the roster's heartbeats, the rendezvous split,
the tick grid), on one Redis. Their cycles run the seven built-in phases' names as no-ops
(``dispatch.NoOpPhase``) but ``sync_git``, whose place in a real cycle holds the rollout gate:
here it is ``SimulatedGate``, which makes the gate's verdicts with the very ``RolloutDesk`` the
gate uses (``phases.rollout_desk``: the record read, opened, its steps taken, all against Redis)
and supplies what a host and registry would say from the bench's process:

- the release the desired state asks: an old digest until ``--release-after`` - 0.5 ticks after
  the replicas' start (the middle of a tick, its cycles done), a new one from then on (as a new
  image behind the tag would be);
- each Marquee's standing: its last good release, the old one until an admitted Marquee
  "converges" (in the same cycle), then the target; every one is verified healthy, so each
  admitted Marquee tells the rollout ``healthy=True`` (``RolloutDesk.tell``) in each cycle.

Two fleet runs in one invocation, side by side:

- ``none``: the Playspec has no rollout policy, so the gate does nothing (as before rollouts);
- ``rollout``: the Playspec has ``rollout: {waves: [1, "1%", "10%", "100%"], bake: --bake}``;
  its first ticks come before the release (a policy, no rollout yet), then the rollout runs
  until its record says ``done``, then one more tick (a done rollout still read every cycle).

Per tick: the rollout's state at its end, cycles started, the replicas' CPU per cycle (each
replica's CPU from the end of its previous tick's last cycle to the end of this one's, from its
journal, ``fleet_simulation.TickJournal``: ticks whose cycles outlast them are not counted
twice), Redis's commands per cycle (``total_commands_processed``: the commands its scripts call
counted too, heartbeats and the parent's ``INFO`` samples included, as in both runs) and Redis's
CPU per cycle, over the same spans. Then the ratio of the ticks with a
rollout running to the ``none`` ticks (goal: within 1.2x), the waves' timeline from the release
(each wave's start, when its last Marquee was verified healthy, from the record's events and
the parent's polls of the record) and the wall time from the release to ``done`` against the
goal, bake x waves + 2 ticks.

    .venv/bin/python bench/rollout.py [--fleet 10000] [--replicas 4] [--tick 15] [--bake 15]
        [--none-ticks 3] [--release-after 3]

Starts its own redis-server from the lab on an ephemeral loopback port; writes under a temporary
directory. Figures in bench/README.md ("Rollouts"). Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import uvloop
from code_versions import ROOT
from dispatch import NoOpPhase
from fleet_simulation import (
    GO_KEY,
    READY_KEY,
    Child,
    RedisSample,
    Source,
    replica,
    wait_for,
)
from inventory_load import write_inventory
from redis import Redis

from playguard_async.coordination.keys import rollout_key
from playguard_async.phases.protocol import BUILTIN_PHASES, Phase, PhaseContext, PhaseReport
from playguard_async.phases.rollout_desk import RolloutDesk, Standing, staged_playgrounds
from playguard_async.phases.rollout_record import Rollout
from playguard_async.service.logs import configure_logging
from playguard_async.settings import Settings
from playguard_lab import RedisServer

OLD_RELEASE = hashlib.sha256(b"shop, the release every Marquee runs").hexdigest()
NEW_RELEASE = hashlib.sha256(b"shop, the release rolled out").hexdigest()
HEAD = hashlib.sha1(b"feature/0").hexdigest()  # a commit's name
SCOPE = "shop@feature/0"
WAVES: list[int | str] = [1, "1%", "10%", "100%"]
GOAL_RATIO = 1.2
GOAL_TICKS = 2
RELEASE_FILE = "release"
"""In a run's directory: the wall-clock time of the release, written before the replicas go."""


# -- the replica (a child process) -------------------------------------------------------------


@dataclass
class SimulatedGate:
    """``sync_git``'s place in the cycle, doing only the rollout gate's part (``rollout_gate
    ._decide`` and the health gate's ``tell_rollout``) with the host and registry simulated:
    per running Playground whose release a rollout stages, a verdict, and for an admitted one
    its convergence and a healthy report."""

    rundir: Path
    name: str = "sync_git"
    good: dict[str, str] = field(default_factory=dict)
    """Playground -> its last good release, as its host's records would say."""
    release_at: float | None = None

    async def __call__(self, ctx: PhaseContext[Any]) -> PhaseReport:
        inventory = ctx.inventory
        staged = staged_playgrounds(ctx)
        if not staged:
            return PhaseReport()
        lock = ctx.lease.lock
        desk = RolloutDesk(
            lock.redis, lock.timeout, inventory, ctx.marquee, ctx.dry_run, ctx.windows_default
        )
        release = NEW_RELEASE if time.time() >= self.released_at() else OLD_RELEASE
        for playground, _, policy in staged:
            good = self.good.get(playground.name, OLD_RELEASE)
            standing = Standing(True, good, has_previous=True, rolls_back=True)
            verdict = await desk.verdict(playground, policy, release, HEAD, standing)
            if verdict.admitted:
                self.good[playground.name] = release
                await desk.tell(verdict, healthy=True, why="")
        return PhaseReport()

    def released_at(self) -> float:
        if self.release_at is None:
            self.release_at = float((self.rundir / RELEASE_FILE).read_text())
        return self.release_at


def replica_process(name: str, settings_file: Path, rundir: Path, replicas: int) -> None:
    configure_logging("json", "warning", final=True)
    common = json.loads(settings_file.read_text())
    settings = Settings.model_validate({**common, "replica_id": name})
    phases: list[Phase[Any]] = [
        SimulatedGate(rundir) if phase == "sync_git" else NoOpPhase(phase)
        for phase in BUILTIN_PHASES
    ]
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(replica(settings, rundir, replicas, phases))


# -- the parent ----------------------------------------------------------------------------------


@dataclass
class TickFigures:
    """One tick of one run, over all its replicas."""

    tick: int
    state: str
    cycles: int
    cpu: float
    redis_commands: int
    redis_cpu: float


@dataclass
class RolloutRun:
    """What one fleet run left: its ticks, and (with a rollout) the release, the waves'
    timeline and the record as it ended."""

    label: str
    ticks: list[TickFigures] = field(default_factory=list)
    release: float | None = None
    complete: dict[int, float] = field(default_factory=dict)
    """Wave index -> when its last Marquee was verified healthy (``healthy_at``)."""
    record: Rollout | None = None


def read_record(redis: Redis) -> Rollout | None:
    raw = redis.get(rollout_key(SCOPE))
    return None if raw is None else Rollout.parse(SCOPE, raw)


def state_of(record: Rollout | None) -> str:
    if record is None:
        return "no rollout"
    if record.status == "running":
        return f"wave {record.wave + 1}/{len(record.waves)}"
    return record.status


def start_replicas(args: argparse.Namespace, rundir: Path, settings: dict[str, Any]) -> list[Child]:
    (rundir / "settings.json").write_text(json.dumps(settings))
    children = []
    for n in range(1, args.replicas + 1):
        name = f"r{n}"
        command = [sys.executable, __file__, "--child", name, str(rundir / "settings.json")]
        command += [str(rundir), str(args.replicas)]
        # This checkout's package, whatever the installed one is (as ``code_versions`` runs it).
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, env=env)
        children.append(Child(name, process, rundir / f"{name}.jsonl"))
    return children


def cpu_since_last_line(child: Child, tick: int) -> float:
    """The replica's CPU between the journal line before ``tick``'s and ``tick``'s own (from
    its first read's end for the first tick): not the tick's own span, which overlaps the next
    tick's when a tick's cycles outlast it, so that no CPU is counted twice."""
    lines = [event for event in child.events() if event["event"] in ("loaded", "tick")]
    at = next(n for n, event in enumerate(lines) if event.get("tick") == tick)
    return float(lines[at]["cpu"] - lines[at - 1]["cpu"])


def run_fleet(
    args: argparse.Namespace, run: RolloutRun, inventory: Path, server: RedisServer
) -> None:
    """Start the replicas on ``inventory``, follow their ticks (and the rollout, if any) until
    the run's last tick, stop them."""
    redis = Redis.from_url(server.url)
    redis.flushall()
    rundir = inventory.parent / f"replicas-{run.label}"
    rundir.mkdir()
    source = Source(inventory.parent, inventory)
    children = start_replicas(args, rundir, source.replica_settings(args, server.url))

    def alive() -> list[Child]:
        for child in children:
            if child.process.poll() is not None:
                raise SystemExit(f"rollout: replica {child.name} exited early")
        return children

    def ended(tick: int) -> bool:
        record = read_record(redis)
        if record is not None and record.healthy_at is not None:
            run.complete.setdefault(record.wave, record.healthy_at)
        return all(tick in child.ticks() for child in alive())

    def ready() -> bool:
        return bool(alive()) and int(redis.get(READY_KEY) or 0) == args.replicas

    try:
        wait_for("every replica's desired state", ready, timeout=300)
        go = time.time()
        rollout = run.label == "rollout"
        run.release = go + (args.release_after - 0.5) * args.tick if rollout else None
        (rundir / RELEASE_FILE).write_text(repr(run.release or float("inf")))
        redis.set(GO_KEY, repr(go))
        last = args.none_ticks if not rollout else args.release_after + args.most_ticks
        tick, before = 0, RedisSample.take(redis)
        while tick < last:
            time.sleep(max(0.0, go + tick * args.tick - time.time()))
            wait_for(f"tick {tick}", partial(ended, tick), timeout=args.tick * 10)
            after = RedisSample.take(redis)
            record = read_record(redis)
            run.ticks.append(
                TickFigures(
                    tick,
                    state_of(record) if rollout else "no policy",
                    sum(child.ticks()[tick]["attempts"] for child in children),
                    sum(cpu_since_last_line(child, tick) for child in children),
                    after.commands - before.commands,
                    after.cpu - before.cpu,
                )
            )
            before = after
            if record is not None and record.status == "done" and run.record is None:
                run.record = record
                last = tick + 2  # and one tick with the rollout done
            tick += 1
        run.record = read_record(redis) or run.record
    finally:
        for child in children:
            child.process.send_signal(signal.SIGTERM)
        for child in children:
            child.process.wait(timeout=120)
        redis.close()


# -- the report ----------------------------------------------------------------------------------


def per_cycle(ticks: list[TickFigures]) -> tuple[float, float, float]:
    """CPU ms, Redis commands and Redis CPU ms per cycle over ``ticks``."""
    cycles = sum(t.cycles for t in ticks) or 1
    return (
        1000 * sum(t.cpu for t in ticks) / cycles,
        sum(t.redis_commands for t in ticks) / cycles,
        1000 * sum(t.redis_cpu for t in ticks) / cycles,
    )


def report(args: argparse.Namespace, runs: list[RolloutRun], load: tuple[float, ...]) -> None:
    print(
        f"{args.fleet} Marquees x 1 Playground, one scope ({SCOPE}), {args.replicas} replicas; "
        f"waves {json.dumps(WAVES)}, bake {args.bake:g} s, tick {args.tick:g} s, tick_jitter "
        f"{args.jitter:g}; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}, "
        f"{os.cpu_count()} cores"
    )
    print()
    print(
        f"{'run':>8} {'tick':>4} {'state at end':>13} {'cycles':>6} {'cpu/cycle ms':>12} "
        f"{'redis cmds/cycle':>16} {'redis cpu/cycle ms':>18}"
    )
    for run in runs:
        for t in run.ticks:
            cpu, commands, redis_cpu = per_cycle([t])
            print(
                f"{run.label:>8} {t.tick:>4} {t.state:>13} {t.cycles:>6} {cpu:>12.3f} "
                f"{commands:>16.2f} {redis_cpu:>18.4f}"
            )
    print(
        "(cycles: those the tick started, 'cycles' short of the fleet when the last tick's "
        "were still running; cpu: the replicas', redis: Redis's commands (those its scripts "
        "call included) and CPU, from one tick's last cycle's end to the next's, heartbeats "
        "and the parent's samples included; the first tick of each run warms up and is left "
        "out below)"
    )
    none, rolled = runs
    baseline = per_cycle(none.ticks[1:])
    running = [t for t in rolled.ticks if t.state.startswith("wave")]
    compared = {
        "policy, no rollout": [t for t in rolled.ticks[1:] if t.state == "no rollout"],
        "rollout running": running,
        "rollout done": [t for t in rolled.ticks if t.state == "done"],
    }
    print()
    print(
        f"{'per cycle':>20} {'ticks':>5} {'cpu ms':>7} {'x none':>6} {'redis cmds':>10} "
        f"{'x none':>6} {'redis cpu ms':>12} {'x none':>6}"
    )
    print(
        f"{'no policy (none)':>20} {len(none.ticks) - 1:>5} {baseline[0]:>7.3f} {'':>6} "
        f"{baseline[1]:>10.2f} {'':>6} {baseline[2]:>12.4f}"
    )
    for label, ticks in compared.items():
        if not ticks:
            continue
        figures = per_cycle(ticks)
        ratios = [value / base for value, base in zip(figures, baseline, strict=True)]
        print(
            f"{label:>20} {len(ticks):>5} {figures[0]:>7.3f} {ratios[0]:>6.2f} "
            f"{figures[1]:>10.2f} {ratios[1]:>6.2f} {figures[2]:>12.4f} {ratios[2]:>6.2f}"
        )
    if running:
        cpu, commands, _ = (
            value / base for value, base in zip(per_cycle(running), baseline, strict=True)
        )
        met = cpu <= GOAL_RATIO and commands <= GOAL_RATIO
        print(
            f"goal: a cycle with a rollout running within {GOAL_RATIO:g}x of one with none: "
            f"cpu {cpu:.2f}x, redis commands {commands:.2f}x: {'met' if met else 'NOT met'}"
        )
    print()
    report_timeline(args, rolled)


def report_timeline(args: argparse.Namespace, run: RolloutRun) -> None:
    record, release = run.record, run.release
    assert release is not None
    if record is None or record.status != "done":
        print(f"rollout: not done {args.most_ticks} ticks after the release: {state_of(record)}")
        return
    print(f"rollout {record.id} of {SCOPE}, waves of {[wave.size for wave in record.waves]} "
          "Marquees; seconds from the release:")  # fmt: skip
    timeline = [(event.at, f"{event.what} ({event.why})") for event in record.events]
    timeline += [
        (at, f"wave {wave + 1}: its last Marquee verified healthy")
        for wave, at in run.complete.items()
    ]
    for at, what in sorted(timeline):
        print(f"  {at - release:>7.2f}  {what}")
    took = record.events[-1].at - release
    goal = args.bake * len(record.waves) + GOAL_TICKS * args.tick
    print(
        f"goal: release to done within bake x waves + {GOAL_TICKS} ticks "
        f"({args.bake:g} x {len(record.waves)} + {GOAL_TICKS} x {args.tick:g} = {goal:g} s): "
        f"{took:.1f} s, bake x waves + {(took - args.bake * len(record.waves)) / args.tick:.2f} "
        f"ticks: {'met' if took <= goal else 'NOT met'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleet", type=int, default=10_000)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--tick", type=float, default=15.0, help="tick_interval, seconds")
    parser.add_argument("--bake", type=float, default=15.0, help="the policy's bake, seconds")
    parser.add_argument(
        "--jitter", type=float, default=Settings.model_fields["tick_jitter"].default
    )
    parser.add_argument("--none-ticks", type=int, default=3, help="ticks of the run with none")
    parser.add_argument(
        "--release-after", type=int, default=3, help="ticks before the release (mid-tick)"
    )
    parser.add_argument(
        "--most-ticks", type=int, default=40, help="ticks after the release before giving up"
    )
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        name, settings_file, rundir, replicas = args.child
        replica_process(name, Path(settings_file), Path(rundir), int(replicas))
        return
    policy = {"waves": WAVES, "bake": args.bake, "max_failures": 0, "wave_timeout": 900}
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        server = stack.enter_context(RedisServer(workdir / "redis"))
        load = os.getloadavg()
        runs = []
        for label, rollout in (("none", None), ("rollout", policy)):
            directory = workdir / label
            directory.mkdir()
            inventory = write_inventory(directory, args.fleet, playgrounds=1, rollout=rollout)
            runs.append(RolloutRun(label))
            run_fleet(args, runs[-1], inventory, server)
        report(args, runs, load)
    print(
        f"wall {time.monotonic() - started:.0f} s; load average at the end {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
