"""``playguard web add-user`` as an operator runs it (the real command, the password on standard
input): a password shorter than ``web_password_min_length`` or blank is refused, a one-line users
file with a mistyped role is refused rather than taken for the old format and replaced, and a file
in a directory that does not exist is one line, never a traceback; nothing is written then."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.daemon import PLAYGUARD, REPO_ROOT
from tests.support.web_users import CHEAP

GOOD = "twelve chars"


def add_user(users: Path, password: str, *extra: str, role: str = "viewer") -> tuple[int, str]:
    """Exit status and what the command printed (both streams)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PLAYGUARD_")}
    env["PYTHONPATH"] = str(REPO_ROOT)  # this checkout's code, whatever the venv installed
    done = subprocess.run(
        [str(PLAYGUARD), "web", "add-user", "ada", role, "--file", str(users), *extra],
        input=password + "\n",
        capture_output=True,
        text=True,
        cwd=users.parent if users.parent.is_dir() else None,
        env=env,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("password", "extra", "says"),
    [
        ("", (), "an empty or blank password"),
        (" ", (), "an empty or blank password"),
        (" " * 20, (), "an empty or blank password"),
        ("elevenchars", (), "a password of 11 characters: at least 12"),
        ("short", (), "a password of 5 characters: at least 12"),
    ],
)
def test_a_short_or_blank_password_is_refused_and_nothing_written(
    tmp_path: Path, password: str, extra: tuple[str, ...], says: str
) -> None:
    users = tmp_path / "users"
    status, said = add_user(users, password, *extra)
    assert status == 1
    assert says in said
    assert "Traceback" not in said
    assert not users.exists()


def test_the_minimum_length_is_a_setting(tmp_path: Path) -> None:
    config = tmp_path / "playguard.toml"
    config.write_text("web_password_min_length = 20\n")
    users = tmp_path / "users"
    status, said = add_user(users, GOOD, "--config", str(config))
    assert (status, "a password of 12 characters: at least 20" in said) == (1, True)
    assert add_user(users, GOOD)[0] == 0
    assert users.read_text().startswith("ada viewer $argon2id$")


def test_a_one_line_users_file_with_a_mistyped_role_is_refused_not_replaced(
    tmp_path: Path,
) -> None:
    users = tmp_path / "users"
    line = f"bob admn {CHEAP.hash('bobs password')}\n"
    users.write_text(line)
    users.chmod(0o600)
    status, said = add_user(users, GOOD)
    assert status != 0
    assert "field role 'admn'" in said
    assert "old" not in said
    assert users.read_text() == line


def test_a_file_in_a_missing_directory_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    users = tmp_path / "missing" / "users"
    status, said = add_user(users, GOOD)
    assert status != 0
    assert "Traceback" not in said
    assert f"its directory {users.parent} does not exist" in said
    assert len(said.strip().splitlines()) == 1
    assert not users.parent.exists()
