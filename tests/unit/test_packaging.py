"""The container image, the compose sidecar and the systemd unit run what the package installs, stop
the way the daemon drains, and give it more time than its grace. Docker cannot build here (no image
can be pulled), so what can be checked without a build is checked: the files as their tools read
them, and the commands they name, run from this installation."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from playguard_async.operator.command_kit import EXIT_CONFIG
from playguard_async.settings import load_settings
from tests.support.packaging import (
    DOCKERFILE,
    REPO_ROOT,
    dockerfile_instructions,
    exec_form,
    healthcheck_command,
    instruction,
    systemd_unit,
    systemd_verify,
)

PLAYGUARD = Path(sys.executable).with_name("playguard")
EXAMPLE_SETTINGS = REPO_ROOT / "config" / "playguard.toml"
UNIT = REPO_ROOT / "config" / "playguard.service"
COMPOSE = REPO_ROOT / "config" / "compose.sidecar.yaml"


@pytest.fixture
def example_grace(monkeypatch: pytest.MonkeyPatch) -> float:
    """shutdown_grace of the example settings, which the unit and the compose file go with."""
    for variable in [name for name in os.environ if name.startswith("PLAYGUARD_")]:
        monkeypatch.delenv(variable)
    return load_settings(EXAMPLE_SETTINGS).shutdown_grace


def seconds(value: str) -> float:
    """A duration as systemd and compose write it here: ``60``, ``60s`` or ``2min``."""
    for suffix, factor in (("min", 60.0), ("s", 1.0)):
        if value.endswith(suffix):
            return float(value.removesuffix(suffix)) * factor
    return float(value)


def test_image_runs_the_installed_entry_point_with_the_mounted_settings() -> None:
    assert instruction("FROM") == "${BASE}"
    assert instruction("ARG") == "BASE=python:3.11-slim-bookworm"
    assert "--build-arg BASE=python:3.11-slim-bookworm@sha256:" in DOCKERFILE.read_text()
    assert exec_form(instruction("ENTRYPOINT")) == ["playguard"]
    assert exec_form(instruction("CMD")) == ["run", "--config", "/etc/playguard/playguard.toml"]
    assert instruction("STOPSIGNAL") == "SIGTERM"
    assert instruction("USER") == "10001:10001"
    [user] = [args for keyword, args in dependency_layers() if "useradd" in args]
    assert "--uid 10001 --gid 10001" in user


def dependency_layers() -> list[tuple[str, str]]:
    return dockerfile_instructions(DOCKERFILE.read_text())


def test_dependencies_are_a_layer_below_the_source() -> None:
    steps = dependency_layers()
    source = steps.index(("COPY", "playguard_async /tmp/build/playguard_async"))
    dependencies = next(
        index for index, (keyword, args) in enumerate(steps)
        if keyword == "RUN" and "-r /tmp/build/requirements.txt" in args
    )  # fmt: skip
    assert dependencies < source
    assert ("COPY", ".ci/constraints.txt pyproject.toml /tmp/build/") in steps[:dependencies]
    assert "pip install --no-deps /tmp/build" in steps[source + 1][1]


def test_the_dependency_layer_installs_what_pyproject_declares(tmp_path: Path) -> None:
    """The RUN's own Python, pointed at this pyproject, lists exactly its dependencies."""
    run = next(args for keyword, args in dependency_layers() if "requirements.txt" in args)
    code = shlex.split(run)[2].replace(
        "/tmp/build/pyproject.toml", str(REPO_ROOT / "pyproject.toml")
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    declared = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert done.stdout.splitlines() == declared


def test_entry_command_of_the_image_runs_from_an_installation() -> None:
    argv = [str(PLAYGUARD), *exec_form(instruction("ENTRYPOINT"))[1:], "run", "--help"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "--config" in done.stdout


def test_healthcheck_uses_the_images_python_on_the_http_address_it_sets() -> None:
    command = healthcheck_command()
    assert command[:2] == ["python", "-c"]
    assert "/healthz" in command[2]
    assert "PLAYGUARD_HTTP_ADDRESS" in command[2]
    assert "ProxyHandler({})" in command[2], "a proxy from the environment must not see the probe"
    assert "PLAYGUARD_HTTP_ADDRESS=0.0.0.0:9464" in instruction("ENV")


def test_build_context_leaves_out_the_virtualenv_tests_and_lab() -> None:
    ignored = (REPO_ROOT / ".dockerignore").read_text().split()
    assert {".venv", ".git", "tests", "playguard_lab"} <= set(ignored)


MIGRATIONS = REPO_ROOT / "playguard_async" / "desired_state" / "postgres" / "migrations"


def test_wheel_holds_the_runtime_package_only(tmp_path: Path) -> None:
    """The wheel is what a user installs: the runtime package with its typing marker and its
    migrations, and neither the lab nor the tests. Built offline, with the build backend the test
    extra installs."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "--quiet", "--wheel-dir", str(tmp_path), str(REPO_ROOT)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    [wheel] = tmp_path.glob("playguard_async-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    tops = {name.split("/", 1)[0] for name in names}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"playguard_async"}
    assert "playguard_async/py.typed" in names
    shipped = {
        f"playguard_async/desired_state/postgres/migrations/{m.name}"
        for m in MIGRATIONS.glob("*.sql")
    }
    assert shipped, "the PostgreSQL schema's migrations"
    assert shipped <= names, "`playguard db migrate` works from a pip install"


@pytest.mark.parametrize("argv", [["lab", "up"], ["lab", "run", "--duration", "1"], ["lab"]])
def test_without_the_lab_its_command_says_so_in_one_line(tmp_path: Path, argv: list[str]) -> None:
    """An installation of the wheel alone (the container image) has no ``playguard_lab``: the
    command is still listed, and using it is one line and exit status 1, not a traceback.
    Python runs without its site set-up, so the editable install's path to the repository (where
    the lab lives) is not added; the runtime package comes from a directory holding it alone."""
    (tmp_path / "playguard_async").symlink_to(REPO_ROOT / "playguard_async")
    site_packages = [path for path in sys.path if path.endswith("site-packages")]
    program = (
        "import sys; sys.path[:0] = sys.argv[1:3]; sys.argv[1:3] = []; "
        "from playguard_async.operator.cli import main; main()"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", program, str(tmp_path), site_packages[0], *argv],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        "Error: the lab is not part of this installation (the container image leaves it out)\n"
    )
    listed = subprocess.run(
        [sys.executable, "-S", "-c", program, str(tmp_path), site_packages[0], "--help"],
        capture_output=True, text=True, timeout=60, check=True, cwd=tmp_path,
    )  # fmt: skip
    assert "lab" in listed.stdout.split()


def test_every_dependency_is_pinned_in_ci_at_a_version_it_allows() -> None:
    """CI installs the pins; a lower bound above a pin (or a dependency without one) would make
    CI test something a user's install may not get."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    pins = {
        canonicalize_name(name): Version(version)
        for name, version in (
            line.split("==")
            for line in (REPO_ROOT / ".ci" / "constraints.txt").read_text().split()
            if "==" in line
        )
    }
    declared = [Requirement(text) for text in project["dependencies"]]
    assert {"prometheus-client", "aiohttp"} <= {canonicalize_name(r.name) for r in declared}
    for requirement in declared:
        pin = pins.get(canonicalize_name(requirement.name))
        assert pin is not None, f"{requirement.name} is not pinned in .ci/constraints.txt"
        assert requirement.specifier.contains(pin), f"pin {pin} outside {requirement}"


def test_compose_sidecar_mounts_settings_read_only_and_publishes_on_loopback_only(
    example_grace: float,
) -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    assert services["redis"]["image"] == "redis:7"
    playguard = services["playguard"]
    assert "./playguard.toml:/etc/playguard/playguard.toml:ro" in playguard["volumes"]
    assert all(volume.endswith(":ro") for volume in playguard["volumes"])
    assert all(port.startswith("127.0.0.1:") for port in playguard["ports"])
    assert playguard["environment"]["PLAYGUARD_REDIS_URL"].startswith("redis://redis:")
    assert playguard["depends_on"]["redis"]["condition"] == "service_healthy"
    assert playguard["env_file"] == ["./playguard.env"]
    assert "./ssh:/etc/playguard/ssh:ro" in playguard["volumes"]
    assert seconds(playguard["stop_grace_period"]) > example_grace


def test_compose_sidecar_is_valid_for_docker_compose(
    require_binary: Callable[[str, str], str], tmp_path: Path
) -> None:
    compose = require_binary("docker-compose", "docker-compose")
    # As the compose file's comment says to make it: the example, copied to playguard.env.
    config = tmp_path / "config"
    shutil.copytree(COMPOSE.parent, config)
    shutil.copy(config / "playguard.env.example", config / "playguard.env")
    done = subprocess.run(
        [compose, "-f", str(config / COMPOSE.name), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_systemd_unit_notifies_watches_and_outlasts_the_drain(example_grace: float) -> None:
    service = systemd_unit(UNIT)["Service"]
    assert service["Type"] == ["notify"]
    assert service["NotifyAccess"] == ["main"]
    assert service["ExecStart"] == [
        "/opt/playguard/bin/playguard run --config /etc/playguard/playguard.toml"
    ]
    assert service["KillSignal"] == ["SIGTERM"]
    assert service["Restart"] == ["on-failure"]
    # A configuration that cannot be used is not mended by restarting every RestartSec.
    assert service["RestartPreventExitStatus"] == [str(EXIT_CONFIG)]
    assert service["User"] == ["playguard"]
    assert seconds(service["TimeoutStopSec"][0]) > example_grace
    assert seconds(service["WatchdogSec"][0]) > 0
    for hardening in ("NoNewPrivileges", "PrivateTmp"):
        assert service[hardening] == ["yes"]
    assert service["ProtectSystem"] == ["strict"]
    assert service["StateDirectory"] == ["playguard"]


def test_systemd_unit_passes_systemd_analyze_verify(
    tmp_path: Path, require_binary: Callable[[str, str], str]
) -> None:
    analyze = require_binary("systemd-analyze", "systemd")
    # verify insists that ExecStart's program exists: point it at this installation's.
    unit = tmp_path / "playguard.service"
    unit.write_text(UNIT.read_text().replace("/opt/playguard/bin/playguard", str(PLAYGUARD)))
    assert systemd_verify(analyze, unit) == (0, "")


STUB_PYTHON = """#!/bin/sh
echo "python3 $*" >> "$INSTALL_LOG"
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin"
  printf '#!/bin/sh\\necho "venv-python $*" >> "$INSTALL_LOG"\\n' > "$3/bin/python"
  chmod +x "$3/bin/python"
fi
"""


@pytest.mark.parametrize(
    ("args", "installed"), [((), "-e .[tracing,test,dev,docs]"), (("--runtime",), "-e .")]
)
def test_install_script_adds_the_extras_unless_runtime_only(
    tmp_path: Path, args: tuple[str, ...], installed: str
) -> None:
    """The real script in a scratch copy of the repository, with stand-ins for apt (every
    package already installed) and python3 (it records what it is asked), so nothing is
    installed on this machine."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO_ROOT / "scripts" / "install.sh", tmp_path / "scripts")
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "dpkg-query").write_text("#!/bin/sh\necho 'install ok installed'\n")
    (stubs / "python3").write_text(STUB_PYTHON)
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    log = tmp_path / "install.log"
    done = subprocess.run(
        ["bash", str(tmp_path / "scripts" / "install.sh"), *args],
        env={"PATH": f"{stubs}:/usr/bin:/bin", "INSTALL_LOG": str(log)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    last = log.read_text().splitlines()[-1]
    assert last == f"venv-python -m pip install -q -c .ci/constraints.txt {installed}"


def test_the_demo_installs_runtime_dependencies_only() -> None:
    demo = (REPO_ROOT / "scripts" / "demo.sh").read_text().splitlines()
    installs = [line for line in demo if "install.sh" in line and not line.startswith("#")]
    assert installs == ["bash scripts/install.sh --runtime"]


def test_the_base_image_is_one_build_argument_whose_digest_pin_is_documented() -> None:
    """A tag in the file, and the comment above it says how to pin the digest one checked: the
    one ``FROM`` takes the ``BASE`` argument, so ``--build-arg BASE=...@sha256:...`` pins it."""
    assert instruction("FROM") == "${BASE}"
    assert instruction("ARG") == "BASE=python:3.11-slim-bookworm"
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert [keyword for keyword, _ in dockerfile_instructions(text)][:2] == ["ARG", "FROM"]
    comment = text.split("ARG BASE=", 1)[0]
    assert "docker buildx imagetools inspect python:3.11-slim-bookworm" in comment
    assert "--build-arg BASE=python:3.11-slim-bookworm@sha256:" in comment
    guide = (REPO_ROOT / "docs/getting-started/sidecar.md").read_text(encoding="utf-8")
    assert "--build-arg BASE=python:3.11-slim-bookworm@sha256:" in guide
