"""What validating one PostgreSQL snapshot costs, before and after a change, side by side in one
run: ``validate_snapshot`` of rows as read (no database: the rows are built here), cold (a new
memo: every row validated, the index built) and with 1% of the Playgrounds changed (a kept memo:
only those rows validated again).

"Before" runs the package of git ref ``--before`` (``git archive``, never checked out here),
"after" this working tree, each in a child process of this interpreter, interleaved round after
round so machine noise hits both alike. Prints the best milliseconds of each and after/before.

    .venv/bin/python bench/snapshot_validation.py [--marquees 10000] [--rounds 5] [--before REF]

Never part of the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from code_versions import ROOT, extract, git_output  # bench/ is on sys.path

PLAYGROUNDS_PER_MARQUEE = 5

CHILD = """
import copy, json, random, sys, time
from playguard_async.desired_state.postgres.validation import RowMemo, validate_snapshot

marquees, per_marquee = int(sys.argv[1]), int(sys.argv[2])
marquee = dict(host="127.0.0.1", port=22, user="u", identity_file="/k/id", known_hosts="/k/kh",
               docker_socket="/run/d.sock", workdir="/srv/p", state_dir=None, launchable=True)
rows = {
    "marquees": [{"name": f"edge-{i}", **marquee} for i in range(marquees)],
    "registries": [],
    "playspecs": [dict(name="shop", repo="https://g.example/s.git", compose_file="c.yaml",
                       images=["shop:1"], registry=None)],
    "playgrounds": [dict(name=f"pg-{i}-{s}", playspec="shop", marquee=f"edge-{i}",
                         branch="main", state="running", expires_at=None,
                         stop_when_branch_gone=False)
                    for i in range(marquees) for s in range(per_marquee)],
    "agent_chats": [],
}
memo = RowMemo()
fresh = copy.deepcopy(rows)
started = time.perf_counter()
validate_snapshot(fresh, memo)
cold = time.perf_counter() - started
changed = copy.deepcopy(rows)
playgrounds = changed["playgrounds"]
for playground in random.Random(1).sample(playgrounds, len(playgrounds) // 100):
    playground["branch"] = "feature/changed"
started = time.perf_counter()
validate_snapshot(changed, memo)
print(json.dumps({"cold": cold * 1000, "1% changed": (time.perf_counter() - started) * 1000}))
"""


def run(code: Path, marquees: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(marquees), str(PLAYGROUNDS_PER_MARQUEE)],
        env={**os.environ, "PYTHONPATH": str(code)},
        capture_output=True, text=True, check=True, cwd=code,
    )  # fmt: skip
    figures: dict[str, float] = json.loads(done.stdout)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--marquees", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", help="git ref (default: where this branch left main)")
    args = parser.parse_args()
    commit = git_output(
        "rev-parse", "--short", args.before or git_output("merge-base", "HEAD", "main")
    )
    with tempfile.TemporaryDirectory(prefix="validation-bench-") as workdir:
        before = extract(commit, Path(workdir) / "before")
        best: dict[str, dict[str, float]] = {"before": {}, "after": {}}
        for _ in range(args.rounds):
            for label, code in (("before", before), ("after", ROOT)):
                for figure, value in run(code, args.marquees).items():
                    best[label][figure] = min(best[label].get(figure, value), value)
    print(f"{args.marquees} Marquees x {PLAYGROUNDS_PER_MARQUEE} Playgrounds, best of "
          f"{args.rounds}, before = {commit}, load {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"{'figure':<12}{'before ms':>11}{'after ms':>10}{'after/before':>14}")
    for figure, old in best["before"].items():
        new = best["after"][figure]
        print(f"{figure:<12}{old:>11.0f}{new:>10.0f}{new / old:>14.2f}")


if __name__ == "__main__":
    main()
