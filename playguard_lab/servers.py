"""The lab's servers: redis-server, an OpenSSH sshd and a dockerd per Marquee host, and a
docker-registry behind htpasswd auth. Each is a ``LabServer``: started, probed, paused, killed and
stopped by its PID, on a port or socket of its own so that several labs run side by side.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import pwd
import re
import secrets
import socket
from pathlib import Path

from playguard_lab.process import (
    LabServer,
    clean_env,
    descendants,
    end_processes,
    find_binary,
    free_port,
    processes,
    read_proc,
    run_command,
)

UNIX_SOCKET_PATH_MAX = 104
"""containerd refuses a socket path past 104 bytes (its debug socket first); Linux takes 107."""


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

    def __init__(
        self, workdir: Path, user: str | None = None, *, max_startups: int | None = None
    ) -> None:
        """``max_startups``: connections sshd lets be in their handshake at once before it
        drops new ones (sshd's default starts dropping at 10); a host shared by many Marquees
        (``lab.shared_host``) takes as many handshakes as their hosts would."""
        super().__init__(workdir)
        self.max_startups = max_startups
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
                run_command([keygen, "-q", "-t", "ed25519", "-N", "",
                             "-C", f"playguard-lab-{comment}", "-f", str(key)])  # fmt: skip
        self.authorized_keys.write_text(self.client_key.with_suffix(".pub").read_text())
        key_type, key_data = self.host_key.with_suffix(".pub").read_text().split()[:2]
        self.known_hosts.write_text(f"[{self.host}]:{self.port} {key_type} {key_data}\n")
        listing = run_command(
            [keygen, "-l", "-E", "sha256", "-f", str(self.host_key.with_suffix(".pub"))]
        )
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
            "SetEnv SHLVL=1\n" + (f"MaxStartups {self.max_startups}\n" if self.max_startups else "")
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
            if read_proc(int(containerd_pidfile.read_text())) is None:
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
        strays = [proc for proc in processes() if marker in proc.cmdline]
        strays += descendants(proc.pid for proc in strays)
        end_processes(strays, grace=0.0)
        for mount_point in mount_points_under(self.data_root, self.exec_root):
            run_command([self._umount, "--lazy", mount_point])

    def cli(self, *args: str, stdin: bytes = b"") -> str:
        """Run the docker CLI against this daemon, with a CLI config (and logins) of its own."""
        env = clean_env({"DOCKER_HOST": self.url, "DOCKER_CONFIG": str(self.cli_config)})
        return run_command([self._cli, *args], stdin=stdin, env=env)


def mount_points_under(*roots: Path) -> list[str]:
    """Deepest first, once per stacked mount, so unmounting them in order empties the roots."""
    prefixes = [str(root) for root in roots]
    found: list[str] = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mount_point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
        if any(mount_point == root or mount_point.startswith(root + "/") for root in prefixes):
            found.append(mount_point)
    return sorted(found, key=lambda path: path.count("/"), reverse=True)


class RegistryServer(LabServer):
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
        entry = run_command(
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
