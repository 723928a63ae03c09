"""``playguard --version`` and ``--help`` import click and nothing of the engine, Redis, SSH,
Docker or rich, so they answer at once (figures: bench/cli_startup.py); a command still loads
what it needs when it runs."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("asyncssh", "redis", "aiohttp", "aiodocker", "rich", "pydantic", "structlog", "yaml")
OURS = (
    "playguard_async.engine.scheduler",
    "playguard_async.operator.fleet",
    "playguard_async.service.daemon",
)


def imported_by(*args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "playguard_async", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    return done, modules


@pytest.mark.parametrize(
    "args", [("--version",), ("--help",), ("-h",), ("status", "--help"), ("run", "--help")]
)
def test_version_and_help_import_nothing_of_the_daemon(args: tuple[str, ...]) -> None:
    done, modules = imported_by(*args)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "playguard" in done.stdout
    loaded = sorted(m for m in modules if m.split(".")[0] in HEAVY or m in OURS)
    assert loaded == [], f"{' '.join(args)} imported {loaded[:10]}"


def test_a_command_still_loads_what_it_needs() -> None:
    done, modules = imported_by("status", "--config", "/nonexistent/playguard.toml")
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Error: /nonexistent/playguard.toml: cannot read settings file" in done.stderr
    assert "playguard_async.settings" in modules


CYCLE_MACHINERY = (
    "playguard_async.engine.scheduler",
    "playguard_async.service.wiring",
    "playguard_async.phases.sync_git",
    "asyncssh",
    "aiodocker",
)


@pytest.mark.parametrize(
    "args",
    [
        ("status",),
        ("locks",),
        ("describe", "m1"),
        ("unlock", "m1"),
        ("pause", "m1", "--for", "1m", "--reason", "maintenance"),
        ("resume", "m1"),
        ("pin", "m1", "web-main", "--reason", "maintenance"),
        ("history", "m1"),
        ("rollout", "list"),
        ("rollout", "show", "web@main"),
        ("rollout", "pause", "web@main", "--rollout", "0123456789abcdef", "--reason", "x"),
        ("audit", "verify"),
    ],
)
def test_a_command_that_runs_no_cycle_loads_no_engine_ssh_or_docker(args: tuple[str, ...]) -> None:
    """Every command that reads or writes Redis only (tests run hundreds of them, each paying for
    its imports): the engine, the phases and the remote layer stay unloaded. A rollout action
    loads the remote layer only once its settings are read (it puts the record on the hosts)."""
    done, modules = imported_by(*args, "--config", "/nonexistent/playguard.toml")
    assert "cannot read settings file" in done.stderr, done.stderr[-2000:]
    loaded = sorted(m for m in modules if m in CYCLE_MACHINERY)
    assert loaded == [], f"{' '.join(args)} imported {loaded}"
