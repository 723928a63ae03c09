"""Real ``playguard run`` processes for tests, and what their witness phases saw.

``DaemonRunner`` writes settings and an inventory into a test's directory, starts ``playguard run``
in a session of its own with stderr in a file, and ``kill_all()`` ends every process it started
(SIGKILL works on a stopped process too), whatever the test did to them. The witness phases
(``tests.support.phases``) stamp ``time.monotonic()``, the clock this module reads as well, so a
test can set its own signals on the same time line as the daemons' phases.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

REPO_ROOT = Path(__file__).resolve().parents[2]
PLAYGUARD = Path(sys.executable).with_name("playguard")
WITNESS_PHASES = ("tests.support.phases:first", "tests.support.phases:second")

_T = TypeVar("_T")
_PROXY_VARIABLES = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}
_SERVICE_MANAGER_VARIABLES = {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"}


def wait_for(
    probe: Callable[[], _T | None], *, timeout: float, what: str, interval: float = 0.02
) -> _T:
    """Poll ``probe`` until it returns something truthy; its value, or AssertionError at the end."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"no {what} within {timeout:g} s")
        time.sleep(interval)


def within_lease(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with the remote timeouts at half the lease, as settings require them below
    ``lock_ttl``, unless a test set them itself."""
    ttl = values.get("lock_ttl", 900.0)
    if not isinstance(ttl, int | float) or ttl <= 0:
        return values  # a test of a bad lock_ttl: only that one is wrong
    return {"remote_command_timeout": ttl / 2, "docker_api_timeout": ttl / 2, **values}


def marquee_entry(name: str) -> dict[str, str]:
    """A Marquee the witness phases can run on: they never connect anywhere."""
    return {
        "name": name,
        "host": "127.0.0.1",
        "user": "root",
        "identity_file": "/nonexistent/id",
        "known_hosts": "/nonexistent/known_hosts",
    }


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value))
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        pairs = (f"{json.dumps(str(key))} = {_toml_value(item)}" for key, item in value.items())
        return "{" + ", ".join(pairs) + "}"
    raise TypeError(f"no TOML form for {value!r}")


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of ``path`` that are whole; a line being written, or a non-JSON one, is
    skipped (``--debug`` tracebacks and click's one-line errors are plain text)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    lines = []
    for line in text.splitlines():
        try:
            decoded = json.loads(line)
        except ValueError:
            continue
        if isinstance(decoded, dict):
            lines.append(decoded)
    return lines


def witness_lines(witness_dir: Path) -> list[dict[str, Any]]:
    """Every whole line every process has written so far, in time order; safe while they run."""
    lines = [line for path in witness_dir.glob("*.jsonl") for line in read_lines(path)]
    return sorted(lines, key=lambda line: float(line["t"]))


@dataclass
class Daemon:
    """One ``playguard run`` process."""

    replica: str
    process: subprocess.Popen[bytes]
    config: Path
    stderr_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def send(self, signum: signal.Signals) -> float:
        """Send ``signum``; returns when (monotonic clock), for comparison with witness stamps."""
        os.kill(self.pid, signum)
        return time.monotonic()

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.replica} (pid {self.pid}) still running after {timeout:g} s; "
                f"stderr ends:\n{self.stderr_tail()}"
            ) from None

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def stderr_tail(self, lines: int = 15) -> str:
        return "\n".join(self.stderr().splitlines()[-lines:])

    def events(self, name: str | None = None, **fields: object) -> list[dict[str, Any]]:
        """The JSON log lines on stderr, optionally only event ``name`` with these field values."""
        return [
            line
            for line in read_lines(self.stderr_path)
            if (name is None or line.get("event") == name)
            and all(line.get(key) == value for key, value in fields.items())
        ]

    def witness(self, witness_dir: Path) -> list[dict[str, Any]]:
        return read_lines(witness_dir / f"{self.pid}.jsonl")


@dataclass
class DaemonRunner:
    """Starts daemons against ``redis_url`` with their files in ``workdir``; ends them all."""

    workdir: Path
    redis_url: str
    started: list[Daemon] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.witness_dir = self.workdir / "witness"
        self.witness_dir.mkdir(parents=True, exist_ok=True)
        self.host_record_dir = self.workdir / "host-records"
        self.host_record_dir.mkdir(parents=True, exist_ok=True)
        self.inventory = self.workdir / "inventory.yaml"

    def write_inventory(
        self, names: Iterable[str], entry: Callable[[str], Mapping[str, object]] = marquee_entry
    ) -> Path:
        """The inventory, as flow-style YAML (JSON is YAML): the daemon re-reads it every tick.
        ``entry`` makes each Marquee's fields from its name (real SSH ones for fenced writes)."""
        document = {"marquees": [dict(entry(name)) for name in names]}
        self.inventory.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
        return self.inventory

    def settings(self, replica: str, **overrides: object) -> dict[str, object]:
        values: dict[str, object] = {
            "redis_url": self.redis_url,
            "replica_id": replica,
            "inventory": self.inventory,
            "phases": list(WITNESS_PHASES),
            "log_format": "json",
            "tick_interval": 2.0,
            "lock_ttl": 10.0,
            "redis_socket_timeout": 1.0,
            "redis_connect_timeout": 1.0,
            "shutdown_grace": 5.0,
        }
        values.update(overrides)
        return within_lease(values)

    def write_settings(self, name: str, values: Mapping[str, object]) -> Path:
        path = self.workdir / f"{name}.toml"
        text = "".join(f"{key} = {_toml_value(value)}\n" for key, value in values.items())
        path.write_text(text, encoding="utf-8")
        return path

    def environment(self, phase_seconds: float) -> dict[str, str]:
        """The test's environment without our settings, a service manager's variables or proxies."""
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith("PLAYGUARD_")
            and key not in _SERVICE_MANAGER_VARIABLES
            and key.lower() not in _PROXY_VARIABLES
        }
        env.update(
            PYTHONPATH=str(REPO_ROOT),
            PLAYGUARD_TEST_WITNESS_DIR=str(self.witness_dir),
            PLAYGUARD_TEST_HOST_RECORD_DIR=str(self.host_record_dir),
            PLAYGUARD_TEST_PHASE_SECONDS=str(phase_seconds),
        )
        return env

    def start(
        self,
        replica: str = "r1",
        *,
        phase_seconds: float = 0.3,
        first_phase_seconds: float | None = None,
        config: Path | None = None,
        debug: bool = False,
        env: Mapping[str, str] | None = None,
        wrapper: Sequence[str] = (),
        **settings: object,
    ) -> Daemon:
        """Start ``playguard run`` with ``config``, or with settings written for ``replica``;
        its witness phases take ``phase_seconds``, but the first one ``first_phase_seconds`` if
        given (``tests.support.phases.phase_seconds``); ``env`` adds to the environment (e.g.
        systemd's ``NOTIFY_SOCKET``); ``wrapper`` runs it (``ip netns exec NAME``: a command that
        execs it, so the pid stays the daemon's)."""
        run_number = sum(daemon.replica == replica for daemon in self.started) + 1
        if config is None:
            config = self.write_settings(replica, self.settings(replica, **settings))
        stderr_path = self.workdir / f"{replica}-{run_number}.stderr"
        debugging = ["--debug"] if debug else []
        first_phase = (
            {} if first_phase_seconds is None
            else {"PLAYGUARD_TEST_FIRST_PHASE_SECONDS": str(first_phase_seconds)}
        )  # fmt: skip
        argv = [*wrapper, str(PLAYGUARD), *debugging, "run", "--config", str(config)]
        with stderr_path.open("wb") as stderr:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=stderr,
                stderr=stderr,
                cwd=self.workdir,
                env={**self.environment(phase_seconds), **first_phase, **(env or {})},
                start_new_session=True,
            )
        daemon = Daemon(replica, process, config, stderr_path)
        self.started.append(daemon)
        return daemon

    def stop_all(self, daemons: Sequence[Daemon], *, timeout: float) -> dict[str, int]:
        """SIGTERM every one of ``daemons`` at once; their exit statuses by replica."""
        for daemon in daemons:
            daemon.send(signal.SIGTERM)
        return {daemon.replica: daemon.wait(timeout) for daemon in daemons}

    def kill_all(self) -> None:
        """End every process started here, and anything it started, however the test left it."""
        for daemon in self.started:
            if daemon.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(daemon.pid, signal.SIGKILL)
            daemon.process.wait(10)


@dataclass(frozen=True)
class Interval:
    """One phase on one Marquee, from its witness ``enter`` to its ``exit`` (None: never left)."""

    replica: str
    pid: int
    marquee: str
    phase: str
    fence: int
    enter: float
    exit: float | None
    status: str | None

    def overlap(self, other: Interval, *, open_until: float | None = None) -> float:
        """Seconds both were inside a phase; an open one counts as lasting to ``open_until``."""
        ends = [
            interval.exit if interval.exit is not None else open_until for interval in (self, other)
        ]
        if ends[0] is None or ends[1] is None:
            raise ValueError("an open interval needs open_until")
        return max(0.0, min(ends[0], ends[1]) - max(self.enter, other.enter))


def intervals(witness: Sequence[Mapping[str, Any]]) -> list[Interval]:
    """Pair every ``enter`` with the ``exit`` the same process wrote next for the same Marquee."""
    open_ones: dict[tuple[int, str], Mapping[str, Any]] = {}
    paired: list[Interval] = []
    for line in sorted(witness, key=lambda line: float(line["t"])):
        key = (int(line["pid"]), str(line["marquee"]))
        if line["event"] == "enter":
            assert key not in open_ones, f"two phases at once in one process: {line}"
            open_ones[key] = line
            continue
        enter = open_ones.pop(key)
        assert (enter["phase"], enter["fence"]) == (line["phase"], line["fence"]), (enter, line)
        paired.append(_interval(enter, float(line["t"]), str(line["status"])))
    paired.extend(_interval(enter, None, None) for enter in open_ones.values())
    return sorted(paired, key=lambda interval: interval.enter)


def _interval(enter: Mapping[str, Any], exit_t: float | None, status: str | None) -> Interval:
    return Interval(
        replica=str(enter["replica"]),
        pid=int(enter["pid"]),
        marquee=str(enter["marquee"]),
        phase=str(enter["phase"]),
        fence=int(enter["fence"]),
        enter=float(enter["t"]),
        exit=exit_t,
        status=status,
    )


def overlapping_pairs(complete: Sequence[Interval]) -> list[tuple[Interval, Interval]]:
    """Pairs of closed intervals on the same Marquee that share any moment."""
    by_marquee: dict[str, list[Interval]] = defaultdict(list)
    for interval in complete:
        assert interval.exit is not None, interval
        by_marquee[interval.marquee].append(interval)
    pairs = []
    for marquee_intervals in by_marquee.values():
        ordered = sorted(marquee_intervals, key=lambda interval: interval.enter)
        for index, earlier in enumerate(ordered):
            for later in ordered[index + 1 :]:
                if earlier.exit is not None and later.enter < earlier.exit:
                    pairs.append((earlier, later))
    return pairs


def fence_problems(all_intervals: Sequence[Interval]) -> list[str]:
    """What breaks "fences on a Marquee never go down, and each cycle's phases share one fence"."""
    problems = []
    by_marquee: dict[str, list[Interval]] = defaultdict(list)
    for interval in all_intervals:
        by_marquee[interval.marquee].append(interval)
    for marquee, marquee_intervals in sorted(by_marquee.items()):
        ordered = sorted(marquee_intervals, key=lambda interval: interval.enter)
        for earlier, later in itertools.pairwise(ordered):
            if later.fence < earlier.fence:
                problems.append(f"{marquee}: fence went down: {earlier} then {later}")
        owners: dict[int, set[int]] = defaultdict(set)
        firsts: dict[int, int] = defaultdict(int)
        for interval in ordered:
            owners[interval.fence].add(interval.pid)
            firsts[interval.fence] += interval.phase == "first"
        for fence, pids in sorted(owners.items()):
            if len(pids) > 1:
                problems.append(f"{marquee}: fence {fence} used by processes {sorted(pids)}")
            if firsts[fence] != 1:
                problems.append(f"{marquee}: fence {fence} began {firsts[fence]} cycles")
        last_of_process: dict[int, Interval] = {}
        for interval in ordered:
            previous = last_of_process.get(interval.pid)
            last_of_process[interval.pid] = interval
            if interval.phase == "first":
                continue
            if previous is None or (previous.phase, previous.fence) != ("first", interval.fence):
                problems.append(f"{marquee}: {interval} does not follow its cycle's first phase")
    return problems
