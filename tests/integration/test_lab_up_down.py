"""``playguard lab up`` leaves the real servers running for commands typed by hand, and
``lab down`` stops exactly what ``up`` started: run as the operator runs them, as commands."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import stat
import subprocess
import tempfile
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from playguard_lab.detached import STATE_FILE, boot_id
from playguard_lab.process import Proc, read_proc, terminate_server
from tests.support.daemon import PLAYGUARD

LAB_PROGRAMS = (
    ("redis-server", "redis-server"),
    ("sshd", "openssh-server"),
    ("dockerd", "docker.io"),
    ("docker-registry", "docker-registry"),
    ("busybox", "busybox-static"),
)


def operator_environment(**extra: str) -> dict[str, str]:
    """The test's environment without our settings or proxies, as a fresh shell has it."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PLAYGUARD_") and "proxy" not in key.lower()
    }
    env.update(extra)
    return env


def playguard(*args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PLAYGUARD), *args],
        capture_output=True,
        text=True,
        env=operator_environment(**extra_env),
        timeout=120,
        check=False,
    )


def up_state(directory: Path) -> str:
    return (directory / STATE_FILE).read_text()


def recorded_processes(directory: Path) -> list[Proc]:
    state = json.loads(up_state(directory))
    return [Proc(server["pid"], 0, server["started"], "") for server in state["servers"]]


def still_running(procs: list[Proc]) -> list[Proc]:
    """Those that are still the very process recorded (same PID, same start time)."""
    return [
        proc
        for proc in procs
        if (current := read_proc(proc.pid)) is not None and current.started == proc.started
    ]


@pytest.fixture
def lab_directory(require_binary: Callable[[str, str], str]) -> Iterator[Path]:
    """A directory for ``lab up``, short enough for containerd's sockets (104 bytes) whatever
    pytest's temp root; whatever a failing test leaves running there is ended."""
    for program, package in LAB_PROGRAMS:
        require_binary(program, package)
    parent = Path(tempfile.mkdtemp(prefix="pg-up-"))
    directory = parent / "lab"
    try:
        yield directory
    finally:
        if (directory / STATE_FILE).exists():
            procs = recorded_processes(directory)
            playguard("lab", "down", "--dir", str(directory))
            for proc in still_running(procs):
                terminate_server(proc, signal.SIGTERM, 10.0)
        shutil.rmtree(parent)


def test_lab_up_prints_the_export_line_and_down_stops_every_server_it_started(
    lab_directory: Path,
) -> None:
    up = playguard("lab", "up", "--dir", str(lab_directory), "--marquees", "1")
    assert up.returncode == 0, up.stderr
    [export_line] = up.stdout.splitlines()
    settings = lab_directory / "config" / "playguard.toml"
    assert export_line == f"export PLAYGUARD_CONFIG={shlex.quote(str(settings))}"
    assert "playguard cycle marquee-0" in up.stderr
    assert f"playguard lab down --dir {lab_directory}" in up.stderr
    # The web view's own admin: its address and password told once, the password kept 0600.
    secret = lab_directory / "config" / "web-password"
    password = secret.read_text().strip()
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert stat.S_IMODE((lab_directory / "config" / "web-users").stat().st_mode) == 0o600
    port = tomllib.loads(settings.read_text())["http_address"].rsplit(":", 1)[1]
    assert f"web view (once `playguard run` serves it): http://127.0.0.1:{port}/, user admin, " \
           f"password {password} (shown once; kept in {secret})" in up.stderr  # fmt: skip
    assert password not in up.stdout
    procs = recorded_processes(lab_directory)
    assert len(procs) == 4, "Redis, the registry, the Marquee's sshd and dockerd"
    addresses = [server["address"] for server in json.loads(up_state(lab_directory))["servers"]]
    assert f"unix://{lab_directory}/servers/m0/docker/docker.sock" in addresses
    assert still_running(procs) == procs, "they outlive the command that started them"

    config = {"PLAYGUARD_CONFIG": str(settings)}
    cycle = playguard("cycle", "marquee-0", **config)
    assert cycle.returncode == 0, cycle.stdout + cycle.stderr
    status = playguard("status", "--json", **config)
    assert status.returncode == 0, status.stderr
    [marquee] = json.loads(status.stdout)["marquees"]
    assert (marquee["name"], marquee["last"]["outcome"]) == ("marquee-0", "ok")

    twin = playguard("lab", "up", "--dir", str(lab_directory), "--marquees", "1")
    assert twin.returncode == 1
    assert twin.stderr.startswith(f"Error: {lab_directory}: a lab is already running there")
    assert recorded_processes(lab_directory) == procs, "no twin was started"

    down = playguard("lab", "down", "--dir", str(lab_directory))
    assert down.returncode == 0, down.stderr
    assert down.stdout.startswith("lab down: stopped dockerd")
    assert still_running(procs) == []
    assert not lab_directory.exists(), "its servers, settings and state are removed"

    again = playguard("lab", "down", "--dir", str(lab_directory))
    assert (again.returncode, again.stderr) == (0, "")
    assert again.stdout == f"no lab is running in {lab_directory}; nothing to stop\n"


def modes_above(path: Path) -> dict[Path, str]:
    return {directory: stat.filemode(directory.stat().st_mode) for directory in path.parents}


def test_lab_up_with_postgres_changes_no_mode_above_the_lab_and_down_removes_its_cluster(
    lab_directory: Path, require_postgres: Path
) -> None:
    """The lab's directory under a 0700 one, as ``~/.local/state`` is under ``/root``: the
    ``postgres`` user cannot reach it, so the cluster lives in a directory of its own under the
    temporary directory, and nothing above the lab is opened. ``PLAYGUARD_LAB_DIR`` names the
    lab's directory for ``up`` and ``down`` alike."""
    before = modes_above(lab_directory)
    assert before[lab_directory.parent] == "drwx------"
    where = {"PLAYGUARD_LAB_DIR": str(lab_directory)}
    up = playguard("lab", "up", "--marquees", "1", "--desired-state", "postgres", **where)
    assert up.returncode == 0, up.stderr
    assert modes_above(lab_directory) == before, "no directory above the lab was changed"
    link = lab_directory / "servers" / "postgres" / "cluster"
    cluster = Path(os.readlink(link)) if os.geteuid() == 0 else link.parent
    assert cluster.is_relative_to(tempfile.gettempdir()) or os.geteuid() != 0, cluster
    procs = recorded_processes(lab_directory)
    assert len(procs) == 5, "Redis, the registry, sshd, dockerd and PostgreSQL"

    config = {"PLAYGUARD_CONFIG": str(lab_directory / "config" / "playguard.toml")}
    status = playguard("status", "--json", **config)
    assert status.returncode == 0, status.stderr
    [marquee] = json.loads(status.stdout)["marquees"]
    assert marquee["name"] == "marquee-0", "the inventory came from the lab's PostgreSQL"

    down = playguard("lab", "down", **where)
    assert down.returncode == 0, down.stderr
    assert down.stdout.startswith("lab down: stopped postgres"), down.stdout
    assert still_running(procs) == []
    assert not cluster.exists(), "the cluster outside the lab's directory is removed too"
    assert not lab_directory.exists()
    assert modes_above(lab_directory) == before


def test_lab_dir_variable_names_the_directory_when_dir_is_not_given(tmp_path: Path) -> None:
    directory = tmp_path / "from-the-environment"
    down = playguard("lab", "down", PLAYGUARD_LAB_DIR=str(directory))
    assert (down.returncode, down.stderr) == (0, "")
    assert down.stdout == f"no lab is running in {directory}; nothing to stop\n"
    given = playguard("lab", "down", "--dir", str(tmp_path / "given"), PLAYGUARD_LAB_DIR="x")
    assert given.stdout == f"no lab is running in {tmp_path / 'given'}; nothing to stop\n"


@pytest.fixture
def bystander(tmp_path: Path) -> Iterator[Proc]:
    """A live process outside any lab, which a stale or forged state file may name."""
    process = subprocess.Popen(["sleep", "300"], cwd=tmp_path)
    try:
        seen = read_proc(process.pid)
        assert seen is not None
        yield seen
    finally:
        process.kill()
        process.wait()


def write_state(directory: Path, servers: list[dict[str, object]], boot: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    state = {"version": 1, "boot_id": boot, "servers": servers}
    (directory / STATE_FILE).write_text(json.dumps(state))


@pytest.mark.parametrize(
    ("case", "started_offset", "same_boot"),
    [
        ("the PID now belongs to another process", 1, True),
        ("the state was written in another boot", 0, False),
        ("the process runs outside the lab directory", 0, True),
    ],
)
def test_lab_down_never_signals_a_pid_that_is_not_the_process_it_recorded(
    tmp_path: Path, bystander: Proc, case: str, started_offset: int, same_boot: bool
) -> None:
    directory = tmp_path / "lab"
    server = {
        "name": "redis",
        "workdir": "servers/redis",
        "pid": bystander.pid,
        "started": bystander.started + started_offset,
    }
    write_state(directory, [server], boot_id() if same_boot else "another-boot")
    down = playguard("lab", "down", "--dir", str(directory))
    assert down.returncode == 0, (case, down.stderr)
    assert still_running([bystander]) == [bystander], case
    assert f"redis {bystander.pid} (redis): no longer the process" in down.stdout
    assert not directory.exists()


GARBAGE_STATES: list[tuple[str, bytes]] = [
    ("empty", b""),
    ("not JSON", b"pid=4242\n"),
    ("not UTF-8", b"\xff\xfe{}"),
    ("a list", b"[]"),
    ("terminal escapes", b'"\\u001b]0;owned\\u0007"'),
    ("pid 1", b'{"version": 1, "boot_id": "b", "servers": '
              b'[{"name": "redis", "workdir": "servers/redis", "pid": 1, "started": 0}]}'),
    ("a path out of the lab", b'{"version": 1, "boot_id": "b", "servers": '
                              b'[{"name": "dockerd", "workdir": "servers/../../etc", '
                              b'"pid": 4242, "started": 0}]}'),
    ("too large", b" " * (1 << 20)),
]  # fmt: skip


@pytest.mark.parametrize("command", ["down", "up"])
@pytest.mark.parametrize(("case", "content"), GARBAGE_STATES, ids=[c for c, _ in GARBAGE_STATES])
def test_a_garbage_state_file_is_one_line_naming_it(
    tmp_path: Path, command: str, case: str, content: bytes
) -> None:
    directory = tmp_path / "lab"
    directory.mkdir()
    state = directory / STATE_FILE
    state.write_bytes(content)
    result = playguard("lab", command, "--dir", str(directory))
    assert result.returncode == 1, (case, result.stdout, result.stderr)
    assert result.stderr.startswith(f"Error: {state}: "), result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "\x1b" not in result.stderr
    assert state.read_bytes() == content, "a state it cannot read is left for a person"


def test_a_fifo_for_a_state_file_is_refused_without_waiting(tmp_path: Path) -> None:
    directory = tmp_path / "lab"
    directory.mkdir()
    os.mkfifo(directory / STATE_FILE)
    result = playguard("lab", "down", "--dir", str(directory))
    assert result.returncode == 1
    assert result.stderr == f"Error: {directory / STATE_FILE}: not a regular file\n"


def test_lab_up_refuses_a_directory_holding_something_else(tmp_path: Path) -> None:
    directory = tmp_path / "mine"
    directory.mkdir()
    (directory / "notes.txt").write_text("keep me\n")
    result = playguard("lab", "up", "--dir", str(directory))
    assert result.returncode == 1
    assert result.stderr.startswith(f"Error: {directory}: not empty (notes.txt)")
    assert [entry.name for entry in directory.iterdir()] == ["notes.txt"]


def test_a_lab_that_cannot_come_up_is_one_line_and_leaves_the_directory_empty(
    tmp_path: Path, require_binary: Callable[[str, str], str]
) -> None:
    for program, package in LAB_PROGRAMS:
        require_binary(program, package)
    directory = tmp_path / ("d" * 60) / "lab"  # too long for dockerd's unix sockets
    result = playguard("lab", "up", "--dir", str(directory), "--marquees", "1")
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith(f"Error: {directory}/servers/m0/docker is too long"), (
        result.stderr
    )
    assert len(result.stderr.splitlines()) == 1
    assert list(directory.iterdir()) == [], "what it made before the failure is removed"
