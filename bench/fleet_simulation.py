"""A fleet split across replicas as the daemon runs it: 1, 2, 4, 8 replica processes, one Redis.

Each replica is a process of its own running the daemon's engine loop (``Engine.run()``, built by
``wiring.build_engine`` with the daemon's default settings) over one generated inventory (5
Playgrounds per Marquee, as ``inventory_load.py`` writes it), with the seven built-in phases
replaced by ``dispatch.py``'s no-op ones. So the roster's heartbeats, the rendezvous split, the tick
grid and its start spread (``tick_jitter``) are the daemon's own; only the hosts are missing.

Every replica announces itself until it sees all N live, then reads its desired state, and then all
start together (each keeps announcing while it waits, so each sees the others from its first
tick): a replica that read before it saw the others would read as one alone does (below). Each
replica wraps its
engine's ``tick`` to account per tick for the cycles that tick started (one lock tried each, so
they are the replica's attempts), their outcomes, the process's CPU from the tick's start until its
last cycle ended, and its RSS and peak RSS (``VmHWM``) then. The parent reads those, and Redis's
``INFO`` at each tick's start and end. Printed per replica count and per replica:

- attempts per tick (goal: each replica about 1/N of the fleet, within 10 %), and the cycles that
  ended other than ``ok`` (``locked``: another replica held the lock), by outcome;
- the longest the replica's event loop was held at once while a tick's cycles ran (a 10 ms
  ticker): a held loop lets a Redis call outlast ``redis_socket_timeout`` with its answer unread;
- the Marquees whose records it holds after its first read, and that read's seconds;
- CPU seconds per tick, RSS after the first read and after the ticks, peak RSS;
- the fleet's time to be fully cycled (every Marquee one ``ok`` cycle started by that tick), from
  the tick's start, in the first tick and in the last one measured (goal at the largest replica
  count: every Marquee cycled within every tick);
- Redis's CPU per tick (``used_cpu_sys`` + ``used_cpu_user``) and memory (``used_memory``,
  ``used_memory_rss``) at the end of the last tick; with PostgreSQL, its CPU (its process tree's,
  from ``/proc``) during the first reads and per tick.

``--source``: where the replicas read the desired state. ``yaml`` (the default): the generated
inventory file, read whole by every replica. ``postgres``: the lab's PostgreSQL (one server for the
run, the inventory imported once per fleet size into a database of its own, the replicas' settings
pointing at it: ``desired_state``, ``desired_state_password_file``); a replica that shares the fleet
reads only its share's rows and a listing of the others (README, "The desired state in
PostgreSQL"), and writes each cycle's observed state back, as the daemon does. The LISTEN
connection is not started (the service starts it, not the engine), and nothing changes the
desired state during the run.

``--share-baseline``: after the replica counts, one replica alone at a fleet of ``--fleet`` / the
largest count, and its memory side by side with each replica of that count (issue 29's goal: RSS
per replica at 100,000 Marquees / 8 replicas within 1.5x of one replica alone at 12,500).

Kill scenario (at ``--kill-at`` replicas, after its measured ticks, once the fleet has been fully
cycled): one replica is SIGKILLed between two ticks; printed is how long, and how many tick starts,
until every Marquee has had an ``ok`` cycle begun after the kill (goal: within 2 ticks: a dead
replica drops out of the others' view when its last heartbeat expires, one tick after it, and they
see that at their next heartbeat). The kill comes right after the fleet's cycle, early in a tick;
``--kill-delay`` moves it later, where the wait is longest.

    .venv/bin/python bench/fleet_simulation.py [--short] [--fleet 100000] [--replicas 1,2,4,8]
        [--tick 60] [--ticks 3] [--kill-at 8] [--kill-delay 0] [--jitter 0.1]
        [--source yaml|postgres] [--share-baseline]

``--short``: 10,000 Marquees, 1, 2 and 4 replicas, a 10 s tick, 2 ticks, the kill at 4
(``scripts/bench.sh`` runs it). From YAML each replica reads the whole inventory, so the full mode
needs memory for 8 of them: bench/README.md ("Fleet simulation") has its figures, wall time
included. Starts its own redis-server (and PostgreSQL) from the lab on ephemeral loopback ports;
writes under a temporary directory. Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from array import array
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import uvloop
from code_versions import ROOT
from dispatch import NoOpPhase, rss_mib
from inventory_load import write_inventory
from redis import Redis

from playguard_async.coordination.replicas import ReplicaRoster
from playguard_async.desired_state.yaml_source import INVENTORY_MAX_BYTES
from playguard_async.engine.observer import Unobserved
from playguard_async.engine.results import CycleResult, Outcome
from playguard_async.engine.scheduler import Engine
from playguard_async.phases.protocol import BUILTIN_PHASES, Phase
from playguard_async.service.logs import configure_logging
from playguard_async.service.wiring import build_engine, close_engine, stopping_on_signals
from playguard_async.settings import Settings
from playguard_lab import PostgresServer, RedisServer
from playguard_lab.process import tree_cpu_seconds

GO_KEY = "bench:fleet_simulation:go"
READY_KEY = "bench:fleet_simulation:ready"
ANNOUNCE_POLL = 0.05
"""Seconds between a starting replica's announcements while it waits for the others to be live."""
FIELDS = 4
"""Numbers stored per cycle in a tick's results file: Marquee index, begun, finished (wall-clock
seconds), 1.0 if ``ok``."""
POLL = 0.1
"""Seconds between the parent's looks at the replicas' journals."""
STALL_TICKER = 0.01
KILL_WATCH_TICKS = 5
"""Ticks after the kill the parent waits for the dead replica's share before giving up."""
READ_TIMEOUT = 600.0
"""``inventory_read_timeout`` and ``desired_state_timeout`` of the replicas."""


# -- the replica (a child process) -------------------------------------------------------------


class ShareObserver(Unobserved):
    """Keeps what the engine says of each tick's split: live replicas seen, Marquees assigned."""

    def __init__(self) -> None:
        self.replicas = 0
        self.assigned = 0

    def fleet_shared(self, replicas: int, share: Collection[str]) -> None:
        self.replicas, self.assigned = replicas, len(share)


@dataclass(eq=False)
class TickAccount:
    """One tick's cycles on one replica, until the last of them ends."""

    index: int
    started: float
    cpu: float
    attempts: int = 0
    pending: int = 0
    stall: float = 0.0
    """The longest the event loop was held at once while the tick's cycles ran, in seconds."""
    outcomes: Counter[str] = field(default_factory=Counter)
    results: array[float] = field(default_factory=lambda: array("d"))


class TickJournal:
    """Wraps ``engine.tick`` so that each tick's cycles are accounted for when the last one ends:
    the results go to ``<replica>.tick<k>.bin`` (``FIELDS`` doubles a cycle), the figures to one
    JSON line of ``<replica>.jsonl``, both written before the next line so that the parent, which
    reads the journal, finds them complete (a SIGKILLed replica leaves whole ticks behind).

    Done callbacks on the tick's tasks rather than a cycle listener: they see every cycle the tick
    started, a cancelled one too, and which tick started it."""

    def __init__(self, engine: Engine, observer: ShareObserver, name: str, rundir: Path) -> None:
        self.engine = engine
        self.observer = observer
        self.name = name
        self.rundir = rundir
        self.journal = (rundir / f"{name}.jsonl").open("a", buffering=1)
        self.ticks = 0
        self.open: set[TickAccount] = set()
        self._tick = engine.tick
        engine.tick = self.tick  # type: ignore[method-assign]

    def write(self, event: str, **figures: Any) -> None:
        line = {"event": event, "at": time.time(), "cpu": time.process_time(), **figures}
        line |= {"rss": rss_mib(), "hwm": rss_mib("VmHWM")}
        self.journal.write(json.dumps(line) + "\n")

    async def tick(self) -> list[asyncio.Task[CycleResult]]:
        account = TickAccount(self.ticks, time.time(), time.process_time())
        self.open.add(account)
        self.ticks += 1
        tasks = await self._tick()
        account.attempts = account.pending = len(tasks)
        for task in tasks:
            task.add_done_callback(partial(self._cycle_ended, account))
        if not tasks:
            self._tick_ended(account)
        return tasks

    def _cycle_ended(self, account: TickAccount, task: asyncio.Task[CycleResult]) -> None:
        if task.cancelled():
            account.outcomes["cancelled"] += 1
        elif task.exception() is not None:
            account.outcomes["crashed"] += 1
        else:
            result = task.result()
            account.outcomes[result.outcome.value] += 1
            account.results.extend(
                (
                    int(result.marquee.removeprefix("edge-")),
                    result.finished_at - result.duration,
                    result.finished_at,
                    result.outcome is Outcome.OK,
                )
            )
        account.pending -= 1
        if account.pending == 0:
            self._tick_ended(account)

    async def watch_loop(self) -> None:
        """Until cancelled, the longest gap between two wake-ups of a 10 ms ticker, charged to
        every tick whose cycles run then: a held loop is what makes a Redis call outlast its
        ``redis_socket_timeout`` while its answer waits unread (at 10 ms, about 0.2 % of a core)."""
        while True:
            before = time.perf_counter()
            await asyncio.sleep(STALL_TICKER)
            held = time.perf_counter() - before - STALL_TICKER
            for account in self.open:
                account.stall = max(account.stall, held)

    def _tick_ended(self, account: TickAccount) -> None:
        self.open.discard(account)
        with (self.rundir / f"{self.name}.tick{account.index}.bin").open("wb") as out:
            account.results.tofile(out)
        self.write(
            "tick",
            tick=account.index,
            started=account.started,
            tick_cpu=time.process_time() - account.cpu,
            attempts=account.attempts,
            outcomes=account.outcomes,
            stall=account.stall,
            live=self.observer.replicas,
            assigned=self.observer.assigned,
        )


async def announce_until_live(roster: ReplicaRoster, replicas: int) -> None:
    """Announce this replica until the roster shows ``replicas`` live: a replica that reads the
    desired state before it sees the others reads it whole (PostgreSQL; YAML always does), as
    one started alone would, and keeps the memory of the whole fleet for long after."""
    while True:
        await roster.announce()
        if len(roster.live) >= replicas:
            return
        await asyncio.sleep(ANNOUNCE_POLL)


async def replica(
    settings: Settings, rundir: Path, replicas: int, phases: Sequence[Phase[Any]] | None = None
) -> None:
    """One replica as the daemon runs one, until SIGTERM; its cycles run ``phases`` (by
    default the seven built-in phases' names, each a no-op)."""
    name, tick = settings.replica_id, settings.tick_interval
    observer = ShareObserver()
    if phases is None:
        phases = [NoOpPhase(phase) for phase in BUILTIN_PHASES]
    engine = build_engine(settings, observer=observer, phases=phases)
    journal = TickJournal(engine, observer, name, rundir)
    redis = engine.redis
    try:
        await announce_until_live(engine.roster, replicas)
        started = time.monotonic()
        inventory = await engine.load_inventory()
        journal.write(
            "loaded",
            read_s=time.monotonic() - started,
            held=len(inventory.marquees),
            shared=engine.roster.share is not None,
        )
        await engine.roster.announce()
        await redis.incr(READY_KEY)
        announced = time.monotonic()
        # Others may still be reading theirs: keep this replica's announcement alive meanwhile.
        while await redis.get(GO_KEY) is None:
            await asyncio.sleep(0.02)
            if time.monotonic() - announced > tick / 3:
                await engine.roster.announce()
                announced = time.monotonic()
        watching = asyncio.create_task(journal.watch_loop())
        with stopping_on_signals(engine):
            await engine.run()
        watching.cancel()
        journal.write("stopped")
    finally:
        await close_engine(engine)


# -- the parent ----------------------------------------------------------------------------------


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    journal: Path
    killed: bool = False

    def events(self) -> list[dict[str, Any]]:
        if not self.journal.exists():
            return []
        lines = self.journal.read_text().splitlines()
        return [json.loads(line) for line in lines if line.endswith("}")]

    def ticks(self) -> dict[int, dict[str, Any]]:
        return {e["tick"]: e for e in self.events() if e["event"] == "tick"}

    def results(self, tick: int) -> array[float]:
        values = array("d")
        path = self.journal.with_name(f"{self.name}.tick{tick}.bin")
        values.frombytes(path.read_bytes())
        return values


@dataclass
class RedisSample:
    cpu: float
    used: float
    rss: float
    commands: int
    """``total_commands_processed`` (the three ``INFO`` calls that take a sample included)."""

    @classmethod
    def take(cls, redis: Redis) -> RedisSample:
        cpu, memory, stats = redis.info("cpu"), redis.info("memory"), redis.info("stats")
        return cls(
            cpu["used_cpu_sys"] + cpu["used_cpu_user"],
            memory["used_memory"] / 2**20,
            memory["used_memory_rss"] / 2**20,
            int(stats["total_commands_processed"]),
        )


@dataclass
class FleetRun:
    """What one replica count's run left: per replica its journal, per tick Redis's figures (and
    PostgreSQL's CPU, when the replicas read it)."""

    replicas: int
    fleet: int
    children: list[Child]
    alone: bool = False
    """The ``--share-baseline`` run: one replica, alone with the fleet a replica's share is."""
    redis_cpu: dict[int, float] = field(default_factory=dict)
    redis_end: RedisSample | None = None
    pg_cpu: dict[int, float] = field(default_factory=dict)
    pg_read_cpu: float = 0.0
    """PostgreSQL's CPU from the replicas' start until every one had read its desired state."""
    kill: dict[str, Any] | None = None

    @property
    def label(self) -> str:
        return f"1@{self.fleet}" if self.alone else str(self.replicas)


@dataclass
class Source:
    """Where the replicas of one fleet size read their desired state: the generated YAML
    inventory, or (``--source postgres``) a database of the lab's PostgreSQL it was imported
    into, once per fleet size."""

    workdir: Path
    inventory: Path
    postgres: PostgresServer | None = None
    database: str | None = None
    """The database's URL (no password: the replicas read it from ``password_file``)."""
    password_file: Path | None = None

    @classmethod
    def prepare(cls, fleet: int, workdir: Path, postgres: PostgresServer | None) -> Source:
        # In a process of its own: dumping the inventory takes many times its size in memory
        # (bench/README.md, "Dispatch"), which would stay in this process's heap, and in its
        # children's ru_maxrss, for the whole run. So does the import, for the same reason.
        command = [sys.executable, __file__, "--write-inventory", str(workdir), str(fleet)]
        written = subprocess.run(command, check=True, capture_output=True, text=True)
        inventory = Path(written.stdout.strip())
        if postgres is None:
            return cls(workdir, inventory)
        # Here: a replica, which imports this module, loads asyncpg only to read PostgreSQL.
        from lab_database import create_database, run_import  # noqa: PLC0415

        url = asyncio.run(create_database(postgres, f"fleet_{fleet}"))
        run_import(__file__, postgres, url, inventory, ROOT)
        password_file = workdir / "pg-password"
        password_file.write_text(postgres.password + "\n")
        password_file.chmod(0o600)
        return cls(workdir, inventory, postgres, url, password_file)

    def replica_settings(self, args: argparse.Namespace, redis_url: str) -> dict[str, Any]:
        """Every replica's settings but its name: the daemon's defaults but the tick, and an
        inventory size and read time that fit the fleet, as its operator would set them."""
        settings: dict[str, Any] = {
            "inventory": str(self.inventory),
            "redis_url": redis_url,
            "tick_interval": args.tick,
            "tick_jitter": args.jitter,
            "log_level": "warning",
            # The defaults fit 10,000 Marquees; 8 replicas reading 100,000 at once on two cores
            # outlast the default read timeout (bench/README.md, "Fleet simulation").
            "inventory_max_bytes": read_bound(self.inventory),
            "inventory_read_timeout": READ_TIMEOUT,
        }
        if self.database is not None:
            settings |= {
                "desired_state": self.database,
                "desired_state_password_file": str(self.password_file),
                # Connecting and reading one snapshot (10 s by default): 8 replicas each
                # reading the fleet's listing and their share at once share two cores with
                # PostgreSQL; a replica out of time at its first read would have no state.
                "desired_state_timeout": READ_TIMEOUT,
            }
        return settings

    def postgres_cpu(self) -> float:
        """PostgreSQL's CPU seconds so far, its backends' included (0 without it)."""
        return tree_cpu_seconds(self.postgres.pid or 0) if self.postgres is not None else 0.0


def read_bound(inventory: Path) -> int:
    """``inventory_max_bytes`` for ``inventory``: the file, or its rows as text, with room."""
    return max(INVENTORY_MAX_BYTES, 2 * inventory.stat().st_size)


def first_ok(
    children: list[Child], ticks: list[int], after: float = 0.0
) -> dict[int, tuple[float, float]]:
    """Marquee index -> (begun, finished) of the ``ok`` cycle that finished first among those
    begun after ``after`` that one of ``ticks`` started, over ``children``."""
    ended: dict[int, tuple[float, float]] = {}
    never = (0.0, float("inf"))
    for child in children:
        done = child.ticks()
        for tick in ticks:
            if tick not in done:
                continue
            values = child.results(tick)
            for at in range(0, len(values), FIELDS):
                index, begun, finished, ok = values[at : at + FIELDS]
                if ok and begun > after and finished < ended.get(int(index), never)[1]:
                    ended[int(index)] = (begun, finished)
    return ended


def wait_for(what: str, ready: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise SystemExit(f"fleet_simulation: timed out waiting for {what}")
        time.sleep(POLL)


def run_fleet(args: argparse.Namespace, run: FleetRun, source: Source, server: RedisServer) -> None:
    """Start ``run``'s replicas on ``source``, measure their ticks (and the kill), stop them."""
    replicas, fleet, children = run.replicas, run.fleet, run.children
    redis = Redis.from_url(server.url)
    redis.flushall()
    rundir = source.workdir / f"replicas-{run.label}"
    rundir.mkdir()
    settings = rundir / "settings.json"
    settings.write_text(json.dumps(source.replica_settings(args, server.url)))
    pg_cpu = source.postgres_cpu()
    for n in range(1, replicas + 1):
        name = f"r{n}"
        command = [sys.executable, __file__, "--child", name, str(settings), str(rundir)]
        command.append(str(replicas))
        # This checkout's package, whatever the installed one is (as ``code_versions`` runs it).
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, env=env)
        children.append(Child(name, process, rundir / f"{name}.jsonl"))

    def alive() -> list[Child]:
        for child in children:
            if child.process.poll() is not None and not child.killed:
                raise SystemExit(f"fleet_simulation: replica {child.name} exited early")
        return [child for child in children if not child.killed]

    def all_ended(tick: int) -> bool:
        return all(tick in child.ticks() for child in alive())

    # Every replica reads its desired state at once, on two cores shared by all.
    def all_ready() -> bool:
        return bool(alive()) and int(redis.get(READY_KEY) or 0) == replicas

    last = args.ticks - 1
    try:
        timeout = 120 + 30 * replicas * fleet / 1e4
        wait_for("every replica's desired state", all_ready, timeout=timeout)
        run.pg_read_cpu = source.postgres_cpu() - pg_cpu
        go = time.time()
        redis.set(GO_KEY, repr(go))
        for tick in range(args.ticks):
            time.sleep(max(0.0, go + tick * args.tick - time.time()))
            start, pg_cpu = RedisSample.take(redis), source.postgres_cpu()
            wait_for(f"tick {tick}", partial(all_ended, tick), timeout=args.tick * 10)
            end = RedisSample.take(redis)
            run.pg_cpu[tick] = source.postgres_cpu() - pg_cpu
            run.redis_cpu[tick] = end.cpu - start.cpu
            run.redis_end = end
        if replicas == args.kill_at and not run.alone:
            run.kill = kill_one(args, run, alive, all_ended, last)
    finally:
        for child in alive():
            child.process.send_signal(signal.SIGTERM)
        for child in children:
            child.process.wait(timeout=120)
        redis.close()


def kill_one(
    args: argparse.Namespace, run: FleetRun, alive: Any, all_ended: Any, last: int
) -> dict[str, Any]:
    """SIGKILL the last replica between two ticks, once the fleet has been cycled, and follow the
    survivors' ticks until every Marquee has had an ``ok`` cycle begun after the kill."""
    children, fleet = run.children, run.fleet
    cycled = len(first_ok(children, list(range(last + 1))))
    if cycled < fleet:
        return {"skipped": f"fleet not fully cycled ({cycled}/{fleet})"}
    victim = children[-1]
    time.sleep(args.kill_delay)
    killed_at = time.time()
    victim.process.send_signal(signal.SIGKILL)
    victim.killed = True
    victim.process.wait(timeout=60)
    survivors: list[Child] = alive()
    for tick in range(last + 1, last + 1 + KILL_WATCH_TICKS):
        wait_for(f"tick {tick} after the kill", partial(all_ended, tick), timeout=args.tick * 10)
        covered = first_ok(survivors, list(range(last + 1, tick + 1)), after=killed_at)
        if len(covered) == fleet:
            starts = [min(c.ticks()[k]["started"] for c in survivors) for k in range(tick + 1)]
            views = [
                sorted({c.ticks()[k]["live"] for c in survivors}) for k in range(last, tick + 1)
            ]
            return {
                "victim": victim.name,
                "into_tick": killed_at - starts[last],
                "begun": max(begun for begun, _ in covered.values()) - killed_at,
                "seconds": max(finished for _, finished in covered.values()) - killed_at,
                "ticks": sum(start > killed_at for start in starts),
                "views": " ".join("/".join(map(str, view)) for view in views),
                "locked": sum(
                    c.ticks()[k]["outcomes"].get("locked", 0)
                    for c in survivors
                    for k in range(last + 1, tick + 1)
                ),
            }
    return {"victim": victim.name, "seconds": float("nan"), "ticks": f">{KILL_WATCH_TICKS}"}


# -- the report ----------------------------------------------------------------------------------


def fleet_cycled(run: FleetRun, tick: int) -> tuple[float, int]:
    """Seconds from the tick's first start until every Marquee had an ``ok`` cycle it started, and
    how many had one (the seconds are NaN unless all did)."""
    ended = first_ok(run.children, [tick])
    start = min(child.ticks()[tick]["started"] for child in run.children)
    if len(ended) < run.fleet:
        return float("nan"), len(ended)
    return max(finished for _, finished in ended.values()) - start, len(ended)


def loaded(child: Child) -> dict[str, Any]:
    """The replica's journal line written after its first read of the desired state."""
    return next(event for event in child.events() if event["event"] == "loaded")


def report(args: argparse.Namespace, runs: list[FleetRun], load: tuple[float, ...]) -> None:
    last = args.ticks - 1
    print(
        f"fleet {args.fleet} Marquees x 5 Playgrounds, desired state from {args.source}, no-op "
        f"phases; tick {args.tick:g} s, tick_jitter {args.jitter:g}, {args.ticks} ticks per "
        f"replica count; first tick t0, last t{last}; load average {load[0]:.1f} {load[1]:.1f} "
        f"{load[2]:.1f}, {os.cpu_count()} cores"
    )
    print()
    share_met = report_replicas(args, runs)
    print()
    every_tick = report_fleet(args, runs)
    print()
    for label, worst in share_met.items():
        print(
            f"goal: attempts per replica within 10 % of fleet/N in every tick, {label} "
            f"replicas: worst {worst:.1%}: {'met' if worst <= 0.10 else 'NOT met'}"
        )
    largest = max((run for run in runs if not run.alone), key=lambda run: run.replicas)
    print(
        f"goal: every Marquee cycled every tick at {largest.replicas} replicas: "
        f"{'met' if every_tick[largest.label] else 'NOT met'}"
    )
    for run in runs:
        if run.kill is not None:
            report_kill(args, run, run.kill)
    alone = next((run for run in runs if run.alone), None)
    if alone is not None:
        print()
        report_memory(args, largest, alone)


def report_replicas(args: argparse.Namespace, runs: list[FleetRun]) -> dict[str, float]:
    """Per replica: its share, outcomes, stalls, CPU and memory; the worst share off 1/N, per
    run."""
    first, last = 0, args.ticks - 1
    print(
        f"{'replicas':>8} {'replica':>7} {'held':>7} {'read s':>6} {'attempts t0':>11} "
        f"{f'attempts t{last}':>11} {'vs 1/N':>7} {'not ok':>6} {'stall s':>7} "
        f"{'cpu t0 s':>8} {f'cpu t{last} s':>8} {'rss read':>8} {'rss end':>8} {'peak':>8}"
    )
    share_met: dict[str, float] = {}
    not_ok: dict[str, Counter[str]] = {}
    for run in runs:
        share = run.fleet / run.replicas
        worst = 0.0
        not_ok[run.label] = Counter()
        for child in run.children:
            ticks, read = child.ticks(), loaded(child)
            measured = [ticks[k] for k in range(args.ticks)]
            worst = max(worst, *(abs(t["attempts"] - share) / share for t in measured))
            outcomes = sum((Counter(t["outcomes"]) for t in measured), Counter[str]())
            outcomes.pop("ok", None)
            not_ok[run.label] += outcomes
            end = measured[-1]
            print(
                f"{run.label:>8} {child.name:>7} {read['held']:>7} {read['read_s']:>6.1f} "
                f"{ticks[first]['attempts']:>11} {ticks[last]['attempts']:>11} "
                f"{end['attempts'] / share - 1:>+7.1%} {outcomes.total():>6} "
                f"{max(t['stall'] for t in measured):>7.2f} "
                f"{ticks[first]['tick_cpu']:>8.2f} {ticks[last]['tick_cpu']:>8.2f} "
                f"{read['rss']:>8.0f} {end['rss']:>8.0f} {end['hwm']:>8.0f}"
            )
        share_met[run.label] = worst
    print(
        "(replicas 1@F: one replica alone at a fleet of F; held: Marquees whose records the "
        "replica holds after its first read, the others only listed; read: that read's "
        "seconds; attempts: locks tried; vs 1/N: the last tick's against fleet/N; not ok: "
        "cycles of all measured ticks that ended otherwise; stall: the longest the event loop "
        "was held at once while a tick's cycles ran; cpu: the process's from the tick's start "
        "to its last cycle's end; memory in MiB: VmRSS after the first read and after the last "
        "tick, peak VmHWM)"
    )
    for label, outcomes in not_ok.items():
        if outcomes:
            counts = ", ".join(f"{outcome} {count}" for outcome, count in outcomes.most_common())
            print(f"not ok at {label} replicas, all measured ticks: {counts}")
    return share_met


def report_fleet(args: argparse.Namespace, runs: list[FleetRun]) -> dict[str, bool]:
    """Per run: when the fleet was cycled, Redis's (and PostgreSQL's) CPU; whether every
    Marquee was cycled within every tick."""
    first, last = 0, args.ticks - 1
    postgres = args.source == "postgres"
    print(
        f"{'replicas':>8} {'cycled t0 s':>11} {f'cycled t{last} s':>11} {'every tick':>10} "
        f"{'redis cpu t0 s':>14} {f'redis cpu t{last} s':>14} {'redis used MiB':>14} "
        f"{'redis rss MiB':>13}"
        + (f" {'pg cpu read s':>13} {'pg cpu t0 s':>11} {f'pg cpu t{last} s':>11}" * postgres)
    )
    every_tick: dict[str, bool] = {}
    for run in runs:
        cycled = [fleet_cycled(run, tick) for tick in range(args.ticks)]
        every_tick[run.label] = all(seconds < args.tick for seconds, _ in cycled)
        assert run.redis_end is not None
        print(
            f"{run.label:>8} {_cycled(cycled[first], run.fleet):>11} "
            f"{_cycled(cycled[last], run.fleet):>11} "
            f"{'yes' if every_tick[run.label] else 'no':>10} "
            f"{run.redis_cpu[first]:>14.2f} {run.redis_cpu[last]:>14.2f} "
            f"{run.redis_end.used:>14.1f} {run.redis_end.rss:>13.1f}"
            + (
                f" {run.pg_read_cpu:>13.2f} {run.pg_cpu[first]:>11.2f} {run.pg_cpu[last]:>11.2f}"
                * postgres
            )
        )
    print(
        "(cycled: from the tick's first start until every Marquee had an ok cycle it started; "
        "every tick: so within the tick, in every tick; redis: CPU from the tick's start to "
        "its last cycle's end, memory after the last tick"
        + (
            "; pg cpu: PostgreSQL's, its backends' included, while the replicas made their "
            "first read, and from a tick's start to its last cycle's end (each tick's reads "
            "and the observed state written back per cycle)" * postgres
        )
        + ")"
    )
    return every_tick


def report_kill(args: argparse.Namespace, run: FleetRun, kill: dict[str, Any]) -> None:
    last = args.ticks - 1
    if "skipped" in kill:
        print(f"kill at {run.replicas} replicas: skipped, {kill['skipped']}")
        return
    met = isinstance(kill["ticks"], int) and kill["ticks"] <= 2
    if "views" not in kill:
        print(
            f"goal: {kill['victim']} of {run.replicas} SIGKILLed, its share cycled by "
            f"the others within 2 ticks: not within {kill['ticks']} ticks: NOT met"
        )
        return
    print(
        f"kill: {kill['victim']} of {run.replicas} SIGKILLed {kill['into_tick']:.1f} s into "
        f"t{last}; live replicas each survivor saw from t{last} on: {kill['views']}; every "
        f"Marquee had an ok cycle begun after the kill {kill['begun']:.1f} s after it, ended "
        f"{kill['seconds']:.1f} s after it ({kill['seconds'] / args.tick:.2f} ticks); "
        f"locked {kill['locked']}"
    )
    print(
        f"goal: its share cycled by the others within 2 ticks: by the tick start "
        f"{kill['ticks']} after the kill: {'met' if met else 'NOT met'}"
    )


MEMORY_GOAL = 1.5
"""Issue 29: RSS per replica of N sharing a fleet within 1.5x of one replica alone with 1/N."""


def report_memory(args: argparse.Namespace, shared: FleetRun, alone: FleetRun) -> None:
    """Memory by share: each replica of ``shared`` against the one of ``alone``, whose fleet is
    the size of their shares."""
    last = args.ticks - 1

    def memory(child: Child) -> tuple[float, float, float]:
        end = child.ticks()[last]
        return loaded(child)["rss"], end["rss"], end["hwm"]

    base = memory(alone.children[0])
    print(
        f"memory by share ({args.source}): each of {shared.replicas} replicas at "
        f"{shared.fleet} against one alone at {alone.fleet}, MiB (x: against alone)"
    )
    print(
        f"{'replica':>8} {'held':>7} {'rss read':>8} {'rss end':>8} {'peak':>8} "
        f"{'x read':>7} {'x end':>7} {'x peak':>7}"
    )
    worst = worst_peak = 0.0
    for child in shared.children:
        figures = memory(child)
        ratios = [value / baseline for value, baseline in zip(figures, base, strict=True)]
        worst, worst_peak = max(worst, *ratios[:2]), max(worst_peak, ratios[2])
        print(
            f"{child.name:>8} {loaded(child)['held']:>7} "
            + " ".join(f"{value:>8.0f}" for value in figures)
            + " "
            + " ".join(f"{ratio:>7.2f}" for ratio in ratios)
        )
    print(
        f"{'alone':>8} {loaded(alone.children[0])['held']:>7} "
        + " ".join(f"{value:>8.0f}" for value in base)
    )
    print(
        f"goal: RSS per replica at {shared.fleet} / {shared.replicas} within {MEMORY_GOAL:g}x of "
        f"one replica alone at {alone.fleet} (VmRSS after the first read and after the last "
        f"tick, worst replica): {worst:.2f}x: {'met' if worst <= MEMORY_GOAL else 'NOT met'} "
        f"(peak VmHWM: {worst_peak:.2f}x)"
    )


def _cycled(cycled: tuple[float, int], fleet: int) -> str:
    seconds, count = cycled
    return f"{seconds:.1f}" if count == fleet else f"{count}/{fleet}"


def child_process(args: argparse.Namespace) -> bool:
    """Run what a child process of the benchmark is for, if this is one: a replica, the writing
    of an inventory, its import into a database."""
    if args.child:
        name, settings_file, rundir, replicas = args.child
        configure_logging("json", "warning", final=True)
        common = json.loads(Path(settings_file).read_text())
        settings = Settings.model_validate({**common, "replica_id": name})
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(replica(settings, Path(rundir), int(replicas)))
    elif args.write_inventory:
        print(write_inventory(Path(args.write_inventory[0]), int(args.write_inventory[1])))
    elif args.setup:
        from lab_database import import_inventory  # noqa: PLC0415 - as in ``Source.prepare``

        inventory = Path(args.setup[1])
        import_inventory(
            args.setup[0], inventory, max_bytes=read_bound(inventory), timeout=READ_TIMEOUT
        )
    else:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="10,000 Marquees, 1,2,4, 10 s tick")
    parser.add_argument("--fleet", type=int)
    parser.add_argument("--replicas")
    parser.add_argument("--tick", type=float, help="tick_interval, seconds")
    parser.add_argument("--ticks", type=int, help="ticks measured per replica count (>= 2)")
    parser.add_argument("--kill-at", type=int, help="replica count of the kill scenario (0: none)")
    parser.add_argument(
        "--jitter", type=float, default=Settings.model_fields["tick_jitter"].default
    )
    parser.add_argument(
        "--kill-delay", type=float, default=0.0, help="seconds from the fleet's cycle to the kill"
    )
    parser.add_argument("--source", choices=("yaml", "postgres"), default="yaml")
    parser.add_argument(
        "--share-baseline",
        action="store_true",
        help="also one replica alone at fleet / the largest replica count: memory side by side",
    )
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--write-inventory", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--setup", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if child_process(args):
        return
    defaults = (
        {"fleet": 10_000, "replicas": "1,2,4", "tick": 10.0, "ticks": 2, "kill_at": 4}
        if args.short
        else {"fleet": 100_000, "replicas": "1,2,4,8", "tick": 60.0, "ticks": 3, "kill_at": 8}
    )
    for option, value in defaults.items():
        if getattr(args, option) is None:
            setattr(args, option, value)
    if args.ticks < 2:
        parser.error("--ticks: at least 2, a first tick and a later one")
    counts = [int(count) for count in args.replicas.split(",")]
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        server = stack.enter_context(RedisServer(workdir / "redis"))
        postgres = None
        if args.source == "postgres":
            postgres = stack.enter_context(PostgresServer(workdir / "postgres"))
        source = Source.prepare(args.fleet, workdir, postgres)
        load = os.getloadavg()
        runs = []
        for replicas in counts:
            runs.append(FleetRun(replicas, args.fleet, []))
            run_fleet(args, runs[-1], source, server)
        if args.share_baseline:
            share = round(args.fleet / max(counts))
            runs.append(FleetRun(1, share, [], alone=True))
            run_fleet(args, runs[-1], Source.prepare(share, workdir, postgres), server)
        report(args, runs, load)
    print(
        f"wall {time.monotonic() - started:.0f} s; load average at the end {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
