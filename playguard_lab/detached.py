"""``playguard lab up`` and ``lab down``: the lab's servers left running between commands, so a
newcomer can try every command by hand against them.

``lab up`` starts the lab (as ``playguard lab run`` does, without the daemon), writes the daemon's
settings and a state file naming each server's PID and start time, and returns; the servers run on
in sessions of their own. ``lab down`` reads the state file and stops what it names, in the reverse
order, then removes the lab's runtime state. The state file is outside input by the time ``down``
reads it: the directories it removes come from the lab's fixed layout, never from the file, and a
PID is signalled only while it is still the process ``up`` started: same boot, same start time
(so never a recycled PID), and its working directory or command line inside the lab's directory
(so never a process elsewhere that a forged file names).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, TypeGuard

from playguard_async.kits.files import FileRefused, read_text_limited
from playguard_lab.demo import (
    WebLogin,
    add_web_user,
    move_desired_state_to_postgres,
    write_demo_config,
)
from playguard_lab.fleet import Lab
from playguard_lab.postgres import PostgresServer, remove_relocated_cluster
from playguard_lab.process import LabServer, Proc, read_proc, terminate_server
from playguard_lab.servers import (
    DockerDaemon,
    RedisServer,
    RegistryServer,
    SshServer,
    mount_points_under,
)

STATE_FILE = "lab-state.json"
STATE_VERSION = 1
STATE_MAX_BYTES = 64 * 1024
MAX_SERVERS = 256
LAYOUT = ("servers", "config", STATE_FILE)
"""Everything ``up`` makes in the lab's directory, and all that ``down`` removes."""
SERVER_KINDS: Mapping[str, type[LabServer]] = {
    server.name: server
    for server in (RedisServer, RegistryServer, SshServer, DockerDaemon, PostgresServer)
}
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


class LabStateError(RuntimeError):
    """A lab directory or state file that ``up`` or ``down`` cannot use; one line naming it."""


@dataclass(frozen=True)
class RecordedServer:
    """One server as ``up`` recorded it: its kind, directory (relative to the lab's), identity,
    and where it answers (for a person: ``down`` needs no address)."""

    name: str
    workdir: str
    pid: int
    started: int
    address: str | None = None

    @property
    def label(self) -> str:
        """How output names it: two Marquees' sshd differ by their directory only."""
        return f"{self.name} {self.pid} ({self.workdir.removeprefix('servers/')})"


@dataclass(frozen=True)
class LabState:
    boot_id: str
    servers: list[RecordedServer]

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "boot_id": self.boot_id,
            "servers": [dataclasses.asdict(server) for server in self.servers],
        }


@dataclass(frozen=True)
class LabUp:
    """What ``up`` started: the settings file the daemon needs, and the lab itself."""

    settings: Path
    lab: Lab
    state: LabState
    web: WebLogin
    """Its web view's address and user."""


@dataclass(frozen=True)
class LabDown:
    """What ``down`` did: the servers it stopped, those it left alone (no longer the recorded
    process: exited, or the PID reused), and whether there was a lab at all."""

    found: bool
    stopped: list[RecordedServer]
    gone: list[RecordedServer]


def default_directory() -> Path:
    """``$XDG_STATE_HOME/playguard-lab``, else ``~/.local/state/playguard-lab``: private to the
    user, unlike a fixed name in /tmp that anyone could make first."""
    state_home = os.environ.get("XDG_STATE_HOME", "")
    base = Path(state_home) if os.path.isabs(state_home) else Path.home() / ".local" / "state"
    return base / "playguard-lab"


def boot_id() -> str:
    """This boot's id: a start time recorded in another boot says nothing about today's PIDs."""
    return _BOOT_ID.read_text().strip()


def parse_state(text: str, source: Path) -> LabState:
    """The state file's content, checked field by field; ``LabStateError`` naming ``source``,
    the field and the value otherwise."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise LabStateError(f"{source}: not JSON ({exc})") from None
    except RecursionError:
        raise LabStateError(f"{source}: not JSON (nested too deeply)") from None
    if not isinstance(document, dict):
        raise LabStateError(f"{source}: not a JSON object but {_shown(document)}")
    if document.get("version") != STATE_VERSION:
        raise LabStateError(
            f"{source}: version {_shown(document.get('version'))}, expected {STATE_VERSION}"
        )
    recorded_boot = document.get("boot_id")
    if not isinstance(recorded_boot, str) or not 0 < len(recorded_boot) <= 64:
        raise LabStateError(f"{source}: boot_id {_shown(recorded_boot)} is not a boot id")
    entries = document.get("servers")
    if not isinstance(entries, list) or len(entries) > MAX_SERVERS:
        raise LabStateError(
            f"{source}: servers {_shown(entries)} is not a list of at most {MAX_SERVERS}"
        )
    servers = [_server(entry, f"{source}: servers[{i}]") for i, entry in enumerate(entries)]
    return LabState(recorded_boot, servers)


def _server(entry: object, where: str) -> RecordedServer:
    if not isinstance(entry, dict):
        raise LabStateError(f"{where} is not an object but {_shown(entry)}")
    name, workdir = entry.get("name"), entry.get("workdir")
    pid, started = entry.get("pid"), entry.get("started")
    if not isinstance(name, str) or name not in SERVER_KINDS:
        raise LabStateError(f"{where}.name {_shown(name)} is not one of {sorted(SERVER_KINDS)}")
    if not isinstance(workdir, str) or not _inside_layout(workdir):
        raise LabStateError(f"{where}.workdir {_shown(workdir)} is not a path under servers/")
    if not _is_int(pid) or not 1 < pid < 1 << 22:
        raise LabStateError(f"{where}.pid {_shown(pid)} is not a process id")
    if not _is_int(started) or started < 0:
        raise LabStateError(f"{where}.started {_shown(started)} is not a start time")
    address = entry.get("address")
    if address is not None and (not isinstance(address, str) or len(address) > 256):
        raise LabStateError(f"{where}.address {_shown(address)} is not an address")
    return RecordedServer(name, workdir, pid, started, address)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _inside_layout(workdir: str) -> bool:
    path = PurePosixPath(workdir)
    return (
        not path.is_absolute()
        and len(workdir) <= 256
        and len(path.parts) > 1
        and path.parts[0] == "servers"
        and all(part not in {"", ".", ".."} for part in path.parts)
        and "\0" not in workdir
    )


def _shown(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def read_state(directory: Path) -> LabState | None:
    """The lab state in ``directory``; None when there is none."""
    path = directory / STATE_FILE
    if not path.exists() and not path.is_symlink():
        return None
    try:
        return parse_state(read_text_limited(path, STATE_MAX_BYTES), path)
    except FileRefused as exc:
        raise LabStateError(str(exc)) from None


def live_process(server: RecordedServer, directory: Path, state: LabState) -> Proc | None:
    """``server``'s process if it is still the one ``up`` started, else None."""
    if state.boot_id != boot_id():
        return None
    current = read_proc(server.pid)
    if current is None or current.started != server.started:
        return None
    inside = str(directory.absolute())
    with contextlib.suppress(OSError):
        cwd = os.readlink(f"/proc/{server.pid}/cwd")
        if cwd == inside or cwd.startswith(inside + "/"):
            return current
    return current if inside + "/" in current.cmdline else None


@contextlib.contextmanager
def _exclusive(directory: Path) -> Iterator[None]:
    """One ``up`` or ``down`` at a time per lab directory: two at once would start twins."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LabStateError(f"{directory}: another `playguard lab` is using it now") from None
        yield
    finally:
        os.close(fd)


def lab_up(
    directory: Path, *, marquees: int, tick_interval: float, postgres: bool = False
) -> LabUp:
    """Start the lab's servers in ``directory`` and leave them running; ``LabStateError`` when a
    lab already runs there or the directory holds anything else."""
    directory = directory.absolute()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _exclusive(directory):
        state = read_state(directory)
        if state is not None:
            running = [s for s in state.servers if live_process(s, directory, state)]
            if running:
                pids = ", ".join(server.label for server in running)
                raise LabStateError(
                    f"{directory}: a lab is already running there ({pids}); "
                    f"`playguard lab down --dir {directory}` stops it"
                )
            _remove_runtime_state(directory, state)
        others = sorted(entry.name for entry in directory.iterdir())
        if others:
            raise LabStateError(
                f"{directory}: not empty ({', '.join(others[:5])}); `lab up` needs an empty or new "
                "directory, since `lab down` removes what it made there"
            )
        with contextlib.ExitStack() as on_failure:
            # A lab that did not come up is removed whole, so the next `up` finds the
            # directory as it was; the servers are stopped first (callbacks run last first).
            on_failure.callback(_remove_layout, directory)
            try:
                lab = Lab(directory / "servers", marquees=marquees)
            except ValueError as exc:  # a directory too long for dockerd's sockets
                raise LabStateError(str(exc)) from None
            on_failure.callback(lab.stop)
            servers: list[LabServer] = lab.servers()
            lab.start()
            settings = write_demo_config(lab, directory / "config", tick_interval=tick_interval)
            web = add_web_user(settings)
            if postgres:
                database = PostgresServer(lab.workdir / "postgres")
                on_failure.callback(database.remove_cluster)  # after the stop below
                on_failure.callback(database.stop)
                servers.append(database)
                database.start()
                move_desired_state_to_postgres(database, settings)
            state = LabState(boot_id(), [_recorded(server, directory) for server in servers])
            _write_state(directory, state)
            on_failure.pop_all()
    return LabUp(settings, lab, state, web)


def _recorded(server: LabServer, directory: Path) -> RecordedServer:
    proc = None if server.pid is None else read_proc(server.pid)
    if proc is None:
        raise LabStateError(f"{server.name} in {server.workdir} exited right after it started")
    port = getattr(server, "port", None)
    address = server.url if isinstance(server, DockerDaemon) else f"127.0.0.1:{port}"
    return RecordedServer(
        server.name, str(server.workdir.relative_to(directory)), proc.pid, proc.started, address
    )


def _write_state(directory: Path, state: LabState) -> None:
    """Whole or not at all: a ``down`` never reads half a file."""
    path = directory / STATE_FILE
    partial = path.with_name(f".{STATE_FILE}.partial")
    partial.write_text(json.dumps(state.to_json(), indent=2) + "\n")
    partial.replace(path)


def lab_down(directory: Path) -> LabDown:
    """Stop what ``up`` started in ``directory`` and remove the lab's runtime state; a
    directory without a lab is no error (``found`` is False)."""
    directory = directory.absolute()
    if not directory.is_dir():
        return LabDown(found=False, stopped=[], gone=[])
    with _exclusive(directory):
        state = read_state(directory)
        if state is None:
            return LabDown(found=False, stopped=[], gone=[])
        stopped: list[RecordedServer] = []
        gone: list[RecordedServer] = []
        for server in reversed(state.servers):
            live = live_process(server, directory, state)
            if live is None:
                gone.append(server)
                continue
            kind = SERVER_KINDS[server.name]
            if kind is DockerDaemon:
                DockerDaemon(directory / server.workdir, index=0).stop_recorded(live)
            else:
                terminate_server(live, kind.stop_signal, kind.stop_timeout)
            stopped.append(server)
        _remove_runtime_state(directory, state)
    with contextlib.suppress(OSError):
        directory.rmdir()  # only when empty: whatever else is there stays
    return LabDown(found=True, stopped=stopped, gone=gone)


def _remove_runtime_state(directory: Path, state: LabState) -> None:
    """Remove what ``up`` made, once no recorded server runs; never into a mount left inside
    (removing through a bind mount would delete what it shows). A dockerd's containers and
    mounts outlive it, so they are swept first, also when it was gone already; a PostgreSQL
    cluster that lives outside the lab's directory (its user could not reach it) goes too."""
    for server in state.servers:
        if server.name == DockerDaemon.name:
            DockerDaemon(directory / server.workdir, index=0).stop_recorded(None)
        elif server.name == PostgresServer.name:
            remove_relocated_cluster(directory / server.workdir)
    _remove_layout(directory)


def _remove_layout(directory: Path) -> None:
    mounted = mount_points_under(directory)
    if mounted:
        raise LabStateError(f"{directory}: still mounted inside, not removed: {mounted[0]}")
    for name in LAYOUT:
        path = directory / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
