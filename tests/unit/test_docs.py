"""The docs match the code: every setting is in the README's reference, the phase table, the
cycle's steps and the example settings list the built-in phases in their order (``BUILTIN_PHASES``,
the one line a new phase is added to), and the examples load."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from playguard_async.desired_state.yaml_source import YamlInventorySource
from playguard_async.phases.protocol import BUILTIN_PHASES
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
    assert tuple(settings.phases) == BUILTIN_PHASES, "the example lists every built-in phase"


async def test_example_inventory_loads() -> None:
    inventory = await YamlInventorySource(ROOT / "config" / "inventory.yaml").load()
    assert inventory.marquees


def readme_section(title: str) -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return readme.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_readme_phase_table_lists_the_builtin_phases_in_order() -> None:
    rows = re.findall(r"^\| `(\w+)` \|", readme_section("The phases"), flags=re.MULTILINE)
    assert tuple(rows) == BUILTIN_PHASES


def test_readme_cycle_steps_name_the_builtin_phases_in_order() -> None:
    phases_step = readme_section("What a cycle does").split("2. **Phases**", 1)[1].split("\n3.")[0]
    assert tuple(re.findall(r"`(\w+)`", phases_step)[1:]) == BUILTIN_PHASES
