"""The docs match the code: every setting is in the settings page's table, the phase table, the
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
from tests.support.docs import page, section

ROOT = Path(__file__).resolve().parents[2]
CYCLE = "concepts/cycle.md"


@pytest.mark.parametrize("name", sorted(Settings.model_fields))
def test_the_settings_page_explains_every_setting(name: str) -> None:
    assert f"| `{name}` | `{ENV_PREFIX}{name.upper()}` |" in page("reference/settings.md")


def test_example_settings_load(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in [v for v in os.environ if v.startswith(ENV_PREFIX)]:
        monkeypatch.delenv(variable)
    settings = load_settings(ROOT / "config" / "playguard.toml")
    assert settings.lock_ttl == 900.0
    assert tuple(settings.phases) == BUILTIN_PHASES, "the example lists every built-in phase"


async def test_example_inventory_loads() -> None:
    inventory = await YamlInventorySource(ROOT / "config" / "inventory.yaml").load()
    assert inventory.marquees


def test_the_phase_table_lists_the_builtin_phases_in_order() -> None:
    rows = re.findall(r"^\| `(\w+)` \|", section(CYCLE, "The phases"), flags=re.MULTILINE)
    assert tuple(rows) == BUILTIN_PHASES


def test_the_cycle_steps_name_the_builtin_phases_in_order() -> None:
    phases_step = section(CYCLE, "What a cycle does").split("2. **Phases**", 1)[1].split("\n3.")[0]
    assert tuple(re.findall(r"`(\w+)`", phases_step)[1:]) == BUILTIN_PHASES
