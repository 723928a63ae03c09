"""Users files for the web view's tests, hashed with argon2id at its cheapest cost (the hash
carries its parameters, so the daemon verifies it as any other): a test spends no second on it."""

from __future__ import annotations

import base64
from pathlib import Path

from argon2 import PasswordHasher

from playguard_async.web.auth import TrustedProxy, WebAuth
from playguard_async.web.users import UsersFile

CHEAP = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)


def write_users(path: Path, users: dict[str, tuple[str, str]]) -> Path:
    """``path`` holding ``users`` (name -> (role, password)), mode 0600."""
    lines = [f"{name} {role} {CHEAP.hash(password)}" for name, (role, password) in users.items()]
    path.write_text("".join(f"{line}\n" for line in lines))
    path.chmod(0o600)
    return path


def auth_of(
    path: Path,
    users: dict[str, tuple[str, str]],
    *,
    proxy: TrustedProxy | None = None,
) -> WebAuth:
    return WebAuth(UsersFile(write_users(path, users)), proxy=proxy)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
