"""How long ``playguard --version`` and ``--help`` take to answer, before and after lazy imports,
side by side in one run.

"Before" is the package as it was at ``--before`` (a commit of this repository, exported with
``git archive`` into a temporary directory, never checked out here), "after" is this working
tree; both run with this interpreter and its installed dependencies, interleaved, so machine
noise hits both alike. Prints the median wall time of each and the ratio before/after.

    .venv/bin/python bench/cli_startup.py [--before d26a13c] [--runs 15]

Never part of the tests: the target (well under half a second) is read here, not asserted.
"""

from __future__ import annotations

import argparse
import io
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMANDS = (("--version",), ("--help",), ("status", "--help"), ("run", "--help"))


def export(commit: str, into: Path) -> Path:
    """The package as it was at ``commit``, in ``into``; the repository is left as it is."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", commit, "playguard_async"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def seconds_to_answer(root: Path, args: tuple[str, ...]) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "playguard_async", *args],
        cwd=root,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)},
        capture_output=True,
        check=True,
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="d26a13c", help="commit to compare with")
    parser.add_argument("--runs", type=int, default=15)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pg-cli-startup-") as scratch:
        trees = {"before": export(options.before, Path(scratch)), "after": REPO}
        print(f"{'command':<26}{'before':>10}{'after':>10}{'before/after':>14}")
        for args in COMMANDS:
            times: dict[str, list[float]] = {name: [] for name in trees}
            for _ in range(options.runs):
                for name, root in trees.items():
                    times[name].append(seconds_to_answer(root, args))
            before, after = (statistics.median(times[name]) for name in ("before", "after"))
            command = "playguard " + " ".join(args)
            print(f"{command:<26}{before:>9.3f}s{after:>9.3f}s{before / after:>13.1f}x")


if __name__ == "__main__":
    main()
