"""Reading the packaging files the way their tools do, so tests can check what they would run."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO_ROOT / "Dockerfile"


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs: comments dropped, backslash continuations joined."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = pending + line
        pending = ""
        keyword, _, arguments = whole.partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
    return instructions


def instruction(name: str, text: str | None = None) -> str:
    """The arguments of the last ``name`` instruction (the one that counts)."""
    text = DOCKERFILE.read_text(encoding="utf-8") if text is None else text
    found = [arguments for keyword, arguments in dockerfile_instructions(text) if keyword == name]
    assert found, f"no {name} in the Dockerfile"
    return found[-1]


def exec_form(arguments: str) -> list[str]:
    """A JSON-array (exec form) argument list; the shell form is refused, as signals would go to
    a shell instead of the daemon."""
    parsed = json.loads(arguments)
    assert isinstance(parsed, list), arguments
    return [str(item) for item in parsed]


def healthcheck_command(text: str | None = None) -> list[str]:
    """The command of ``HEALTHCHECK [OPTIONS] CMD [...]``."""
    options, separator, command = instruction("HEALTHCHECK", text).partition("CMD ")
    assert separator, "HEALTHCHECK without CMD"
    assert all(option.startswith("--") for option in shlex.split(options)), options
    return exec_form(command)


def systemd_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """A unit file as {section: {key: [values]}}; keys may repeat, as systemd allows."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def systemd_verify(analyze: str, unit: Path) -> tuple[int, str]:
    """``systemd-analyze verify`` of ``unit``: its exit status and what it said on stderr."""
    done = subprocess.run(
        [analyze, "verify", "--man=no", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=unit.parent,
    )
    return done.returncode, done.stderr.strip()
