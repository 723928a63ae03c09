"""The lab guide (docs/getting-started/lab.md) runs as written: its shell blocks are read from
the page, not copied here, so a renamed command or flag, or a step the guide forgets, fails this
test. Two things cannot run as typed and are adapted, each in one place: ``playguard run`` (a
foreground daemon the reader stops with Ctrl-C) runs in the background until the web view
answers and is stopped with SIGINT after the action, and the web view's ``PORT`` is the port the
guide's own ``grep`` shows."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.daemon import REPO_ROOT
from tests.support.docs import code_blocks, section

pytestmark = pytest.mark.integration

GUIDE = "getting-started/lab.md"
STEPS = (
    "2. Start the lab and run the commands",
    "3. The web view, with a user",
    "4. Stop it",
)
RUN = re.compile(r"^playguard run(\s+#.*)?$")
STARTED = """playguard run & daemon=$!
trap 'kill -INT $daemon 2>/dev/null || true' EXIT
port=$(sed -n 's/^http_address = "127.0.0.1:\\([0-9]*\\)"$/\\1/p' "$PLAYGUARD_CONFIG")
for _ in $(seq 200); do
  curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.3
done
"""
STOPPED = "kill -INT $daemon && wait $daemon && trap - EXIT\n"


def guide_script() -> str:
    """The guide's blocks from step 2 on, in order, adapted as the module says."""
    script = ["set -euo pipefail\n"]
    for step in STEPS:
        for block in code_blocks(section(GUIDE, step), "sh"):
            lines = block.splitlines(keepends=True)
            if any(RUN.match(line.strip()) for line in lines):
                lines = [STARTED if RUN.match(line.strip()) else line for line in lines]
            if "PORT" in block:
                lines = [line.replace("PORT", "$port") for line in lines] + [STOPPED]
            script += lines
    return "".join(script)


def test_the_guide_script_adapts_only_the_daemon_and_the_port() -> None:
    script = guide_script()
    assert script.count("playguard run") == 1
    assert 'eval "$(.venv/bin/playguard lab up)"' in script
    assert "/web-password" in script
    assert script.index(STOPPED) < script.index("playguard lab down")


@pytest.fixture
def lab_directory(require_binary: Callable[[str, str], str]) -> Iterator[Path]:
    """A short directory for the lab (containerd's sockets), whatever is left there ended."""
    require_binary("curl", "curl")
    parent = Path(tempfile.mkdtemp(prefix="pg-guide-"))
    try:
        yield parent / "lab"
    finally:
        if (parent / "lab").exists():
            playguard = REPO_ROOT / ".venv" / "bin" / "playguard"
            subprocess.run([playguard, "lab", "down", "--dir", parent / "lab"], check=False)
        shutil.rmtree(parent)


@pytest.mark.timeout(600)
def test_the_lab_guide_runs_as_written(lab_directory: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLAYGUARD_")}
    env["PLAYGUARD_LAB_DIR"] = str(lab_directory)
    done = subprocess.run(
        ["bash", "-c", guide_script()],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=500,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "marquee-0" in done.stdout
    assert "refused" not in done.stdout, done.stdout
    assert "paused by admin@" in done.stdout, "the lab's own user acted with its password"
    assert not lab_directory.exists(), "lab down removed what lab up made"
