"""The names a user sees in settings do not move: every field, its ``PLAYGUARD_*`` variable (which
is also the settings file's key, lower-cased), its type, its default, its bounds and its
description are those of ``tests/unit/data/settings_fields.json``.

That table was written from main before the settings were split into sections; regenerate it
only for a change a user is meant to see (``python -m tests.unit.test_settings_names > FILE``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic_core import PydanticUndefined

from playguard_async.settings import ENV_PREFIX, Settings, load_settings

TABLE = Path(__file__).parent / "data" / "settings_fields.json"


def settings_table() -> dict[str, dict[str, Any]]:
    """Each field's user-visible facts, as plain JSON values."""
    table = {}
    for name, info in Settings.model_fields.items():
        default = info.default
        table[name] = {
            "environment": ENV_PREFIX + name.upper(),
            "annotation": repr(info.annotation),
            "default": "<computed>" if default is PydanticUndefined else repr(default),
            "constraints": sorted(repr(item) for item in info.metadata),
            "description": info.description,
            "shown_in_repr": info.repr,
            "alias": repr(info.validation_alias or info.alias),
        }
    return table


def test_every_setting_keeps_its_name_type_default_and_description() -> None:
    expected = json.loads(TABLE.read_text(encoding="utf-8"))
    actual = settings_table()
    assert sorted(actual) == sorted(expected), "a setting was added, removed or renamed"
    for name, facts in expected.items():
        assert actual[name] == facts, name


def test_the_environment_prefix_and_the_file_keys_stay() -> None:
    assert Settings.model_config.get("env_prefix") == "PLAYGUARD_"
    assert Settings.model_config.get("extra") == "forbid", "a misspelt file key is an error"
    assert not Settings.model_config.get("case_sensitive", False)


def test_every_setting_is_read_from_its_environment_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in list(os.environ):
        if name.startswith(ENV_PREFIX):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PLAYGUARD_TICK_INTERVAL", "7")
    monkeypatch.setenv("PLAYGUARD_WEB_STREAMS_TOTAL", "9")
    monkeypatch.setenv("PLAYGUARD_SSH_POOL_SIZE", "3")
    monkeypatch.setenv("PLAYGUARD_METRICS_MARQUEES_SHOWN", "0")
    monkeypatch.setenv("PLAYGUARD_OTLP_ENDPOINT", "http://127.0.0.1:4318/v1/traces")
    settings = load_settings()
    read = (
        settings.tick_interval,
        settings.web_streams_total,
        settings.ssh_pool_size,
        settings.metrics_marquees_shown,
        settings.otlp_endpoint,
    )
    assert read == (7.0, 9, 3, 0, "http://127.0.0.1:4318/v1/traces")


if __name__ == "__main__":
    print(json.dumps(settings_table(), indent=2, sort_keys=True))
