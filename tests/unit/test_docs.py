"""The docs match the code: every setting is in the README's reference, and the example loads."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from playguard_async.inventory import YamlInventorySource
from playguard_async.settings import ENV_PREFIX, Settings, load_settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(Settings.model_fields))
def test_readme_documents_every_setting(name: str) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"| `{name}` | `{ENV_PREFIX}{name.upper()}` |" in readme


def test_example_settings_load(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in [v for v in os.environ if v.startswith(ENV_PREFIX)]:
        monkeypatch.delenv(variable)
    settings = load_settings(ROOT / "config" / "playguard.toml")
    assert settings.lock_ttl == 900.0


async def test_example_inventory_loads() -> None:
    inventory = await YamlInventorySource(ROOT / "config" / "inventory.yaml").load()
    assert inventory.marquees
