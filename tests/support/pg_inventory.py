"""Inventories for the PostgreSQL tests: every list and every optional column used, written as
a YAML file so the YAML source (and its path resolution) is what the database is compared with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from playguard_async.desired_state.model import Inventory
from playguard_async.desired_state.yaml_source import YamlInventorySource

STEERING: dict[int, dict[str, Any]] = {
    1: {"windows": []},
    2: {
        "mode": "detect",
        "windows": [
            {"kind": "allow", "cron": "0 2 * * 6", "duration": "PT2H", "timezone": "Europe/Berlin"},
            {"kind": "deny", "cron": "0 3 1 * *", "duration": 600, "timezone": "UTC"},
        ],
    },
}
"""A Marquee's steering columns by index: an empty windows list (none, not the fleet's) and
a mode with windows, so both jsonb and NULL travel through import, snapshot and export."""


def marquee_rows(*names: str) -> list[dict[str, Any]]:
    """A ``marquees`` row for each of ``names`` as the PostgreSQL source reads them, all valid."""
    row: dict[str, Any] = {
        "host": "127.0.0.1", "port": 22, "user": "u", "identity_file": "/k/id",
        "known_hosts": "/k/kh", "docker_socket": "/run/d.sock", "workdir": "/srv/p",
        "state_dir": None, "launchable": True, "mode": "apply", "windows": None,
    }  # fmt: skip
    return [{"name": name, **row} for name in names]


def full_document(
    marquees: int = 3, *, command: list[str] | None = None, steered: bool = True
) -> dict[str, Any]:
    """An inventory using every column: defaults overridden, nulls, arrays, a timestamp; and,
    unless ``steered`` is False (a schema from before migration 0005), ``STEERING``."""
    return {
        "marquees": [
            {
                "name": f"edge-{index}",
                "host": "127.0.0.1" if index % 2 else "edge.example.com",
                "port": 2200 + index,
                "user": "playguard",
                "identity_file": "keys/id",
                "known_hosts": "/etc/playguard/known_hosts",
                "docker_socket": "/run/docker.sock",
                "workdir": f"/srv/pg-{index}",
                "state_dir": "~/state/pg" if index % 2 else None,
                "launchable": index != 2,
                **(STEERING.get(index, {}) if steered else {}),
            }
            for index in range(marquees)
        ],
        "registries": [
            {"name": "lab", "server": "127.0.0.1:5000", "username": "u", "password_env": "REG_PW"},
            {"name": "corp", "server": "[::1]:5001", "username": "v", "password_file": "pw"},
        ],
        "playspecs": [
            {
                "name": "shop",
                "repo": "https://git.example.com/shop.git",
                "images": ["shop:1"],
                "registry": "lab",
            },
            {"name": "blog", "repo": "git@example.com:blog.git", "compose_file": "deploy/c.yaml"},
        ],
        "playgrounds": [
            {
                "name": f"shop-{index}-{slot}",
                "playspec": "shop" if slot else "blog",
                "marquee": f"edge-{index}",
                "branch": f"feature/x-{slot}",
                "state": "stopped" if slot == 2 else "running",
                "expires_at": "2030-01-02T03:04:05+02:00" if slot == 1 else None,
                "stop_when_branch_gone": slot == 1,
            }
            for index in range(marquees)
            for slot in range(3)
        ],
        "agent_chats": [
            {
                "name": f"chat-{index}",
                "playground": f"shop-{index}-1",
                "image": "127.0.0.1:5000/agent:2",
                "command": command if command is not None else ["agent", "--chat", str(index)],
                "state": "closed" if index == 1 else "active",
            }
            for index in range(marquees)
        ],
    }


def write_inventory(directory: Path, document: dict[str, Any], name: str = "inv.yaml") -> Path:
    path = directory / name
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


async def load_yaml(path: Path) -> Inventory:
    return await YamlInventorySource(path).load()


def by_name(inventory: Inventory) -> Inventory:
    """The same inventory with every list in name order: the database keeps no other order."""
    return inventory.model_copy(
        update={
            field: sorted(getattr(inventory, field), key=lambda item: item.name)
            for field in type(inventory).model_fields
        }
    )
