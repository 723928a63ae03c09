"""The package as it was at a git ref, for benchmarks that run the code before and after a change
side by side in one run (child processes with ``PYTHONPATH`` naming the extracted copy)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def git_output(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def extract(ref: str, into: Path) -> Path:
    """The package as it is at ``ref``, with the current lab beside it (the servers a benchmark
    starts are the same for both versions). A ref from before the package's folders (flat
    modules, the lab inside) cannot run today's benchmarks, which import by today's names."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", ref, "playguard_async"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    if (into / "playguard_async" / "lock.py").exists():
        sys.exit(f"{ref} predates the package's folders: compare with a ref from after them")
    subprocess.run(["cp", "-r", "--", str(ROOT / "playguard_lab"), str(into)], check=True)
    return into


def run_with(code: Path, script: str, *args: str) -> dict[str, Any]:
    """The last line ``script`` prints as JSON, run with ``args`` in a child process that
    imports the package from ``code``; the child's stderr tail ends the benchmark if it fails."""
    child = subprocess.run(
        [sys.executable, script, *args],
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(code)},
    )
    if child.returncode:
        sys.exit(f"the child running {' '.join(args)} failed:\n{child.stderr[-3000:]}")
    row: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    return row


def versions(before: str | None, workdir: Path) -> dict[str, Path]:
    """Where to import the package from, by label: this checkout as ``now``, after the code at
    git ref ``before`` (labelled with its short hash, extracted under ``workdir``) when given."""
    codes = {"now": ROOT}
    if before:
        label = git_output("rev-parse", "--short", before)
        codes = {label: extract(label, workdir / "before"), **codes}
    return codes
