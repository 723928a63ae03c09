"""``check`` into a pipe, as a real process: rows as wide as what they say, never padded to the
widest (its details name unreachable Redis and SSH at length)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.support.daemon import PLAYGUARD, REPO_ROOT


def test_check_into_a_pipe_prints_rows_without_padding(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.yaml"
    marquees = [
        {"name": f"edge-{n}", "host": "127.0.0.1", "port": 1, "user": "root",
         "identity_file": str(tmp_path / "absent" / ("k" * n)), "known_hosts": "/y"}
        for n in (1, 40, 120)
    ]  # fmt: skip
    inventory.write_text(json.dumps({"marquees": marquees}), encoding="utf-8")
    settings = tmp_path / "playguard.toml"
    settings.write_text(
        f'inventory = "{inventory}"\nredis_url = "redis://127.0.0.1:1/0"\n', encoding="utf-8"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("PLAYGUARD_")}

    done = subprocess.run(
        [str(PLAYGUARD), "check", "--config", str(settings), "--timeout", "5"],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(REPO_ROOT)},
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    lines = done.stdout.splitlines()

    assert done.returncode == 1, done.stdout + done.stderr
    assert [line.split()[:2] for line in lines if "edge-" in line] == [
        ["marquee", f"edge-{n}"] for n in (1, 40, 120)
    ]
    for line in lines:
        assert line == line.rstrip(), repr(line)
    assert min(len(line) for line in lines) < max(len(line) for line in lines) - 100
