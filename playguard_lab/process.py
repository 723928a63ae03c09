"""Process control for the lab: find a program, run a set-up command, start a server in a session
of its own and end it and everything it started, by PID, leaving nothing behind.

Proxy settings are removed from every child's environment, so lab traffic meant for 127.0.0.1
cannot leave through a proxy.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import NamedTuple, Self

LOG_TAIL_LINES = 40
_SBIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")
_PROXY_VARIABLES = frozenset({"http_proxy", "https_proxy", "ftp_proxy", "all_proxy", "no_proxy"})
_POLL_INTERVAL = 0.05
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class MissingBinary(RuntimeError):
    """A program the lab needs is not installed; the message says which Debian package brings it."""

    def __init__(
        self,
        binary: str,
        package: str,
        detail: str = "not found on PATH nor in /usr/local/sbin, /usr/sbin, /sbin",
    ) -> None:
        super().__init__(f"{binary}: {detail}; install it with `apt-get install {package}`")
        self.binary = binary
        self.package = package


class ServerStartFailed(RuntimeError):
    """A server exited or did not answer in time; the tail of its log usually says why."""

    def __init__(self, server: str, reason: str, log_path: Path) -> None:
        super().__init__(
            f"{server} did not start: {reason}\n--- last lines of {log_path} ---\n{_tail(log_path)}"
        )
        self.server = server
        self.reason = reason
        self.log_path = log_path


class LabCommandFailed(RuntimeError):
    """A set-up command (docker, git, ssh-keygen...) failed; carries its exit status and output."""

    def __init__(self, argv: Sequence[str], returncode: int, output: str) -> None:
        tail = "\n".join(output.splitlines()[-LOG_TAIL_LINES:])
        super().__init__(f"`{shlex.join(argv)}` exited with status {returncode}:\n{tail}")
        self.argv = list(argv)
        self.returncode = returncode
        self.output = output


def find_binary(name: str, package: str) -> str:
    """Look in the sbin directories too: a non-root PATH often lacks them, and sshd lives there."""
    found = shutil.which(name) or shutil.which(name, path=os.pathsep.join(_SBIN_DIRS))
    if found is None:
        raise MissingBinary(name, package)
    return os.path.abspath(found)


def free_port() -> int:
    """A port the kernel just handed out on 127.0.0.1. Another process could take it before the
    server binds it: rare enough for a lab, and it shows as a start failure, never a hang."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment without proxy settings: dockerd, docker and git would otherwise send lab
    traffic meant for 127.0.0.1 to a proxy elsewhere."""
    env = {key: value for key, value in os.environ.items() if key.lower() not in _PROXY_VARIABLES}
    env.update(extra or {})
    return env


def run_command(
    argv: Sequence[str],
    *,
    stdin: bytes = b"",
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 120.0,
) -> str:
    result = subprocess.run(
        list(argv),
        input=stdin,
        capture_output=True,
        env=dict(env) if env is not None else clean_env(),
        cwd=cwd,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        output = (result.stdout + result.stderr).decode(errors="replace")
        raise LabCommandFailed(argv, result.returncode, output)
    return result.stdout.decode(errors="replace")


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with path.open("rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - 64 * 1024))
            text = log.read().decode(errors="replace")
    except OSError as exc:
        return f"(log unreadable: {exc})"
    return "\n".join(text.splitlines()[-lines:])


class Proc(NamedTuple):
    pid: int
    ppid: int
    started: int  # clock ticks after boot: tells a recycled PID from the process we saw
    cmdline: str


def read_proc(pid: int) -> Proc | None:
    """None for a process that is gone or a zombie (exited; only its parent's wait is due)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in {"Z", "X"}:
        return None
    text = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
    return Proc(pid, int(fields[1]), int(fields[19]), text)


def processes() -> list[Proc]:
    found = (read_proc(int(entry.name)) for entry in os.scandir("/proc") if entry.name.isdigit())
    return [proc for proc in found if proc is not None]


def descendants(pids: Iterable[int]) -> list[Proc]:
    children: dict[int, list[Proc]] = {}
    for proc in processes():
        children.setdefault(proc.ppid, []).append(proc)
    found: list[Proc] = []
    todo = list(pids)
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return found


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid`` and its live descendants, each with the children it has reaped:
    what a lab server (sshd with its sessions and their commands, dockerd with containerd) has
    cost the machine so far, for the benchmarks."""
    total = 0
    for process_id in [pid, *(proc.pid for proc in descendants([pid]))]:
        try:
            fields = Path(f"/proc/{process_id}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    return total / _CLOCK_TICKS


def _alive(proc: Proc) -> bool:
    current = read_proc(proc.pid)
    return current is not None and current.started == proc.started


def _signal(procs: Iterable[Proc], signum: signal.Signals) -> None:
    for proc in procs:
        if _alive(proc):
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signum)


def _wait_gone(procs: Sequence[Proc], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while any(_alive(proc) for proc in procs):
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_INTERVAL)
    return True


def end_processes(procs: Sequence[Proc], grace: float) -> None:
    """Processes that are not our children (we cannot wait for them): SIGTERM, then SIGKILL."""
    _signal(procs, signal.SIGCONT)
    _signal(procs, signal.SIGTERM)
    if not _wait_gone(procs, grace):
        _signal(procs, signal.SIGKILL)
        _wait_gone(procs, 5.0)


def terminate_server(
    server: Proc,
    stop_signal: signal.Signals,
    timeout: float,
    before_terminate: Callable[[], None] = lambda: None,
) -> None:
    """End a lab server and everything it started, whether or not it is our child: resume it
    (a paused server cannot exit), ``before_terminate`` while it still answers, its
    ``stop_signal``, up to ``timeout`` seconds for it to exit, then SIGKILL to its process group,
    and at last its descendants. Nothing is signalled once ``server`` is no longer the process
    that was seen (its PID reused): the start time is compared before every signal."""
    _signal([server, *descendants([server.pid])], signal.SIGCONT)
    before_terminate()
    family = descendants([server.pid])
    _signal([server], stop_signal)
    if not _wait_gone([server], timeout) and _alive(server):
        # Last resort. The server leads a session and group of its own, so this reaches
        # nothing outside the lab.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
        _wait_gone([server], 5.0)
    end_processes(family, grace=2.0)


class StartStop:
    """``with`` starts what ``start()`` starts and stops it on every way out, errors included."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


class LabServer(StartStop):
    """One server process and its life: start, pause, resume, kill, restart, stop.

    `stop()` leaves nothing behind: it ends the server's descendants too (sshd's per-connection
    processes, dockerd's containerd), and whatever a `kill()` orphaned. `kill()` is a crash: the
    children and files a real crash leaves stay until `restart()` copes with them or `stop()` ends
    them.
    """

    name = "server"
    start_timeout = 10.0
    stop_timeout = 10.0
    stop_signal = signal.SIGTERM
    """What ``stop()`` sends first; PostgreSQL's SIGTERM waits for every client to leave."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir.absolute()
        self.log_path = self.workdir / f"{self.name}.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._orphans: list[Proc] = []
        self._paused = False

    @property
    def pid(self) -> int | None:
        if self._process is None or self._process.poll() is not None:
            return None
        return self._process.pid

    @property
    def running(self) -> bool:
        return self.pid is not None

    @property
    def paused(self) -> bool:
        return self._paused and self.running

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _ready(self) -> bool:
        """One bounded probe: does the server answer as it should once started?"""
        raise NotImplementedError

    def _prepare(self) -> None:
        """Write what the server reads at start; runs before every start, so restarts get it too."""

    def _before_terminate(self) -> None:
        """Runs while the server still answers, just before SIGTERM."""

    def _clean_up(self) -> None:
        """Runs after the server has exited, at every stop."""

    def start(self) -> None:
        if self.running:
            raise RuntimeError(f"{self.name} is already running as pid {self.pid}")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._prepare()
        argv = self._command()
        with self.log_path.open("ab") as log:
            log.write(f"--- {time.strftime('%H:%M:%S')} lab: {shlex.join(argv)}\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=clean_env(),
                start_new_session=True,
            )
        self._paused = False
        deadline = time.monotonic() + self.start_timeout
        while not self._ready():
            status = self._process.poll()
            if status is not None:
                self.stop()
                raise ServerStartFailed(self.name, f"exited with status {status}", self.log_path)
            if time.monotonic() >= deadline:
                self.stop()
                reason = f"no answer within {self.start_timeout:g} s"
                raise ServerStartFailed(self.name, reason, self.log_path)
            time.sleep(_POLL_INTERVAL)

    def stop(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            self._terminate(process)
        self._process = None
        self._paused = False
        end_processes(self._orphans, grace=2.0)
        self._orphans = []
        self._clean_up()

    def _terminate(self, process: subprocess.Popen[bytes]) -> None:
        server = read_proc(process.pid)
        if server is not None:
            terminate_server(server, self.stop_signal, self.stop_timeout, self._before_terminate)
        process.wait()

    def stop_recorded(self, recorded: Proc | None) -> None:
        """Stop the server that an earlier process started here and left running (``lab up``),
        known by the identity it recorded, then clean up as ``stop()`` does. ``None``, or a
        process that is no longer the one recorded, is not signalled: only what it left behind
        in this server's directories is cleaned up."""
        if recorded is not None and _alive(recorded):
            terminate_server(recorded, self.stop_signal, self.stop_timeout, self._before_terminate)
        self._clean_up()

    def pause(self) -> None:
        """SIGSTOP the server and its descendants: it still holds its port but answers nothing,
        as a hung host does."""
        process = self._require_running()
        process.send_signal(signal.SIGSTOP)
        _signal(descendants([process.pid]), signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        process = self._require_running()
        _signal(descendants([process.pid]), signal.SIGCONT)
        process.send_signal(signal.SIGCONT)
        self._paused = False

    def kill(self) -> None:
        process = self._process
        if process is None:
            return
        self._orphans.extend(descendants([process.pid]))
        process.kill()
        process.wait()
        self._process = None
        self._paused = False

    def restart(self) -> None:
        """Start again with the same port, keys and data directories; stops first if running."""
        if self.running:
            self.stop()
        self.start()

    def ensure_running(self) -> None:
        """Undo what a test did to the server (pause, kill, stop) so the next test finds it live."""
        if self.paused:
            self.resume()
        if not self.running:
            self.start()

    def _require_running(self) -> subprocess.Popen[bytes]:
        process = self._process
        if process is None or process.poll() is not None:
            raise RuntimeError(f"{self.name} is not running")
        return process
