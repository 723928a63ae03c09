"""The users file: lines good, bad and hostile (huge, binary, CRLF, a plain secret where the hash
belongs), errors that name file, line, field and a bounded value and never a secret, the file
read again when it changes, ``add_user`` writing it whole at mode 0600, and the role table."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import click
import pytest

from playguard_async.kits.rate_limit import RateLimit
from playguard_async.operator.steering_cli import web_add_user
from playguard_async.settings.sections import WEB_ROLES
from playguard_async.web.actions import ACTIONS
from playguard_async.web.users import (
    ROLE_NAMES,
    Role,
    UsersFile,
    UsersFileError,
    add_user,
    parse_users,
    read_users,
)
from tests.support.web_users import CHEAP, write_users

HASH = CHEAP.hash("pw")
PATH = Path("/etc/playguard/users")


@pytest.mark.parametrize(
    ("text", "users"),
    [
        (f"alice operator {HASH}\n", {"alice": Role.OPERATOR}),
        (
            f"alice operator {HASH}\r\nbob viewer {HASH}\r\n",
            {"alice": Role.OPERATOR, "bob": Role.VIEWER},
        ),
        (f"# who may act\n\n  \nalice admin {HASH}", {"alice": Role.ADMIN}),
        (f"  alice\toperator   {HASH}  \n", {"alice": Role.OPERATOR}),
        (f"ops.bot@ci operator {HASH}\n", {"ops.bot@ci": Role.OPERATOR}),
        ("", {}),
    ],
)
def test_good_lines(text: str, users: dict[str, Role]) -> None:
    parsed = parse_users(text, PATH)
    assert {name: user.role for name, user in parsed.items()} == users
    assert all(user.secret_hash == HASH for user in parsed.values())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("s3cret\n", "line 1: not a `name role secret-hash` line, as in the old format"),
        ("\n\ncorrect horse battery\n", "line 3: not a `name role secret-hash` line"),
        (f"# x\nalice operator\nbob viewer {HASH}\n", "line 2: 2 fields, expected 3"),
        (f"alice operator {HASH} extra\nbob viewer {HASH}\n", "line 1: 4 fields"),
        (f"alice root {HASH}\nbob viewer {HASH}\n", "line 1: field role 'root': one of viewer, op"),
        (f"bob viewer {HASH}\nalice Admin {HASH}\n", "line 2: field role 'Admin'"),
        (f"-alice viewer {HASH}\nbob viewer {HASH}\n", "line 1: field name '-alice'"),
        (f"<script> viewer {HASH}\nbob viewer {HASH}\n", "field name '<script>'"),
        (f"al\x00ice viewer {HASH}\nbob viewer {HASH}\n", "field name 'al\\x00ice'"),
        (f"alice viewer {HASH}\nalice admin {HASH}\n", "line 2: field name 'alice': a second line"),
        ("alice viewer $argon2i$v=19$m=8,t=1,p=1$c2FsdHNhbHQ$aGFzaA\n", "not an argon2id hash"),
        (f"alice viewer {HASH}\x07\n", "not an argon2id hash"),
        (
            "x" * 100_000 + f" viewer {HASH}\nbob viewer {HASH}\n",
            "field name 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'...",
        ),
    ],
)
def test_bad_lines_name_file_line_field_and_a_bounded_value(text: str, message: str) -> None:
    with pytest.raises(UsersFileError) as refused:
        parse_users(text, PATH)
    assert str(refused.value).startswith(f"{PATH}: line ")
    assert message in str(refused.value)
    assert len(str(refused.value)) < 400


@pytest.mark.parametrize("secret", ["hunter2", "$argon2id-but-not-really-hunter2", "x" * 600])
def test_a_plain_secret_where_the_hash_belongs_is_never_echoed(secret: str) -> None:
    with pytest.raises(UsersFileError) as refused:
        parse_users(f"alice operator {secret}\n", PATH)
    assert "not an argon2id hash" in str(refused.value)
    assert secret not in str(refused.value)
    assert "add-user alice operator" in str(refused.value)


def test_the_old_format_is_refused_with_the_command_that_replaces_it(tmp_path: Path) -> None:
    old = tmp_path / "credential"
    old.write_text("correct horse battery\n")
    old.chmod(0o600)
    with pytest.raises(UsersFileError) as refused:
        read_users(old)
    assert "correct" not in str(refused.value)
    assert "horse" not in str(refused.value)
    assert f"playguard web add-user NAME ROLE --file {old}" in str(refused.value)


@pytest.mark.parametrize(
    ("content", "mode", "message"),
    [
        (b"\xff\xfe binary\n", 0o600, "not UTF-8 text (byte 0xff at offset 0)"),
        (b"alice viewer x\n", 0o644, "mode 0644 lets group or others read or write it"),
        (b"a" * (2 << 20), 0o600, "more than the limit"),
    ],
)
def test_binary_open_and_huge_files_are_refused(
    tmp_path: Path, content: bytes, mode: int, message: str
) -> None:
    path = tmp_path / "users"
    path.write_bytes(content)
    path.chmod(mode)
    with pytest.raises(UsersFileError, match=re.escape(message)):
        read_users(path)


def test_a_symbolic_link_is_refused(tmp_path: Path) -> None:
    real = write_users(tmp_path / "real", {"alice": ("viewer", "pw")})
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(UsersFileError, match="a symbolic link"):
        read_users(tmp_path / "link")


def test_the_file_is_read_again_when_it_changes_and_a_bad_one_admits_nobody(
    tmp_path: Path,
) -> None:
    path = write_users(tmp_path / "users", {"alice": ("operator", "a"), "bob": ("viewer", "b")})
    users = UsersFile(path)
    assert users.user("bob") is not None
    write_users(path, {"alice": ("admin", "a")})
    assert users.user("bob") is None
    alice = users.user("alice")
    assert alice is not None
    assert alice.role is Role.ADMIN
    path.write_text("s3cret\n")
    assert users.current() == {}
    path.unlink()
    assert users.current() == {}
    write_users(path, {"bob": ("viewer", "b")})
    assert set(users.current()) == {"bob"}


def test_add_user_writes_mode_0600_replaces_a_line_and_keeps_the_others(tmp_path: Path) -> None:
    path = tmp_path / "users"
    assert add_user(path, "alice", Role.OPERATOR, "pw1") == f"added alice (operator) to {path}"
    assert add_user(path, "bob", Role.VIEWER, "pw2").startswith("added bob")
    bob_line = path.read_text().splitlines()[1]
    # A password no base64 hash can hold ("!" and " " are not in its alphabet): a short one
    # such as "pw3" stands in a random salt now and then.
    assert add_user(path, "alice", Role.ADMIN, "pass word three!") == (
        f"replaced alice's line in {path} (now admin)"
    )
    lines = path.read_text().splitlines()
    assert [line.split()[:2] for line in lines] == [["alice", "admin"], ["bob", "viewer"]]
    assert lines[1] == bob_line
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert "pass word three!" not in path.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["users"]  # no temporary file left


def test_add_user_replaces_the_old_format_and_refuses_a_bad_file(tmp_path: Path) -> None:
    path = tmp_path / "users"
    path.write_text("shared-secret\n")
    path.chmod(0o600)
    assert "replaced the old shared secret" in add_user(path, "alice", Role.ADMIN, "pw")
    assert "shared-secret" not in path.read_text()
    bad = f"alice root x\nbob viewer {HASH}\n"
    path.write_text(bad)
    with pytest.raises(UsersFileError, match="field role 'root'"):
        add_user(path, "bob", Role.VIEWER, "pw")
    assert path.read_text() == bad
    with pytest.raises(UsersFileError, match="user name"):
        add_user(tmp_path / "other", "bad name", Role.VIEWER, "pw")


def test_role_table() -> None:
    assert ROLE_NAMES == WEB_ROLES == tuple(role.label for role in Role)
    [role_argument] = [param for param in web_add_user.params if param.name == "role"]
    assert isinstance(role_argument.type, click.Choice)
    assert tuple(role_argument.type.choices) == WEB_ROLES
    allowed = {
        role.label: sorted(action for action, least in ACTIONS.items() if role >= least)
        for role in Role
    }
    assert allowed == {
        "viewer": [],
        "operator": sorted(set(ACTIONS) - {"unlock"}),
        "admin": sorted(ACTIONS),
    }


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_rate_limit_slides_and_tells_how_long_to_wait() -> None:
    clock = Clock()
    limit = RateLimit(3, 60.0, keys=2, clock=clock)
    assert [limit.take("alice") for _ in range(3)] == [None, None, None]
    assert limit.take("alice") == 60
    clock.now += 59.5
    assert limit.take("alice") == 1
    assert limit.take("bob") is None  # another key counts apart
    clock.now += 0.5
    assert limit.take("alice") is None  # the first three left the window
    assert limit.retry_after("alice") is None
    limit.note("alice")
    limit.note("alice")
    assert limit.retry_after("alice") == 60


def test_rate_limit_memory_is_bounded_by_its_keys() -> None:
    limit = RateLimit(1, 60.0, keys=3, clock=Clock())
    for index in range(1000):
        limit.take(f"client-{index}")
    assert len(limit._seen) == 3
    assert limit.take("client-999") == 60
    assert limit.take("client-0") is None  # forgotten: starts afresh
