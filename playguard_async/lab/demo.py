"""The demo's configuration: settings and an inventory that point the daemon at a running lab."""

from __future__ import annotations

import json
from pathlib import Path

from playguard_async.lab.fleet import Lab
from playguard_async.lab.process import free_port


def write_demo_config(lab: Lab, directory: Path, *, tick_interval: float = 10.0) -> Path:
    """Settings and an inventory that point the daemon at ``lab``; returns the settings file.

    Each marquee gets one playground of the origin's compose project and one agent chat, so a
    first cycle has real work to do and later ones show the cheap "nothing to do" path. The HTTP
    endpoints listen on a free loopback port, named in the file and in the ``http.serving`` line.
    """
    directory.mkdir(parents=True, exist_ok=True)
    password_file = directory / "registry-password"
    password_file.write_text(lab.registry.password)
    password_file.chmod(0o600)
    inventory: dict[str, object] = {
        "marquees": [
            {
                "name": marquee.name,
                "host": marquee.ssh.host,
                "port": marquee.ssh.port,
                "user": marquee.ssh.user,
                "identity_file": str(marquee.ssh.client_key),
                "known_hosts": str(marquee.ssh.known_hosts),
                "docker_socket": str(marquee.docker.socket),
                "workdir": str(directory / f"{marquee.name}-workdir"),
                "state_dir": str(directory / f"{marquee.name}-state"),
            }
            for marquee in lab.marquees
        ],
        "registries": [
            {
                "name": "lab",
                "server": lab.registry.address,
                "username": lab.registry.username,
                "password_file": str(password_file),
            }
        ],
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
    inventory_path = directory / "inventory.yaml"
    inventory_path.write_text(json.dumps(inventory, indent=2))  # JSON is YAML
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
