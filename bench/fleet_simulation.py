"""A fleet split across replicas as the daemon runs it: 1, 2, 4, 8 replica processes, one Redis.

Each replica is a process of its own running the daemon's engine loop (``Engine.run()``, built by
``wiring.build_engine`` with the daemon's default settings) over one generated inventory (5
Playgrounds per Marquee, as ``inventory_load.py`` writes it), with the seven built-in phases
replaced by ``dispatch.py``'s no-op ones. So the roster's heartbeats, the rendezvous split, the tick
grid and its start spread (``tick_jitter``) are the daemon's own; only the hosts are missing.

Every replica reads its inventory and announces itself, then all start together (each keeps
announcing while it waits, so each sees the others from its first tick). Each replica wraps its
engine's ``tick`` to account per tick for the cycles that tick started (one lock tried each, so
they are the replica's attempts), their outcomes, the process's CPU from the tick's start until its
last cycle ended, and its RSS and peak RSS (``VmHWM``) then. The parent reads those, and Redis's
``INFO`` at each tick's start and end. Printed per replica count and per replica:

- attempts per tick (goal: each replica about 1/N of the fleet, within 10 %), and the cycles that
  ended other than ``ok`` (``locked``: another replica held the lock), by outcome;
- the longest the replica's event loop was held at once while a tick's cycles ran (a 10 ms
  ticker): a held loop lets a Redis call outlast ``redis_socket_timeout`` with its answer unread;
- CPU seconds per tick, RSS after the inventory read and after the ticks, peak RSS;
- the fleet's time to be fully cycled (every Marquee one ``ok`` cycle started by that tick), from
  the tick's start, in the first tick and in the last one measured (goal at the largest replica
  count: every Marquee cycled within every tick);
- Redis's CPU per tick (``used_cpu_sys`` + ``used_cpu_user``) and memory (``used_memory``,
  ``used_memory_rss``) at the end of the last tick.

Kill scenario (at ``--kill-at`` replicas, after its measured ticks, once the fleet has been fully
cycled): one replica is SIGKILLed between two ticks; printed is how long, and how many tick starts,
until every Marquee has had an ``ok`` cycle begun after the kill (goal: within 2 ticks: a dead
replica drops out of the others' view when its last heartbeat expires, one tick after it, and they
see that at their next heartbeat). The kill comes right after the fleet's cycle, early in a tick;
``--kill-delay`` moves it later, where the wait is longest.

    .venv/bin/python bench/fleet_simulation.py [--short] [--fleet 100000] [--replicas 1,2,4,8]
        [--tick 60] [--ticks 3] [--kill-at 8] [--kill-delay 0] [--jitter 0.1]

``--short``: 10,000 Marquees, 1, 2 and 4 replicas, a 10 s tick, 2 ticks, the kill at 4
(``scripts/bench.sh`` runs it). Each replica reads the whole inventory, so the full mode needs
memory for 8 of them: bench/README.md ("Fleet simulation") has its figures, wall time included.
Starts its own redis-server from the lab on an ephemeral loopback port; writes under a temporary
directory. Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from array import array
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import uvloop
from code_versions import ROOT
from dispatch import NoOpPhase, rss_mib
from inventory_load import write_inventory
from redis import Redis

from playguard_async.desired_state.inventory import INVENTORY_MAX_BYTES
from playguard_async.engine.observer import Unobserved
from playguard_async.engine.results import CycleResult, Outcome
from playguard_async.engine.scheduler import Engine
from playguard_async.phases.protocol import BUILTIN_PHASES
from playguard_async.service.logs import configure_logging
from playguard_async.service.wiring import build_engine, stopping_on_signals
from playguard_async.settings import Settings
from playguard_lab import RedisServer

GO_KEY = "bench:fleet_simulation:go"
READY_KEY = "bench:fleet_simulation:ready"
FIELDS = 4
"""Numbers stored per cycle in a tick's results file: Marquee index, begun, finished (wall-clock
seconds), 1.0 if ``ok``."""
POLL = 0.1
STALL_TICKER = 0.01
"""Seconds between the parent's looks at the replicas' journals."""
KILL_WATCH_TICKS = 5
"""Ticks after the kill the parent waits for the dead replica's share before giving up."""


# -- the replica (a child process) -------------------------------------------------------------


class ShareObserver(Unobserved):
    """Keeps what the engine says of each tick's split: live replicas seen, Marquees assigned."""

    def __init__(self) -> None:
        self.replicas = 0
        self.assigned = 0

    def fleet_shared(self, replicas: int, assigned: int) -> None:
        self.replicas, self.assigned = replicas, assigned


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


def replica_settings(
    name: str, inventory: Path, redis_url: str, *, tick: float, jitter: float
) -> Settings:
    """The daemon's default settings but the tick, and an inventory size and read time that fit
    the fleet, as its operator would set them."""
    return Settings.model_validate(
        {
            "inventory": inventory,
            "redis_url": redis_url,
            "replica_id": name,
            "tick_interval": tick,
            "tick_jitter": jitter,
            "log_level": "warning",
            # The defaults fit 10,000 Marquees; 8 replicas reading 100,000 at once on two cores
            # outlast the default read timeout (bench/README.md, "Fleet simulation").
            "inventory_max_bytes": max(INVENTORY_MAX_BYTES, 2 * inventory.stat().st_size),
            "inventory_read_timeout": 600.0,
        }
    )


async def replica(settings: Settings, rundir: Path) -> None:
    """One replica as the daemon runs one, until SIGTERM."""
    name, tick = settings.replica_id, settings.tick_interval
    observer = ShareObserver()
    engine = build_engine(settings, observer=observer)
    engine.phases = [NoOpPhase(phase) for phase in BUILTIN_PHASES]
    journal = TickJournal(engine, observer, name, rundir)
    redis = engine.redis
    try:
        await engine.load_inventory()
        journal.write("loaded")
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
        await redis.aclose()


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

    @classmethod
    def take(cls, redis: Redis) -> RedisSample:
        cpu, memory = redis.info("cpu"), redis.info("memory")
        return cls(
            cpu["used_cpu_sys"] + cpu["used_cpu_user"],
            memory["used_memory"] / 2**20,
            memory["used_memory_rss"] / 2**20,
        )


@dataclass
class FleetRun:
    """What one replica count's run left: per replica its journal, per tick Redis's figures."""

    replicas: int
    children: list[Child]
    redis_cpu: dict[int, float] = field(default_factory=dict)
    redis_end: RedisSample | None = None
    kill: dict[str, Any] | None = None


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


def run_fleet(
    args: argparse.Namespace, replicas: int, inventory: Path, server: RedisServer, workdir: Path
) -> FleetRun:
    redis = Redis.from_url(server.url)
    redis.flushall()
    rundir = workdir / f"replicas-{replicas}"
    rundir.mkdir()
    children = []
    for n in range(1, replicas + 1):
        name = f"r{n}"
        command = [
            sys.executable,
            __file__,
            "--child",
            name,
            str(inventory),
            server.url,
            str(rundir),
            str(args.tick),
            str(args.jitter),
        ]
        # This checkout's package, whatever the installed one is (as ``code_versions`` runs it).
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, env=env)
        children.append(Child(name, process, rundir / f"{name}.jsonl"))
    run = FleetRun(replicas, children)

    def alive() -> list[Child]:
        for child in children:
            if child.process.poll() is not None and not child.killed:
                raise SystemExit(f"fleet_simulation: replica {child.name} exited early")
        return [child for child in children if not child.killed]

    def all_ended(tick: int) -> bool:
        return all(tick in child.ticks() for child in alive())

    # Every replica reads the whole inventory at once, on two cores shared by all.
    def all_ready() -> bool:
        return bool(alive()) and int(redis.get(READY_KEY) or 0) == replicas

    wait_for("every replica's inventory", all_ready, timeout=120 + 30 * replicas * args.fleet / 1e4)
    go = time.time()
    redis.set(GO_KEY, repr(go))
    last = args.ticks - 1
    try:
        for tick in range(args.ticks):
            time.sleep(max(0.0, go + tick * args.tick - time.time()))
            start = RedisSample.take(redis)
            wait_for(f"tick {tick}", partial(all_ended, tick), timeout=args.tick * 10)
            end = RedisSample.take(redis)
            run.redis_cpu[tick] = end.cpu - start.cpu
            run.redis_end = end
        if replicas == args.kill_at:
            run.kill = kill_one(args, children, alive, all_ended, last)
    finally:
        for child in alive():
            child.process.send_signal(signal.SIGTERM)
        for child in children:
            child.process.wait(timeout=120)
        redis.close()
    return run


def kill_one(
    args: argparse.Namespace, children: list[Child], alive: Any, all_ended: Any, last: int
) -> dict[str, Any]:
    """SIGKILL the last replica between two ticks, once the fleet has been cycled, and follow the
    survivors' ticks until every Marquee has had an ``ok`` cycle begun after the kill."""
    cycled = len(first_ok(children, list(range(last + 1))))
    if cycled < args.fleet:
        return {"skipped": f"fleet not fully cycled ({cycled}/{args.fleet})"}
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
        if len(covered) == args.fleet:
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


def fleet_cycled(run: FleetRun, fleet: int, tick: int) -> tuple[float, int]:
    """Seconds from the tick's first start until every Marquee had an ``ok`` cycle it started, and
    how many had one (the seconds are NaN unless all did)."""
    ended = first_ok(run.children, [tick])
    start = min(child.ticks()[tick]["started"] for child in run.children)
    if len(ended) < fleet:
        return float("nan"), len(ended)
    return max(finished for _, finished in ended.values()) - start, len(ended)


def report(args: argparse.Namespace, runs: list[FleetRun], load: tuple[float, ...]) -> None:
    first, last = 0, args.ticks - 1
    print(
        f"fleet {args.fleet} Marquees x 5 Playgrounds, no-op phases; tick {args.tick:g} s, "
        f"tick_jitter {args.jitter:g}, {args.ticks} ticks per replica count; first tick t0, "
        f"last t{last}; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}, "
        f"{os.cpu_count()} cores"
    )
    print()
    print(
        f"{'replicas':>8} {'replica':>7} {'attempts t0':>11} {f'attempts t{last}':>11} "
        f"{'vs 1/N':>7} {'not ok':>6} {'stall s':>7} {'cpu t0 s':>8} {f'cpu t{last} s':>8} "
        f"{'rss load':>8} {'rss end':>8} {'peak':>8}"
    )
    share_met: dict[int, float] = {}
    not_ok: dict[int, Counter[str]] = {}
    for run in runs:
        share = args.fleet / run.replicas
        worst = 0.0
        not_ok[run.replicas] = Counter()
        for child in run.children:
            ticks = child.ticks()
            loaded = next(e for e in child.events() if e["event"] == "loaded")
            measured = [ticks[k] for k in range(args.ticks)]
            worst = max(worst, *(abs(t["attempts"] - share) / share for t in measured))
            outcomes = sum((Counter(t["outcomes"]) for t in measured), Counter[str]())
            outcomes.pop("ok", None)
            not_ok[run.replicas] += outcomes
            end = measured[-1]
            print(
                f"{run.replicas:>8} {child.name:>7} {ticks[first]['attempts']:>11} "
                f"{ticks[last]['attempts']:>11} "
                f"{end['attempts'] / share - 1:>+7.1%} {outcomes.total():>6} "
                f"{max(t['stall'] for t in measured):>7.2f} "
                f"{ticks[first]['tick_cpu']:>8.2f} {ticks[last]['tick_cpu']:>8.2f} "
                f"{loaded['rss']:>8.0f} {end['rss']:>8.0f} {end['hwm']:>8.0f}"
            )
        share_met[run.replicas] = worst
    print(
        "(attempts: locks tried; vs 1/N: the last tick's against fleet/N; not ok: cycles of all "
        "measured ticks that ended otherwise; stall: the longest the event loop was held at once "
        "while a tick's cycles ran; cpu: the process's from the tick's start to its last "
        "cycle's end; memory in MiB: VmRSS after the inventory read and after the last tick, "
        "peak VmHWM)"
    )
    for replicas, outcomes in not_ok.items():
        if outcomes:
            counts = ", ".join(f"{outcome} {count}" for outcome, count in outcomes.most_common())
            print(f"not ok at {replicas} replicas, all measured ticks: {counts}")
    print()
    print(
        f"{'replicas':>8} {'cycled t0 s':>11} {f'cycled t{last} s':>11} {'every tick':>10} "
        f"{'redis cpu t0 s':>14} {f'redis cpu t{last} s':>14} {'redis used MiB':>14} "
        f"{'redis rss MiB':>13}"
    )
    every_tick: dict[int, bool] = {}
    for run in runs:
        cycled = [fleet_cycled(run, args.fleet, tick) for tick in range(args.ticks)]
        every_tick[run.replicas] = all(seconds < args.tick for seconds, _ in cycled)
        assert run.redis_end is not None
        print(
            f"{run.replicas:>8} {_cycled(cycled[first], args.fleet):>11} "
            f"{_cycled(cycled[last], args.fleet):>11} "
            f"{'yes' if every_tick[run.replicas] else 'no':>10} "
            f"{run.redis_cpu[first]:>14.2f} {run.redis_cpu[last]:>14.2f} "
            f"{run.redis_end.used:>14.1f} {run.redis_end.rss:>13.1f}"
        )
    print(
        "(cycled: from the tick's first start until every Marquee had an ok cycle it started; "
        "every tick: so within the tick, in every tick; redis: CPU from the tick's start to "
        "its last cycle's end, memory after the last tick)"
    )
    print()
    for replicas, worst in share_met.items():
        print(
            f"goal: attempts per replica within 10 % of fleet/N in every tick, {replicas} "
            f"replicas: worst {worst:.1%}: {'met' if worst <= 0.10 else 'NOT met'}"
        )
    largest = max(every_tick)
    print(
        f"goal: every Marquee cycled every tick at {largest} replicas: "
        f"{'met' if every_tick[largest] else 'NOT met'}"
    )
    for run in runs:
        if run.kill is None:
            continue
        kill = run.kill
        if "skipped" in kill:
            print(f"kill at {run.replicas} replicas: skipped, {kill['skipped']}")
            continue
        met = isinstance(kill["ticks"], int) and kill["ticks"] <= 2
        if "views" not in kill:
            print(
                f"goal: {kill['victim']} of {run.replicas} SIGKILLed, its share cycled by "
                f"the others within 2 ticks: not within {kill['ticks']} ticks: NOT met"
            )
            continue
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


def _cycled(cycled: tuple[float, int], fleet: int) -> str:
    seconds, count = cycled
    return f"{seconds:.1f}" if count == fleet else f"{count}/{fleet}"


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
    parser.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    parser.add_argument("--write-inventory", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        name, inventory, redis_url, rundir, tick, jitter = args.child
        configure_logging("json", "warning", final=True)
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            settings = replica_settings(
                name, Path(inventory), redis_url, tick=float(tick), jitter=float(jitter)
            )
            runner.run(replica(settings, Path(rundir)))
        return
    if args.write_inventory:
        print(write_inventory(Path(args.write_inventory[0]), int(args.write_inventory[1])))
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
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as scratch, RedisServer(Path(scratch) / "redis") as server:
        workdir = Path(scratch)
        # In a process of its own: dumping the inventory takes many times its size in memory
        # (bench/README.md, "Dispatch"), which would stay in this process's heap, and in its
        # children's ru_maxrss, for the whole run.
        command = [sys.executable, __file__, "--write-inventory", scratch, str(args.fleet)]
        written = subprocess.run(command, check=True, capture_output=True, text=True)
        inventory = Path(written.stdout.strip())
        load = os.getloadavg()
        runs = []
        for replicas in (int(count) for count in args.replicas.split(",")):
            runs.append(run_fleet(args, replicas, inventory, server, workdir))
        report(args, runs, load)
    print(
        f"wall {time.monotonic() - started:.0f} s; load average at the end {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
