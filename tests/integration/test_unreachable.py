"""A Marquee the daemon cannot reach or use, through the real ``playguard cycle`` against the
lab's sshd: each way of failing to connect ends the cycle ``unreachable`` with its reason in
words and the address, blames no phase, and is recorded so for ``status``."""

from __future__ import annotations

import contextlib
import json
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from playguard_lab import SshServer
from tests.support.cli import EXIT_NOT_OK, LAB_SETTINGS, Playguard
from tests.support.world import LabWorld

pytestmark = pytest.mark.integration

OTHER_HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJdD7y3aLq454yWBdwLWbieU1ebz9/cu7/QEXn9OIeZJ"


Breakage = Callable[[dict[str, Any], SshServer, Path, contextlib.ExitStack], str]
"""What a case does to the lab Marquee's entry (or its sshd) for as long as the stack lasts;
returns the reason the cycle must end with, as a regular expression."""


def _stopped(entry: dict[str, Any], ssh: SshServer, tmp: Path, stack: contextlib.ExitStack) -> str:
    ssh.stop()
    stack.callback(ssh.restart)
    return re.escape(f"connection refused (127.0.0.1:{ssh.port})")


def _host_key_changed(
    entry: dict[str, Any], ssh: SshServer, tmp: Path, stack: contextlib.ExitStack
) -> str:
    known = tmp / "known_hosts"
    known.write_text(f"[{ssh.host}]:{ssh.port} {OTHER_HOST_KEY}\n")
    entry["known_hosts"] = str(known)
    return re.escape(
        f"host key mismatch (127.0.0.1:{ssh.port}): host key {ssh.host_key_fingerprint} "
        f"is not trusted by {known}"
    )


def _key_refused(
    entry: dict[str, Any], ssh: SshServer, tmp: Path, stack: contextlib.ExitStack
) -> str:
    entry["identity_file"] = str(ssh.host_key)  # a real key, not the one sshd authorizes
    return re.escape(f"auth refused ({entry['user']}@127.0.0.1:{ssh.port}): key {ssh.host_key}")


def _silent(entry: dict[str, Any], ssh: SshServer, tmp: Path, stack: contextlib.ExitStack) -> str:
    listener = stack.enter_context(socket.create_server(("127.0.0.1", 0)))  # never accepts
    entry["port"] = listener.getsockname()[1]
    return re.escape(f"timeout (no answer within 1 s) (127.0.0.1:{entry['port']})")


def _identity_missing(
    entry: dict[str, Any], ssh: SshServer, tmp: Path, stack: contextlib.ExitStack
) -> str:
    entry["identity_file"] = str(tmp / "no-such-key")
    return re.escape(f"identity_file {tmp / 'no-such-key'}: ") + r".+ \(marquee edge-1\)"


def _known_hosts_missing(
    entry: dict[str, Any], ssh: SshServer, tmp: Path, stack: contextlib.ExitStack
) -> str:
    entry["known_hosts"] = str(tmp / "no-such-known-hosts")
    return re.escape(f"known_hosts {tmp / 'no-such-known-hosts'}: ") + r".+ \(marquee edge-1\)"


CASES: dict[str, Breakage] = {
    "sshd-stopped": _stopped,
    "host-key-changed": _host_key_changed,
    "client-key-refused": _key_refused,
    "no-answer": _silent,
    "identity-file-missing": _identity_missing,
    "known-hosts-missing": _known_hosts_missing,
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_marquee_out_of_reach_ends_the_cycle_unreachable_with_the_reason_in_words(
    playguard: Playguard, lab_world: LabWorld, ssh_server: SshServer, tmp_path: Path, case: str
) -> None:
    with contextlib.ExitStack() as stack:
        reason = CASES[case](lab_world.data["marquees"][0], ssh_server, tmp_path, stack)
        playguard.configure(lab_world.data, **{**LAB_SETTINGS, "ssh_connect_timeout": 1.0})
        done = playguard("cycle", "edge-1")
    output = done.stdout + done.stderr
    assert done.returncode == EXIT_NOT_OK, output
    assert "Traceback" not in output, output
    assert "Error(" not in output, "no repr of an exception"
    summary = f"^edge-1: unreachable: {reason}.*; 0 actions taken"
    assert re.search(summary, done.stdout, re.MULTILINE), output
    assert "phase_failed" not in output, "no phase is blamed for the host"

    [edge] = json.loads(playguard("status", "--json").stdout)["marquees"]
    last = edge["last"]
    assert (last["outcome"], last["phase"]) == ("unreachable", None)
    assert re.fullmatch(reason + ".*", last["reason"]), last["reason"]
    assert edge["lock"] is None, "the lease was released"
