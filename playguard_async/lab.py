"""Real servers on loopback for the tests and the demo: redis-server, sshd, dockerd, registry, git.

Fakes agree with whatever their author believed; the lab runs the real programs so the daemon is
tested against what it will meet. Each server is a child process in a session of its own, on a port
or socket chosen so that several labs run side by side, logging to a file in its own directory, and
stopped by its PID: nothing is daemonised, so nothing outlives `stop()`. Traffic stays on 127.0.0.1
and unix sockets; proxy settings are removed from every child's environment so that it cannot leave.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import os
import pwd
import re
import secrets
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import NamedTuple, Self

LOG_TAIL_LINES = 40
UNIX_SOCKET_PATH_MAX = 107
BUSYBOX_REPOSITORY = "playguard/busybox:1"
_SBIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")
_PROXY_VARIABLES = frozenset({"http_proxy", "https_proxy", "ftp_proxy", "all_proxy", "no_proxy"})
_POLL_INTERVAL = 0.05


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


def _clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment without proxy settings: dockerd, docker and git would otherwise send lab
    traffic meant for 127.0.0.1 to a proxy elsewhere."""
    env = {key: value for key, value in os.environ.items() if key.lower() not in _PROXY_VARIABLES}
    env.update(extra or {})
    return env


def _run(
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
        env=dict(env) if env is not None else _clean_env(),
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


class _Proc(NamedTuple):
    pid: int
    ppid: int
    started: int  # clock ticks after boot: tells a recycled PID from the process we saw
    cmdline: str


def _read_proc(pid: int) -> _Proc | None:
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
    return _Proc(pid, int(fields[1]), int(fields[19]), text)


def _processes() -> list[_Proc]:
    found = (_read_proc(int(entry.name)) for entry in os.scandir("/proc") if entry.name.isdigit())
    return [proc for proc in found if proc is not None]


def _descendants(pids: Iterable[int]) -> list[_Proc]:
    children: dict[int, list[_Proc]] = {}
    for proc in _processes():
        children.setdefault(proc.ppid, []).append(proc)
    found: list[_Proc] = []
    todo = list(pids)
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return found


def _alive(proc: _Proc) -> bool:
    current = _read_proc(proc.pid)
    return current is not None and current.started == proc.started


def _signal(procs: Iterable[_Proc], signum: signal.Signals) -> None:
    for proc in procs:
        if _alive(proc):
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signum)


def _wait_gone(procs: Sequence[_Proc], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while any(_alive(proc) for proc in procs):
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_INTERVAL)
    return True


def _end(procs: Sequence[_Proc], grace: float) -> None:
    """Processes that are not our children (we cannot wait for them): SIGTERM, then SIGKILL."""
    _signal(procs, signal.SIGCONT)
    _signal(procs, signal.SIGTERM)
    if not _wait_gone(procs, grace):
        _signal(procs, signal.SIGKILL)
        _wait_gone(procs, 5.0)


def _probe_tcp(port: int, payload: bytes, expect: bytes) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(payload)
            return sock.recv(len(expect)).startswith(expect)
    except OSError:
        return False


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = str(path)

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _http(connection: http.client.HTTPConnection, method: str, path: str) -> tuple[int, bytes]:
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


class _StartStop:
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


class LabServer(_StartStop):
    """One server process and its life: start, pause, resume, kill, restart, stop.

    `stop()` leaves nothing behind: it ends the server's descendants too (sshd's per-connection
    processes, dockerd's containerd), and whatever a `kill()` orphaned. `kill()` is a crash: the
    children and files a real crash leaves stay until `restart()` copes with them or `stop()` ends
    them.
    """

    name = "server"
    start_timeout = 10.0
    stop_timeout = 10.0

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir.absolute()
        self.log_path = self.workdir / f"{self.name}.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._orphans: list[_Proc] = []
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
                env=_clean_env(),
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
        _end(self._orphans, grace=2.0)
        self._orphans = []
        self._clean_up()

    def _terminate(self, process: subprocess.Popen[bytes]) -> None:
        process.send_signal(signal.SIGCONT)
        _signal(_descendants([process.pid]), signal.SIGCONT)
        self._before_terminate()
        family = _descendants([process.pid])
        process.terminate()
        try:
            process.wait(self.stop_timeout)
        except subprocess.TimeoutExpired:
            # Last resort. The server leads a session and group of its own, so this reaches
            # nothing outside the lab.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        _end(family, grace=2.0)

    def pause(self) -> None:
        """SIGSTOP the server and its descendants: it still holds its port but answers nothing,
        as a hung host does."""
        process = self._require_running()
        process.send_signal(signal.SIGSTOP)
        _signal(_descendants([process.pid]), signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        process = self._require_running()
        _signal(_descendants([process.pid]), signal.SIGCONT)
        process.send_signal(signal.SIGCONT)
        self._paused = False

    def kill(self) -> None:
        process = self._process
        if process is None:
            return
        self._orphans.extend(_descendants([process.pid]))
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


class RedisServer(LabServer):
    """redis-server without persistence: a restart after kill() comes back empty, as a fresh Redis
    node would, so tests see lock keys vanish the way a failover loses them."""

    name = "redis"

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        super().__init__(workdir)
        self._binary = find_binary("redis-server", "redis-server")
        self.port = port if port is not None else free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def _command(self) -> list[str]:
        return [
            self._binary,
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.workdir),
            "--daemonize", "no",
            "--logfile", "",
        ]  # fmt: skip

    def _ready(self) -> bool:
        return _probe_tcp(self.port, b"PING\r\n", b"+PONG")


class SshServer(LabServer):
    """One OpenSSH sshd standing for one marquee, with throwaway host and client keys.

    The keys are made once, here, so `restart()` brings back the same host key and the daemon's
    known_hosts stays valid, as after a real sshd restart.
    """

    name = "sshd"
    host = "127.0.0.1"

    def __init__(self, workdir: Path, user: str | None = None) -> None:
        super().__init__(workdir)
        self._binary = find_binary("sshd", "openssh-server")
        keygen = find_binary("ssh-keygen", "openssh-client")
        self.user = user if user is not None else pwd.getpwuid(os.getuid()).pw_name
        self.port = free_port()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.host_key = self.workdir / "host_ed25519"
        self.client_key = self.workdir / "client_ed25519"
        self.authorized_keys = self.workdir / "authorized_keys"
        self.known_hosts = self.workdir / "known_hosts"
        self.config = self.workdir / "sshd_config"
        for key, comment in ((self.host_key, "host"), (self.client_key, "client")):
            if not key.exists():
                _run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", f"playguard-lab-{comment}",
                      "-f", str(key)])  # fmt: skip
        self.authorized_keys.write_text(self.client_key.with_suffix(".pub").read_text())
        key_type, key_data = self.host_key.with_suffix(".pub").read_text().split()[:2]
        self.known_hosts.write_text(f"[{self.host}]:{self.port} {key_type} {key_data}\n")
        listing = _run([keygen, "-l", "-E", "sha256", "-f", str(self.host_key.with_suffix(".pub"))])
        self.host_key_fingerprint = listing.split()[1]

    def _prepare(self) -> None:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        # SHLVL=1 makes bash count itself as a nested shell, so it skips the ~/.bashrc it would
        # otherwise source for every command run over SSH: root's here starts pyenv (~0.1 s).
        self.config.write_text(
            f"Port {self.port}\n"
            f"ListenAddress {self.host}\n"
            f"HostKey {self.host_key}\n"
            f"AuthorizedKeysFile {self.authorized_keys}\n"
            f"PidFile {self.workdir / 'sshd.pid'}\n"
            "StrictModes no\n"
            "UsePAM no\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "PermitRootLogin prohibit-password\n"
            "AllowStreamLocalForwarding yes\n"
            "SetEnv SHLVL=1\n"
        )

    def _command(self) -> list[str]:
        return [self._binary, "-D", "-e", "-f", str(self.config)]

    def _ready(self) -> bool:
        return _probe_tcp(self.port, b"", b"SSH-2.0-")


class DockerDaemon(LabServer):
    """One dockerd (with the containerd it starts) standing for one marquee's Docker Engine.

    Everything it owns sits under its workdir; `index` gives it an address pool of its own so that
    several run side by side. It makes no bridge and touches no iptables. As on a real host,
    `restart()` after `kill()` finds the old containers still running and stops them with their
    10 s grace before it answers, so that restart takes ~10 s when containers were up.
    """

    name = "dockerd"
    start_timeout = 60.0
    stop_timeout = 30.0

    def __init__(self, workdir: Path, index: int) -> None:
        super().__init__(workdir)
        if not 0 <= index <= 54:
            raise ValueError(
                f"DockerDaemon index must be in 0..54 (pools 10.201-10.255), not {index}"
            )
        self._binary = find_binary("dockerd", "docker.io")
        self._cli = find_binary("docker", "docker.io")
        self._umount = find_binary("umount", "mount")
        self.index = index
        self.address_pool = f"10.{201 + index}.0.0/16"
        self.data_root = self.workdir / "data"
        self.exec_root = self.workdir / "x"
        self.socket = self.workdir / "docker.sock"
        self.url = f"unix://{self.socket}"
        self.cli_config = self.workdir / "cli"
        longest = self.exec_root / "containerd" / "containerd.sock.ttrpc"
        if len(str(longest)) > UNIX_SOCKET_PATH_MAX:
            raise ValueError(
                f"{self.workdir} is too long for dockerd's unix sockets ({len(str(longest))} > "
                f"{UNIX_SOCKET_PATH_MAX} bytes for {longest}): use a shorter workdir"
            )

    def _prepare(self) -> None:
        # An empty config file keeps /etc/docker/daemon.json out. After a kill(), dockerd's pidfile
        # may name a PID that now belongs to someone else (dockerd would refuse to start), and
        # containerd's may name the zombie of the containerd that died with it: dockerd takes a
        # zombie for a live containerd and waits ~15 s for it, then fails.
        (self.workdir / "daemon.json").write_text("{}\n")
        (self.workdir / "docker.pid").unlink(missing_ok=True)
        containerd_pidfile = self.exec_root / "containerd" / "containerd.pid"
        with contextlib.suppress(FileNotFoundError, ValueError):
            if _read_proc(int(containerd_pidfile.read_text())) is None:
                containerd_pidfile.unlink()

    def _command(self) -> list[str]:
        return [
            self._binary,
            "--config-file", str(self.workdir / "daemon.json"),
            "--data-root", str(self.data_root),
            "--exec-root", str(self.exec_root),
            "-H", self.url,
            "--pidfile", str(self.workdir / "docker.pid"),
            "--bridge=none",
            "--iptables=false",
            "--ip-masq=false",
            "--default-address-pool", f"base={self.address_pool},size=24",
        ]  # fmt: skip

    def _api(self, method: str, path: str, timeout: float = 10.0) -> tuple[int, bytes]:
        connection = _UnixHTTPConnection(self.socket, timeout)
        return _http(connection, method, path)

    def _ready(self) -> bool:
        try:
            return self._api("GET", "/_ping", timeout=1.0) == (200, b"OK")
        except (OSError, http.client.HTTPException):
            return False

    def _before_terminate(self) -> None:
        """On SIGTERM dockerd gives each container 10 s to stop, and a `sleep` running as PID 1
        ignores SIGTERM; killing them first makes stop() take a second, not ten."""
        try:
            status, body = self._api("GET", "/containers/json")
            if status != 200:
                return
            for container in json.loads(body):
                self._api("POST", f"/containers/{container['Id']}/kill")
        except (OSError, http.client.HTTPException, ValueError):
            # A daemon that cannot answer cannot stop its containers either: SIGTERM, SIGKILL and
            # the sweep in _clean_up deal with them.
            return

    def _clean_up(self) -> None:
        """After a crash, containerd's shims and their containers live on (they are not dockerd's
        descendants), and dockerd leaves its data root bind-mounted even after a clean exit."""
        marker = f"{self.exec_root}/containerd/"
        strays = [proc for proc in _processes() if marker in proc.cmdline]
        strays += _descendants(proc.pid for proc in strays)
        _end(strays, grace=0.0)
        for mount_point in _mount_points_under(self.data_root, self.exec_root):
            _run([self._umount, "--lazy", mount_point])

    def cli(self, *args: str, stdin: bytes = b"") -> str:
        """Run the docker CLI against this daemon, with a CLI config (and logins) of its own."""
        env = _clean_env({"DOCKER_HOST": self.url, "DOCKER_CONFIG": str(self.cli_config)})
        return _run([self._cli, *args], stdin=stdin, env=env)


def _mount_points_under(*roots: Path) -> list[str]:
    """Deepest first, once per stacked mount, so unmounting them in order empties the roots."""
    prefixes = [str(root) for root in roots]
    found: list[str] = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mount_point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
        if any(mount_point == root or mount_point.startswith(root + "/") for root in prefixes):
            found.append(mount_point)
    return sorted(found, key=lambda path: path.count("/"), reverse=True)


class Registry(LabServer):
    """Debian's docker-registry (distribution 2.8) behind htpasswd auth, so that pulls need the
    credentials the daemon is given, as with a real private registry."""

    name = "registry"

    def __init__(self, workdir: Path, username: str = "playguard") -> None:
        super().__init__(workdir)
        self._binary = find_binary("docker-registry", "docker-registry")
        self._htpasswd = find_binary("htpasswd", "apache2-utils")
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.username = username
        self.password = secrets.token_urlsafe(18)
        self.config = self.workdir / "registry.yml"

    def _prepare(self) -> None:
        # -i reads the password from stdin, so it never shows in the process list.
        entry = _run(
            [self._htpasswd, "-B", "-i", "-n", self.username], stdin=self.password.encode()
        )
        htpasswd = self.workdir / "htpasswd"
        htpasswd.write_text(entry.strip() + "\n")
        config = {
            "version": 0.1,
            "log": {"level": "info"},
            "storage": {
                "filesystem": {"rootdirectory": str(self.workdir / "storage")},
                "delete": {"enabled": True},
            },
            "http": {"addr": self.address},
            "auth": {"htpasswd": {"realm": "playguard-lab", "path": str(htpasswd)}},
        }
        # JSON is YAML, and json.dumps quotes paths correctly.
        self.config.write_text(json.dumps(config, indent=2) + "\n")

    def _command(self) -> list[str]:
        return [self._binary, "serve", str(self.config)]

    def _ready(self) -> bool:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1.0)
            status, _ = _http(connection, "GET", "/v2/")
        except (OSError, http.client.HTTPException):
            return False
        return status == 401


def _is_static_executable(path: Path) -> bool:
    """The image has no dynamic loader, so a dynamically linked busybox would not even start."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF":
        return False
    order = "<" if data[5] == 1 else ">"
    if data[4] == 2:  # ELFCLASS64
        (phoff,) = struct.unpack_from(f"{order}Q", data, 0x20)
        phentsize, phnum = struct.unpack_from(f"{order}HH", data, 0x36)
    else:
        (phoff,) = struct.unpack_from(f"{order}I", data, 0x1C)
        phentsize, phnum = struct.unpack_from(f"{order}HH", data, 0x2A)
    pt_interp = 3
    return all(
        struct.unpack_from(f"{order}I", data, phoff + i * phentsize)[0] != pt_interp
        for i in range(phnum)
    )


def _busybox_rootfs_tar(busybox: Path) -> bytes:
    applets = _run([str(busybox), "--list"]).split()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:

        def add(name: str, kind: bytes, mode: int, data: bytes = b"", link: str = "") -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.size, info.linkname = kind, mode, len(data), link
            tar.addfile(info, io.BytesIO(data) if data else None)

        for directory, mode in (("bin", 0o755), ("etc", 0o755), ("root", 0o700), ("tmp", 0o1777)):
            add(directory, tarfile.DIRTYPE, mode)
        add("bin/busybox", tarfile.REGTYPE, 0o755, busybox.read_bytes())
        for applet in applets:
            if applet != "busybox":
                add(f"bin/{applet}", tarfile.SYMTYPE, 0o777, link="busybox")
        add("etc/passwd", tarfile.REGTYPE, 0o644, b"root:x:0:0:root:/root:/bin/sh\n")
        add("etc/group", tarfile.REGTYPE, 0o644, b"root:x:0:\n")
    return buffer.getvalue()


def build_busybox_image(docker: DockerDaemon, tag: str) -> None:
    """A runnable image made on this machine from busybox-static: the lab pulls nothing from
    outside."""
    busybox = Path(find_binary("busybox", "busybox-static"))
    if not _is_static_executable(busybox):
        raise MissingBinary(str(busybox), "busybox-static", "is dynamically linked")
    docker.cli("import", "--change", 'CMD ["sh"]', "-", tag, stdin=_busybox_rootfs_tar(busybox))


def push_image(
    docker: DockerDaemon, registry: Registry, source_tag: str, repository: str = BUSYBOX_REPOSITORY
) -> str:
    """Push through the daemon with a real login, so the registry holds the image exactly as the
    marquees will pull it; returns the remote reference."""
    remote = f"{registry.address}/{repository}"
    docker.cli(
        "login", "--username", registry.username, "--password-stdin", registry.address,
        stdin=registry.password.encode(),
    )  # fmt: skip
    docker.cli("tag", source_tag, remote)
    docker.cli("push", remote)
    return remote


def compose_file(image: str) -> str:
    return (
        "services:\n"
        "  app:\n"
        f"    image: {json.dumps(image)}\n"
        '    command: ["sleep", "86400"]\n'
        '    network_mode: "none"\n'
    )


class GitOrigin:
    """A bare origin repository, the daemon's source of compose projects, with `main` and `feature`.

    Git runs without the user's or the system's configuration, so a developer's settings (signing,
    hooks, default branch) cannot change what the tests see.
    """

    def __init__(self, workdir: Path, image: str) -> None:
        self.workdir = workdir.absolute()
        self._git = find_binary("git", "git")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.path = self.workdir / "origin.git"
        self.url = self.path.as_uri()
        self._env = _clean_env(
            {
                "GIT_CONFIG_GLOBAL": os.devnull,
                "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_TERMINAL_PROMPT": "0",
                "GIT_AUTHOR_NAME": "Playguard Lab",
                "GIT_AUTHOR_EMAIL": "lab@playguard.invalid",
                "GIT_COMMITTER_NAME": "Playguard Lab",
                "GIT_COMMITTER_EMAIL": "lab@playguard.invalid",
            }
        )
        self.git("init", "--quiet", "--bare", "--initial-branch=main", str(self.path))
        self.commit("main", {"compose.yaml": compose_file(image)}, "Add the app service")
        self.commit("feature", {"FEATURE": "work in progress\n"}, "Start the feature branch")

    def git(self, *args: str, cwd: Path | None = None) -> str:
        return _run([self._git, *args], env=self._env, cwd=cwd)

    def branches(self) -> list[str]:
        listing = self.git("ls-remote", "--heads", self.url)
        return sorted(line.split("refs/heads/", 1)[1] for line in listing.splitlines())

    def commit(self, branch: str, files: dict[str, str], message: str) -> str:
        """Commit through a scratch clone and a push, the way a developer's change arrives. Always
        makes a new commit, even when the files are unchanged; a new branch starts from main."""
        existing = self.branches()
        with tempfile.TemporaryDirectory(prefix="clone-", dir=self.workdir) as scratch:
            clone = Path(scratch)
            self.git("clone", "--quiet", self.url, str(clone))
            if branch in existing:
                self.git("checkout", "--quiet", branch, cwd=clone)
            elif "main" in existing:
                self.git("checkout", "--quiet", "-b", branch, "origin/main", cwd=clone)
            else:
                self.git("symbolic-ref", "HEAD", f"refs/heads/{branch}", cwd=clone)
            for name, content in files.items():
                target = clone / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content)
            self.git("add", "--all", cwd=clone)
            self.git("commit", "--quiet", "--allow-empty", "--message", message, cwd=clone)
            self.git("push", "--quiet", "origin", f"HEAD:refs/heads/{branch}", cwd=clone)
            return self.git("rev-parse", "HEAD", cwd=clone).strip()

    def delete_branch(self, branch: str) -> None:
        self.git("--git-dir", str(self.path), "branch", "--quiet", "-D", branch)


@dataclass(frozen=True)
class Marquee:
    """One simulated Docker host: reached over SSH, its engine behind a unix socket."""

    name: str
    ssh: SshServer
    docker: DockerDaemon


class Lab(_StartStop):
    """Everything the daemon needs around it: Redis, N marquees, a registry holding the busybox
    image, and a git origin whose compose project uses that image."""

    local_image_tag = "playguard-lab/busybox:local"

    def __init__(self, workdir: Path, marquees: int = 1) -> None:
        self.workdir = workdir.absolute()
        self.redis = RedisServer(self.workdir / "redis")
        self.registry = Registry(self.workdir / "registry")
        self.marquees = [
            Marquee(
                name=f"marquee-{i}",
                ssh=SshServer(self.workdir / f"m{i}" / "ssh"),
                docker=DockerDaemon(self.workdir / f"m{i}" / "docker", index=i),
            )
            for i in range(marquees)
        ]
        self.image = f"{self.registry.address}/{BUSYBOX_REPOSITORY}"
        self._git: GitOrigin | None = None

    @property
    def git(self) -> GitOrigin:
        if self._git is None:
            raise RuntimeError("the git origin exists once Lab.start() has run")
        return self._git

    def servers(self) -> list[LabServer]:
        servers: list[LabServer] = [self.redis, self.registry]
        for marquee in self.marquees:
            servers += [marquee.ssh, marquee.docker]
        return servers

    def start(self) -> None:
        try:
            for server in self.servers():
                server.start()
            if self.marquees:
                builder = self.marquees[0].docker
                build_busybox_image(builder, self.local_image_tag)
                push_image(builder, self.registry, self.local_image_tag)
            self._git = GitOrigin(self.workdir / "git", self.image)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stops every server, even those that never started or failed to; reports all failures."""
        errors: list[Exception] = []
        for server in reversed(self.servers()):
            try:
                server.stop()
            except Exception as exc:  # one failure must not leave the rest running
                errors.append(exc)
        if errors:
            raise ExceptionGroup("the lab did not stop cleanly", errors)


def write_demo_config(lab: Lab, directory: Path, *, tick_interval: float = 10.0) -> Path:
    """Settings and an inventory that point the daemon at ``lab``; returns the settings file.

    Each marquee gets one playground of the origin's compose project and one agent chat, so a
    first cycle has real work to do and later ones show the cheap "nothing to do" path. The HTTP
    endpoints listen on a free loopback port, named in the file and in the ``http.serving`` line.
    """
    directory.mkdir(parents=True, exist_ok=True)
    password_file = directory / "registry-password"
    password_file.write_text(lab.registry.password)
    password_file.chmod(0o600)
    inventory: dict[str, object] = {
        "marquees": [
            {
                "name": marquee.name,
                "host": marquee.ssh.host,
                "port": marquee.ssh.port,
                "user": marquee.ssh.user,
                "identity_file": str(marquee.ssh.client_key),
                "known_hosts": str(marquee.ssh.known_hosts),
                "docker_socket": str(marquee.docker.socket),
                "workdir": str(directory / f"{marquee.name}-workdir"),
            }
            for marquee in lab.marquees
        ],
        "registries": [
            {
                "name": "lab",
                "server": lab.registry.address,
                "username": lab.registry.username,
                "password_file": str(password_file),
            }
        ],
        "playspecs": [
            {"name": "web", "repo": lab.git.url, "images": [lab.image], "registry": "lab"}
        ],
        "playgrounds": [
            {
                "name": f"web-{marquee.name}",
                "playspec": "web",
                "marquee": marquee.name,
                "branch": "main",
            }
            for marquee in lab.marquees
        ],
        "agent_chats": [
            {
                "name": f"chat-{marquee.name}",
                "playground": f"web-{marquee.name}",
                "image": lab.image,
                "command": ["sleep", "86400"],
            }
            for marquee in lab.marquees
        ],
    }
    inventory_path = directory / "inventory.yaml"
    inventory_path.write_text(json.dumps(inventory, indent=2))  # JSON is YAML
    settings_path = directory / "playguard.toml"
    settings_path.write_text(
        f'redis_url = "{lab.redis.url}"\n'
        f'inventory = "{inventory_path}"\n'
        f"tick_interval = {tick_interval}\n"
        "lock_ttl = 120\n"
        "remote_command_timeout = 60\n"
        "docker_api_timeout = 60\n"
        "shutdown_grace = 10\n"
        'compose_command = ["docker-compose"]\n'
        "orphan_grace = 0\n"
        f'http_address = "127.0.0.1:{free_port()}"\n'
    )
    return settings_path
