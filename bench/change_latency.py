"""Change-to-host latency: from a committed UPDATE in PostgreSQL to the changed container as
desired on the host, through a real ``playguard run`` (issue 29).

Starts a lab (redis-server, registry, git origin, one sshd + dockerd standing for the host, and a
PostgreSQL with ``pg_stat_statements``), and for each mode and code version a database of its
own, migrated and filled by that version's code, and a ``playguard run`` process of that version
reading it (``desired_state``, JSON log at debug level, ``health_grace`` 1 s, ``tick_interval``
``--tick``). One Marquee, ``marquee-0``, has one Playground, ``web-marquee-0``: a busybox
container of the origin's compose project (branch ``latency``: the lab's project with
``init: true``, so a stop takes no 10 s grace).

A change is ``UPDATE playguard.playgrounds SET state = 'running'`` of that Playground after it was
stopped (the cheapest real change: the cycle runs one compose command, ``up``, with compose's
answers remembered; a branch switch would add a fetch and two ``config`` runs on the host).
Before each, an UPDATE to ``stopped`` stops it the same way (its latency is a column of its own).
Latency is from the UPDATE's commit (the statement returned) until the lab's dockerd, asked over
its Engine API every 20 ms, shows the project's container running (for a stop: none running).
Each change waits for the cycle that made it to finish, and a random 0.1-0.5 s more, so changes
are one after another and none is a follow-up of the cycle before.

Modes:
- ``quiet``: that Marquee alone in the desired state;
- ``load``: the same plus ``--fleet`` other Marquees (5 Playgrounds each, ``launchable`` false, so
  they need no host and no cycle runs for them), and a writer committing ``--rate`` UPDATEs a
  second to their rows (one row each, a port flipped) during the whole measurement.

From the daemon's log, per change: commit -> ``desired_state.notified`` (the gathering window),
-> the cycle's start (the wake-up's desired-state read, ``engine.woken``), -> the compose command
(``remote.change``: lock, the phases before reconcile_playgrounds, the listing), -> seen on the
host. Also: full snapshot reads (``pg_stat_statements``: calls of the unfiltered SELECT of
``marquees``), notifications committed, wake-ups (``engine.woken``), changes not taken by a
wake-up but by a tick, and the daemon's CPU (``/proc``) over the measurement.

    .venv/bin/python bench/change_latency.py [--changes 100] [--modes quiet,load] [--before REF]
        [--fleet 10000] [--rate 20] [--tick 60] [--short] [--keep]

``--short`` (``scripts/bench.sh``): 8 changes per mode.

Goals (issue 29), printed beside the figures: quiet p50 < 1.5 s and p99 < 3 s; under load no
change waits longer than one tick and not one full read per notification. Never part of the
tests. With ``--before REF`` the code of git ref ``REF`` is measured too, mode by mode, before
this checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
from code_versions import git_output, versions
from lab_database import create_database, import_inventory, run_import

from playguard_async.kits.aio import bounded
from playguard_lab import Lab, PostgresServer
from playguard_lab.origin import compose_file
from playguard_lab.process import tree_cpu_seconds
from playguard_lab.shared_host import marquee_entry, registry_entry

MARQUEE = "marquee-0"
PLAYGROUND = f"web-{MARQUEE}"
PROJECT_LABEL = f"com.docker.compose.project=pg-{PLAYGROUND}"
BRANCH = "latency"
POLL = 0.02
"""Seconds between two looks at the host's containers."""
IDLE_PREFIX = "idle-"
GOAL_P50, GOAL_P99 = 1.5, 3.0


class StatsPostgres(PostgresServer):
    """The lab's PostgreSQL with ``pg_stat_statements`` loaded: which queries the daemon ran, and
    how often, counted by the server whatever the daemon's version logs."""

    def _command(self) -> list[str]:
        return [*super()._command(), "-c", "shared_preload_libraries=pg_stat_statements"]


# ---- the desired state -------------------------------------------------------------------------


def desired_state(lab: Lab, directory: Path, fleet: int) -> dict[str, Any]:
    """The one Marquee with its one Playground, and ``fleet`` Marquees that run no cycles, each
    with 5 Playgrounds (the other benchmarks' 10,000 x 5), on paths of the lab's host."""
    directory.mkdir(exist_ok=True)
    real = marquee_entry(lab.marquees[0], MARQUEE, directory)
    idle = [
        {
            "name": f"{IDLE_PREFIX}{index:05d}",
            "host": f"10.{index // 65536}.{index // 256 % 256}.{index % 256}",
            "user": "playguard",
            "identity_file": real["identity_file"],
            "known_hosts": real["known_hosts"],
            "launchable": False,
        }
        for index in range(fleet)
    ]
    return {
        "marquees": [real, *idle],
        "registries": [registry_entry(lab, directory)],
        "playspecs": [
            {"name": "web", "repo": lab.git.url, "images": [lab.image], "registry": "lab"}
        ],
        "playgrounds": [
            {"name": PLAYGROUND, "playspec": "web", "marquee": MARQUEE, "branch": BRANCH},
            *(
                {"name": f"{m['name']}-{n}", "playspec": "web", "marquee": m["name"], "branch": "b"}
                for m in idle
                for n in range(5)
            ),
        ],
    }


def settings_file(directory: Path, lab: Lab, database_url: str, password: str, tick: float) -> Path:
    """The daemon's settings. Debug level: ``desired_state.notified`` is a debug line.
    ``health_grace`` 1 s: each change waits for its cycle to end, which waits for the health
    gate after ``up``; the default 5 s would add 4 s a change and measure nothing more (the
    container is seen running before the gate)."""
    password_file = directory / "pg-password"
    password_file.write_text(password + "\n")
    password_file.chmod(0o600)
    path = directory / "playguard.toml"
    path.write_text(
        f'redis_url = "{lab.redis.url}"\n'
        f'inventory = "{directory / "unused.yaml"}"\n'
        f'desired_state = "{database_url}"\n'
        f'desired_state_password_file = "{password_file}"\n'
        f"tick_interval = {tick}\n"
        "lock_ttl = 120\n"
        "remote_command_timeout = 60\n"
        "docker_api_timeout = 60\n"
        "health_grace = 1\n"
        'compose_command = ["docker-compose"]\n'
        "orphan_grace = 0\n"
        'http_address = ""\n'
        'log_format = "json"\n'
        'log_level = "debug"\n'
    )
    return path


# ---- the daemon and its log --------------------------------------------------------------------


class DaemonLog:
    """The daemon's JSON lines as they are written (whole lines only), with their times, by
    event: polled every 50 ms while a debug log grows, so a look costs what is new."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._events: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self._offset = 0

    def read(self) -> None:
        with self.path.open("rb") as stream:
            stream.seek(self._offset)
            data = stream.read()
        whole = data.rfind(b"\n") + 1
        self._offset += whole
        for raw in data[:whole].splitlines():
            with contextlib.suppress(ValueError):
                line = json.loads(raw)
                if isinstance(line, dict) and "timestamp" in line and "event" in line:
                    line["t"] = datetime.fromisoformat(line["timestamp"]).timestamp()
                    self._events[line["event"]].append(line)

    def events(self, name: str, since: float = 0.0) -> list[dict[str, Any]]:
        """Lines of event ``name`` logged at ``since`` or later (wall clock), in order."""
        lines = self._events[name]
        return lines[bisect.bisect_left(lines, since, key=itemgetter("t")) :]

    def tail(self, count: int = 20) -> str:
        return "\n".join(self.path.read_text(errors="replace").splitlines()[-count:])


@contextlib.asynccontextmanager
async def daemon(code: Path, config: Path, log_path: Path) -> AsyncIterator[int]:
    """``playguard run`` of the code at ``code``; SIGTERM (then SIGKILL) on the way out."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PLAYGUARD_") and key.lower() not in {"http_proxy", "https_proxy"}
    }
    env["PYTHONPATH"] = str(code)
    argv = ["-m", "playguard_async", "run", "--config", str(config)]
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable, *argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
            cwd=config.parent, start_new_session=True,
        )  # fmt: skip
    try:
        yield process.pid
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        try:
            await bounded(30, process.wait())
        except TimeoutError:
            os.killpg(process.pid, signal.SIGKILL)
            await process.wait()


def process_cpu(pid: int) -> float:
    """CPU seconds of one process so far (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---- the host ----------------------------------------------------------------------------------


class Host:
    """The lab host's containers of the Playground, through its dockerd's Engine API."""

    def __init__(self, socket: Path) -> None:
        self._session = aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(socket)))
        self._query = {"all": "1", "filters": json.dumps({"label": [PROJECT_LABEL]})}

    async def running(self) -> bool:
        async with self._session.get("http://docker/containers/json", params=self._query) as got:
            got.raise_for_status()
            containers: list[dict[str, Any]] = await got.json()
        return any(container["State"] == "running" for container in containers)

    async def until(self, running: bool, timeout: float) -> float:
        """``time.monotonic()`` when the Playground is first seen ``running`` (or not)."""
        deadline = time.monotonic() + timeout
        while await self.running() != running:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{PLAYGROUND} not {'up' if running else 'down'} in {timeout} s")
            await asyncio.sleep(POLL)
        return time.monotonic()

    async def close(self) -> None:
        await self._session.close()


# ---- one measurement ---------------------------------------------------------------------------


@dataclass
class Change:
    state: str
    committed: float
    """Wall-clock time the UPDATE returned (for the log's times)."""
    latency: float
    landed: float
    split: dict[str, float] = field(default_factory=dict)
    by_tick: bool = False

    def shown_split(self) -> str:
        parts = ("gathered", "to_cycle", "to_command", "command")
        shown = " + ".join(
            f"{self.split[part]:.2f}" if part in self.split else "?" for part in parts
        )
        return shown + (" (a tick's cycle)" if self.by_tick else "")


@dataclass
class Run:
    mode: str
    code: str
    changes: list[Change]
    """Stopped -> running: the figures."""
    stops: list[Change]
    seconds: float
    daemon_cpu: float
    postgres_cpu: float
    full_reads: int
    notifications: int
    wakes: int
    writer_late: int = 0


class Writer:
    """``rate`` UPDATEs a second, each its own transaction, to the idle Marquees' rows in turn."""

    def __init__(self, connection: asyncpg.Connection, fleet: int, rate: float) -> None:
        self._connection = connection
        self._fleet = fleet
        self._rate = rate
        self.sent = 0
        self.late = 0

    async def run(self) -> None:
        step, due = 1.0 / self._rate, time.monotonic()
        while True:
            index = self.sent % self._fleet
            port = 2222 if (self.sent // self._fleet) % 2 == 0 else 22
            await self._connection.execute(
                "UPDATE playguard.marquees SET port = $2 WHERE name = $1",
                f"{IDLE_PREFIX}{index:05d}",
                port,
            )
            self.sent += 1
            due += step
            now = time.monotonic()
            if due < now - step:  # more than a step behind: skip, do not burst
                self.late += 1
                due = now
            await asyncio.sleep(max(0.0, due - now))


@contextlib.asynccontextmanager
async def background(work: Coroutine[Any, Any, None]) -> AsyncIterator[None]:
    """``work`` running while the block runs, cancelled after it."""
    task = asyncio.create_task(work)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task  # raises what ended it early, if anything did


async def full_reads(connection: asyncpg.Connection) -> int:
    """Calls of the SELECT that reads every row of ``marquees`` (a whole snapshot's read),
    since the last reset: a read of only what changed would filter it."""
    rows = await connection.fetch("SELECT query, calls FROM pg_stat_statements")
    return sum(
        int(row["calls"])
        for row in rows
        if row["query"].startswith("SELECT")
        and '"marquees" ORDER BY name' in row["query"]
        and "WHERE" not in row["query"].upper()
    )


async def converged(log: DaemonLog, connection: asyncpg.Connection, timeout: float) -> None:
    """Wait for the daemon's listener and a cycle of the Marquee that found nothing to do.

    Every run starts from the same host: converged, and with compose's answers known to the
    daemon. Code before the answers were learned from what ``up`` left (a ``--before`` ref)
    asks them in full only in a cycle with nothing to do: one that runs ``up`` asks the service
    names alone, so each start after it would ask them again, 0.3 s on this host. An UPDATE
    that changes nothing wakes the Marquee for such a cycle instead of waiting a tick."""
    deadline, since = time.monotonic() + timeout, 0.0
    while time.monotonic() < deadline:
        log.read()
        finished = [
            line for line in log.events("cycle.finished", since) if line["marquee"] == MARQUEE
        ]
        if log.events("desired_state.listening") and finished:
            if finished[-1]["outcome"] == "ok" and finished[-1]["actions"] == 0:
                return
            since = time.time()
            await connection.execute(
                "UPDATE playguard.playgrounds SET state = 'running' WHERE name = $1", PLAYGROUND
            )
        await asyncio.sleep(0.2)
    raise SystemExit(f"the daemon did not converge in {timeout} s:\n{log.tail()}")


async def cycle_after(log: DaemonLog, since: float, timeout: float) -> None:
    """Wait for a cycle of the Marquee to finish after wall-clock ``since``."""
    deadline = time.monotonic() + timeout
    while True:
        log.read()
        if any(line.get("marquee") == MARQUEE for line in log.events("cycle.finished", since)):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"no cycle of {MARQUEE} finished in {timeout} s:\n{log.tail()}")
        await asyncio.sleep(0.05)


def prepare(lab: Lab, directory: Path, fleet: int) -> Path:
    """The run's directory and the desired state to import, as compact JSON (JSON is YAML):
    indented, 10,000 x 5 would pass the inventory file's size limit."""
    directory.mkdir(parents=True)
    inventory = directory / "inventory.json"
    inventory.write_text(json.dumps(desired_state(lab, directory.parent / "host", fleet)))
    return inventory


@dataclass
class Measurement:
    """One code version in one mode: its database, its daemon, its changes."""

    args: argparse.Namespace
    lab: Lab
    server: PostgresServer
    code: Path
    label: str
    mode: str

    async def run(self, directory: Path) -> Run:
        fleet = self.args.fleet if self.mode == "load" else 0
        inventory = await asyncio.to_thread(prepare, self.lab, directory, fleet)
        server = self.server
        url = await create_database(server, directory.name, extensions=["pg_stat_statements"])
        await asyncio.to_thread(run_import, __file__, server, url, inventory, self.code)
        config = settings_file(directory, self.lab, url, server.password, self.args.tick)
        log = DaemonLog(directory / "daemon.log")
        async with contextlib.AsyncExitStack() as stack:
            connection = await asyncpg.connect(url, password=server.password)
            stack.push_async_callback(connection.close)
            host = Host(self.lab.marquees[0].docker.socket)
            stack.push_async_callback(host.close)
            pid = await stack.enter_async_context(daemon(self.code, config, log.path))
            await converged(log, connection, timeout=300)
            writer = None
            if fleet:
                writing = await asyncpg.connect(url, password=server.password)
                stack.push_async_callback(writing.close)
                writer = Writer(writing, fleet, self.args.rate)
                await stack.enter_async_context(background(writer.run()))
                await asyncio.sleep(2.0)  # the daemon at its pace under the writes, then measure
            return await self.changes(Daemon(pid, log, host, connection, writer))

    async def changes(self, daemon: Daemon) -> Run:
        """``--warmup`` pairs of changes unmeasured, then ``--changes`` measured pairs: the
        Playground stopped, then running again; the starts are the figures, the stops a column."""
        args, server, connection, writer = self.args, self.server, daemon.connection, daemon.writer
        rng = random.Random(29)
        starts: list[Change] = []
        stops: list[Change] = []
        cpu = pg_cpu = started = 0.0
        sent_before = 0
        for index in range(args.warmup + args.changes):
            if index == args.warmup:
                await connection.execute("SELECT pg_stat_statements_reset()")
                cpu, pg_cpu = process_cpu(daemon.pid), tree_cpu_seconds(server.pid or 0)
                started, sent_before = time.time(), writer.sent if writer else 0
            for state, kept in (("stopped", stops), ("running", starts)):
                change = await daemon.change(state, args.tick)
                if index >= args.warmup:
                    kept.append(change)
                await asyncio.sleep(rng.uniform(0.1, 0.5))
        ended = time.time()
        reads = await full_reads(connection)
        daemon.log.read()
        for change in (*starts, *stops):
            split_of(change, daemon.log)
        return Run(
            mode=self.mode,
            code=self.label,
            changes=starts,
            stops=stops,
            seconds=ended - started,
            daemon_cpu=process_cpu(daemon.pid) - cpu,
            postgres_cpu=tree_cpu_seconds(server.pid or 0) - pg_cpu,
            full_reads=reads,
            notifications=2 * args.changes + ((writer.sent - sent_before) if writer else 0),
            wakes=len(daemon.log.events("engine.woken", started)),
            writer_late=writer.late if writer else 0,
        )


@dataclass
class Daemon:
    """A running daemon, what it logs, the host it keeps and the database it reads."""

    pid: int
    log: DaemonLog
    host: Host
    connection: asyncpg.Connection
    writer: Writer | None

    async def change(self, state: str, tick: float) -> Change:
        """Commit the Playground's new ``state``, see it land on the host, wait for the cycle
        that made it to end (so the next change starts a cycle of its own, not a follow-up)."""
        await self.connection.execute(
            "UPDATE playguard.playgrounds SET state = $1 WHERE name = $2", state, PLAYGROUND
        )
        committed, committed_wall = time.monotonic(), time.time()
        landed = await self.host.until(state == "running", timeout=2 * tick + 60)
        landed_wall = committed_wall + (landed - committed)
        await cycle_after(self.log, landed_wall, timeout=120)
        return Change(state, committed_wall, landed - committed, landed_wall)


def split_of(change: Change, log: DaemonLog) -> None:
    """Where the change's time went, from the daemon's log lines after its commit."""
    t0, end = change.committed, change.landed
    action = next(
        (
            line
            for line in log.events("remote.change", t0)
            if line.get("marquee") == MARQUEE
            and line["action"].startswith(("compose up playground", "stop playground"))
        ),
        None,
    )
    if action is None or action["t"] > end:
        return
    cycle = next(
        (
            line
            for line in log.events("cycle.finished", action["t"])
            if line.get("marquee") == MARQUEE and line.get("cycle") == action.get("cycle")
        ),
        None,
    )
    cycle_start = cycle["t"] - cycle["duration"] if cycle else action["t"]
    notified = next(
        (
            line
            for line in log.events("desired_state.notified", t0)
            if MARQUEE in line.get("marquees", ())
        ),
        None,
    )
    change.by_tick = notified is None or notified["t"] > cycle_start
    if not change.by_tick and notified is not None:
        change.split["gathered"] = notified["t"] - t0
        change.split["to_cycle"] = cycle_start - notified["t"]
    change.split["to_command"] = action["t"] - cycle_start
    change.split["command"] = end - action["t"]


# ---- the report --------------------------------------------------------------------------------


def quantile(values: Sequence[float], q: float) -> float:
    """Nearest rank: of 100 values p99 is the 99th, of 20 it is the largest."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def median_of(changes: Sequence[Change], key: str) -> str:
    values = [change.split[key] for change in changes if key in change.split]
    return f"{quantile(values, 0.5):.2f}" if values else "-"


def report(runs: Sequence[Run], tick: float) -> None:
    print(
        f"\n{'mode':<6}{'code':>9}{'n':>5}{'p50':>7}{'p90':>7}{'p99':>7}{'max':>7}"
        f"{'stop p50':>9}{'stop max':>9}{'reads':>7}{'notifs':>8}{'wakes':>7}"
        f"{'cpu s':>7}{'cpu %':>7}{'pg cpu s':>9}{'by tick':>8}"
    )
    for run in runs:
        latency = [change.latency for change in run.changes]
        stops = [change.latency for change in run.stops]
        print(
            f"{run.mode:<6}{run.code:>9}{len(latency):>5}"
            + "".join(f"{quantile(latency, q):>7.2f}" for q in (0.5, 0.9, 0.99, 1.0))
            + f"{quantile(stops, 0.5):>9.2f}{max(stops):>9.2f}"
            f"{run.full_reads:>7}{run.notifications:>8}{run.wakes:>7}"
            f"{run.daemon_cpu:>7.1f}{100 * run.daemon_cpu / run.seconds:>7.0f}"
            f"{run.postgres_cpu:>9.1f}{sum(c.by_tick for c in run.changes):>8}"
        )
    print(
        "\nwhere the time goes (median seconds): commit -> notified (gathering) -> cycle started "
        "(wake-up's read) -> compose command started -> seen on the host"
    )
    print(f"{'mode':<6}{'code':>9}{'gathered':>10}{'to cycle':>10}{'to command':>12}{'command':>9}")
    for run in runs:
        print(
            f"{run.mode:<6}{run.code:>9}"
            + "".join(
                f"{median_of(run.changes, key):>{width}}"
                for key, width in (("gathered", 10), ("to_cycle", 10), ("to_command", 12),
                                   ("command", 9))
            )
        )  # fmt: skip
    print("\nthe slowest changes of each run (seconds: latency = gathered + to cycle + to command "
          "+ command)")  # fmt: skip
    for run in runs:
        slowest = sorted((*run.changes, *run.stops), key=attrgetter("latency"))[-3:]
        shown = ", ".join(f"{c.state} {c.latency:.2f} = {c.shown_split()}" for c in slowest)
        print(f"  {run.mode} {run.code}: {shown}")
    print(f"\ngoals: quiet p50 < {GOAL_P50} s, p99 < {GOAL_P99} s; load: max < one tick "
          f"({tick:g} s), fewer full reads than notifications")  # fmt: skip
    for run in runs:
        latency = [change.latency for change in run.changes]
        if run.mode == "quiet":
            p50, p99 = quantile(latency, 0.5), quantile(latency, 0.99)
            verdict = (f"p50 {p50:.2f} {'met' if p50 < GOAL_P50 else 'NOT met'}, "
                       f"p99 {p99:.2f} {'met' if p99 < GOAL_P99 else 'NOT met'}")  # fmt: skip
        else:
            worst = max(latency)
            per = run.full_reads / run.notifications
            verdict = (
                f"max {worst:.2f} {'met' if worst < tick else 'NOT met'}, "
                f"{per:.3f} full reads per notification "
                f"({run.full_reads / run.seconds * 60:.0f} a minute) "
                f"{'met' if per < 1 else 'NOT met'}"
            )
            if run.writer_late:
                verdict += f" (writer fell behind {run.writer_late} times)"
        print(f"  {run.mode} {run.code}: {verdict}")


# ---- main --------------------------------------------------------------------------------------


async def bench(args: argparse.Namespace, lab: Lab, server: PostgresServer, workdir: Path) -> None:
    codes = versions(args.before, workdir)
    runs = []
    for mode in args.modes:
        for label, code in codes.items():
            started = time.monotonic()
            print(f"... {mode}, {label}", file=sys.stderr, flush=True)
            measurement = Measurement(args, lab, server, code, label, mode)
            runs.append(await measurement.run(workdir / f"{mode}_{label}"))
            print(f"    {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    print(
        f"{PLAYGROUND} stopped <-> running, {args.changes} changes per run (+{args.warmup} "
        f"unmeasured); load: {args.fleet} idle Marquees x 5 Playgrounds, {args.rate:g} "
        f"UPDATEs/s; tick {args.tick:g} s; {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f}; now = {git_output('rev-parse', '--short', 'HEAD')}"
    )
    report(runs, args.tick)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--modes", default="quiet,load")
    parser.add_argument("--before", help="git ref of code to measure beside this checkout")
    parser.add_argument("--fleet", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=20.0, help="background UPDATEs a second")
    parser.add_argument("--tick", type=float, default=60.0, help="the daemon's tick_interval")
    parser.add_argument("--short", action="store_true", help="bench.sh: 8 changes per mode")
    parser.add_argument("--keep", action="store_true", help="keep the daemons' logs")
    parser.add_argument("--setup", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.setup:
        import_inventory(args.setup[0], Path(args.setup[1]))
        return
    if args.short:
        args.changes, args.warmup = 8, 1
    args.modes = args.modes.split(",")
    workdir = Path(tempfile.mkdtemp(prefix="pg-latency-", dir="/tmp"))
    try:
        with Lab(workdir / "lab", marquees=1) as lab, StatsPostgres(workdir / "pg") as server:
            lab.git.commit(BRANCH, {"compose.yaml": latency_compose(lab.image)}, "init: true")
            asyncio.run(bench(args, lab, server, workdir))
    finally:
        if args.keep:
            print(f"the daemons' logs are kept in {workdir}/*/daemon.log", file=sys.stderr)
        else:
            shutil.rmtree(workdir)


def latency_compose(image: str) -> str:
    """The lab's compose project, its process started under Docker's init, which passes the
    stop signal on: ``sleep`` as PID 1 would ignore it and make every stop wait 10 s."""
    return compose_file(image) + "    init: true\n"


if __name__ == "__main__":
    main()
