"""The first-fleet guide's systemd install steps, run as written, as far as this machine allows: in
a scratch root.

Every absolute path the steps name moves under the scratch root; what cannot run here stands in:
the system user's group is the current one (no user is added to this machine), the key is a
fresh one, the hosts file lists the lab's sshd on loopback, which `ssh-keyscan` asks, and
`systemctl` becomes
`systemd-analyze verify` of the unit the steps installed, pointed at the entry point they made.
Everything else (the virtual environment, pip with the constraints, the modes) runs as written.
"""

from __future__ import annotations

import grp
import os
import shlex
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from playguard_lab import SshServer
from tests.support.docs import code_blocks, section
from tests.support.packaging import systemd_verify

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
GUIDE = "getting-started/first-fleet.md"
MOVED = ("/opt/playguard", "/etc/playguard", "/etc/systemd/system")


def install_steps() -> list[str]:
    """The commands of the first sh block in the guide's install step, comments dropped."""
    blocks = code_blocks(section(GUIDE, "6. Install the daemon under systemd"), "sh")
    assert blocks, f"docs/{GUIDE}'s install step has no sh block"
    lines = [line.split(" #", 1)[0].strip() for line in blocks[0].splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def in_scratch(step: str, root: Path, stand_ins: dict[str, str]) -> str:
    for path in MOVED:
        step = step.replace(path, f"{root}{path}")
    for written, stand_in in stand_ins.items():
        step = step.replace(written, stand_in)
    return step


@pytest.mark.timeout(600)
def test_the_documented_systemd_install_runs_and_leaves_a_verified_unit(
    tmp_path: Path, ssh_server: SshServer, require_binary: Callable[[str, str], str]
) -> None:
    analyze = require_binary("systemd-analyze", "systemd")
    require_binary("ssh-keyscan", "openssh-client")
    ssh_server.ensure_running()
    root = tmp_path / "root"
    for path in MOVED:
        Path(f"{root}{path}").parent.mkdir(parents=True, exist_ok=True)
    (root / "etc/systemd/system").mkdir()  # there on any machine systemd runs
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    group = grp.getgrgid(os.getgid()).gr_name
    stand_ins = {
        "-g playguard": f"-g {group}",
        "chgrp playguard": f"chgrp {group}",
        "/root/playguard_id_ed25519": str(key),
        '-p 22 -t ed25519 "$host"': f'-p {ssh_server.port} -t ed25519 "$host"',
    }
    (root / "etc/playguard").mkdir()  # the guide's step 3 made it, with the hosts file
    (root / "etc/playguard/hosts").write_text("127.0.0.1\n")
    steps = install_steps()
    ran = []
    for step in steps:
        command = shlex.split(step)[0]
        if command in ("useradd", "systemctl"):
            continue
        done = subprocess.run(
            in_scratch(step, root, stand_ins),
            shell=True,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=500,
            check=False,
        )
        assert done.returncode == 0, f"{step}\n{done.stderr[-2000:]}"
        ran.append(command)
    assert {"python3", "install", "ssh-keygen"} <= set(ran)
    assert any("ssh-keyscan" in step for step in steps), "the host keys come from ssh-keyscan"

    playguard = root / "opt/playguard/bin/playguard"
    version = subprocess.run([playguard, "--version"], capture_output=True, text=True, check=False)
    assert version.returncode == 0, version.stderr

    etc = root / "etc/playguard"
    for directory in (etc, etc / "ssh"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o750, directory
    for secret in ("playguard.toml", "inventory.yaml", "ssh/id_ed25519", "ssh/known_hosts"):
        assert stat.S_IMODE((etc / secret).stat().st_mode) == 0o640, secret
    host_key = ssh_server.host_key.with_suffix(".pub").read_text().split()[1]
    assert host_key in (etc / "ssh/known_hosts").read_text()

    unit = (root / "etc/systemd/system/playguard.service").read_text()
    assert "ConfigurationDirectoryMode=0750" in unit
    checked = tmp_path / "playguard.service"
    checked.write_text(unit.replace("/opt/playguard/bin/playguard", str(playguard)))
    assert systemd_verify(analyze, checked) == (0, "")
