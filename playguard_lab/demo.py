"""The demo's configuration: settings and an inventory that point the daemon at a running lab."""

from __future__ import annotations

import asyncio
import os
import secrets
import tomllib
from dataclasses import dataclass
from pathlib import Path

from playguard_lab.fleet import Lab
from playguard_lab.postgres import PostgresServer
from playguard_lab.process import free_port
from playguard_lab.shared_host import marquee_entry, registry_entry, write_inventory


def write_demo_config(lab: Lab, directory: Path, *, tick_interval: float = 10.0) -> Path:
    """Settings and an inventory that point the daemon at ``lab``; returns the settings file.

    Each marquee gets one playground of the origin's compose project and one agent chat, so a
    first cycle has real work to do and later ones show the cheap "nothing to do" path. The HTTP
    endpoints listen on a free loopback port, named in the file and in the ``http.serving`` line.
    """
    directory.mkdir(parents=True, exist_ok=True)
    inventory: dict[str, object] = {
        "marquees": [marquee_entry(marquee, marquee.name, directory) for marquee in lab.marquees],
        "registries": [registry_entry(lab, directory)],
        "playspecs": [
            {"name": "web", "repo": lab.git.url, "images": [lab.image], "registry": "lab"}
        ],
        "playgrounds": [
            {
                "name": f"web-{marquee.name}",
                "playspec": "web",
                "marquee": marquee.name,
                "branch": "main",
            }
            for marquee in lab.marquees
        ],
        "agent_chats": [
            {
                "name": f"chat-{marquee.name}",
                "playground": f"web-{marquee.name}",
                "image": lab.image,
                "command": ["sleep", "86400"],
            }
            for marquee in lab.marquees
        ],
    }
    inventory_path = write_inventory(inventory, directory / "inventory.yaml")
    settings_path = directory / "playguard.toml"
    settings_path.write_text(
        f'redis_url = "{lab.redis.url}"\n'
        f'inventory = "{inventory_path}"\n'
        f"tick_interval = {tick_interval}\n"
        "lock_ttl = 120\n"
        "remote_command_timeout = 60\n"
        "docker_api_timeout = 60\n"
        "shutdown_grace = 10\n"
        'compose_command = ["docker-compose"]\n'
        "orphan_grace = 0\n"
        f'http_address = "127.0.0.1:{free_port()}"\n'
    )
    return settings_path


def move_desired_state_to_postgres(server: PostgresServer, settings_path: Path) -> None:
    """Point the demo's settings at ``server``: migrate its ``postgres`` database, import the
    demo inventory written next to the settings, and name a password file (0600), never the
    password itself, in the settings."""
    from playguard_async.desired_state.postgres.connection import PgAddress, connect, password_from  # noqa: PLC0415 - asyncpg
    from playguard_async.desired_state.postgres.schema import migrate  # noqa: PLC0415
    from playguard_async.desired_state.postgres.transfer import import_inventory  # noqa: PLC0415

    async def load() -> None:
        address = PgAddress.parse(server.url)
        connection = await connect(address, password_from(server.password, None), timeout=10)
        try:
            await migrate(connection)
            await import_inventory(connection, settings_path.parent / "inventory.yaml")
        finally:
            await connection.close()

    asyncio.run(load())
    password_file = settings_path.parent / "pg-password"
    password_file.touch(mode=0o600)
    password_file.write_text(server.password + "\n")
    with settings_path.open("a") as settings:
        settings.write(
            f'desired_state = "{server.url}"\ndesired_state_password_file = "{password_file}"\n'
        )


WEB_USER = "admin"
"""The lab web view's user, an admin: every action of the web view is open to it."""


@dataclass(frozen=True)
class WebLogin:
    """How to reach the lab's web view: its address, its user, and the file (0600) holding the
    user's password, made for this lab."""

    url: str
    user: str
    password_file: Path


def add_web_user(settings_path: Path) -> WebLogin:
    """An admin of the web view of the daemon ``settings_path`` configures: a users file and a
    password file (0600 each) beside the settings, the users file named in them. The password
    is made here (random, 24 characters), so no two labs share one; it is shown once by
    ``lab up`` and kept in its file for scripts (the lab's other secrets live beside it)."""
    folder = settings_path.parent
    password = secrets.token_urlsafe(18)
    password_file = folder / "web-password"
    descriptor = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as written:
        written.write(password + "\n")
    from playguard_async.web.users import Role, add_user  # noqa: PLC0415 - argon2, for up only

    users = folder / "web-users"
    add_user(users, WEB_USER, Role.ADMIN, password)
    with settings_path.open("a") as settings:
        settings.write(f'web_credential_file = "{users}"\n')
    address = tomllib.loads(settings_path.read_text())["http_address"]
    return WebLogin(f"http://{address}/", WEB_USER, password_file)
