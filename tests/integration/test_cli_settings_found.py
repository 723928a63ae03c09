"""A command run with no settings named says where they go (``--config``, ``PLAYGUARD_CONFIG``)
and reads nothing implicitly: not a ``config/inventory.yaml`` of the directory it runs in, nor,
inside a checkout of the repository, its example inventory; and it connects to nothing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.daemon import PLAYGUARD, REPO_ROOT

COMMANDS = [
    ("status",),
    ("describe", "edge-1"),
    ("history", "edge-1"),
    ("plan", "edge-1"),
    ("cycle", "edge-1"),
    ("locks",),
    ("check",),
]


def run_bare(args: tuple[str, ...], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``playguard`` with none of our variables but ``env``, and REDIS pointed nowhere: a
    command that got as far as Redis would say so."""
    clean = {key: value for key, value in os.environ.items() if not key.startswith("PLAYGUARD_")}
    return subprocess.run(
        [str(PLAYGUARD), *args],
        capture_output=True,
        text=True,
        env={**clean, "PYTHONPATH": str(REPO_ROOT), **env},
        cwd=cwd,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
@pytest.mark.parametrize("where", ["a temporary directory", "the repository"])
def test_a_command_without_settings_names_config_and_playguard_config(
    args: tuple[str, ...], where: str, tmp_path: Path
) -> None:
    cwd = REPO_ROOT if where == "the repository" else tmp_path
    if where != "the repository":
        (tmp_path / "config").mkdir()
        (tmp_path / "config" / "inventory.yaml").write_text("marquees: [", encoding="utf-8")

    done = run_bare(args, cwd)
    said = done.stdout + done.stderr

    assert done.returncode != 0, said
    assert "--config" in said
    assert "PLAYGUARD_CONFIG" in said
    assert "inventory.yaml" not in said
    assert "6379" not in said
    assert "Redis" not in said
    assert "Traceback" not in said


@pytest.mark.parametrize("named_by", ["--config", "PLAYGUARD_CONFIG"])
def test_a_settings_file_without_an_inventory_is_named_in_the_error(
    named_by: str, tmp_path: Path
) -> None:
    settings = tmp_path / "playguard.toml"
    settings.write_text('redis_url = "redis://127.0.0.1:1/0"\n', encoding="utf-8")
    if named_by == "--config":
        done = run_bare(("status", "--config", str(settings)), REPO_ROOT)
    else:
        done = run_bare(("status",), REPO_ROOT, PLAYGUARD_CONFIG=str(settings))

    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith(f"Error: {settings} names no inventory; ")
    assert "--config" in done.stderr
    assert "PLAYGUARD_CONFIG" in done.stderr
    assert "Traceback" not in done.stderr
