"""Settings: defaults, precedence of file and environment, errors naming field, value, source."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from playguard_async.settings import DEFAULT_PHASES, SettingsError, load_settings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("PLAYGUARD_"):
            monkeypatch.delenv(name)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "playguard.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_match_the_documented_design() -> None:
    settings = load_settings()
    assert settings.tick_interval == 60.0
    assert settings.lock_ttl == 900.0
    assert settings.redis_socket_timeout == 5.0
    assert settings.phases == DEFAULT_PHASES
    assert settings.event_loop == "uvloop"
    assert ":" in settings.replica_id


def test_environment_wins_over_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = write(tmp_path, "tick_interval = 5\nlock_ttl = 30\n")
    monkeypatch.setenv("PLAYGUARD_LOCK_TTL", "40")
    settings = load_settings(config)
    assert (settings.tick_interval, settings.lock_ttl) == (5.0, 40.0)


def test_phases_come_from_the_environment_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLAYGUARD_PHASES", '["sync_git", "pull_images"]')
    assert load_settings().phases == ("sync_git", "pull_images")


def test_bad_file_value_names_field_value_and_file(tmp_path: Path) -> None:
    config = write(tmp_path, "tick_interval = -3\n")
    with pytest.raises(SettingsError) as error:
        load_settings(config)
    assert f"{config}: tick_interval = -3" in str(error.value)


def test_bad_environment_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLAYGUARD_LOG_FORMAT", "xml")
    with pytest.raises(SettingsError, match="environment PLAYGUARD_LOG_FORMAT: log_format = 'xml'"):
        load_settings()


def test_unknown_setting_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="tick_intervall"):
        load_settings(write(tmp_path, "tick_intervall = 5\n"))


def test_redis_password_never_appears_in_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLAYGUARD_REDIS_URL", "http://user:hunter2@localhost:6379")
    with pytest.raises(SettingsError) as error:
        load_settings()
    assert "hunter2" not in str(error.value)
    assert "redis_url" in str(error.value)


def test_redis_url_is_masked_for_display() -> None:
    settings = load_settings(None, redis_url="rediss://app:s3cret@redis.example:6380/2")
    assert settings.redis_url_for_display() == "rediss://app:***@redis.example:6380/2"
    assert "s3cret" not in repr(settings)


def test_renewal_must_fit_in_the_lease() -> None:
    with pytest.raises(SettingsError, match="lock_ttl"):
        load_settings(None, lock_ttl=1.0, redis_socket_timeout=0.5)


def test_repeated_phase_is_an_error() -> None:
    with pytest.raises(SettingsError, match="phase listed twice: sync_git"):
        load_settings(None, phases=("sync_git", "sync_git"))


def test_missing_or_broken_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="settings file not found"):
        load_settings(tmp_path / "absent.toml")
    with pytest.raises(SettingsError, match="not valid TOML"):
        load_settings(write(tmp_path, "tick_interval = = 5\n"))


@pytest.mark.parametrize(
    ("address", "bind"),
    [
        ("", None),
        ("127.0.0.1:9464", ("127.0.0.1", 9464)),
        ("[::1]:0", ("::1", 0)),
        ("0.0.0.0:9464", ("0.0.0.0", 9464)),
    ],
)
def test_http_address_is_host_and_port_or_empty_for_off(
    address: str, bind: tuple[str, int] | None
) -> None:
    assert load_settings(http_address=address).http_bind() == bind


@pytest.mark.parametrize("address", ["9464", ":9464", "127.0.0.1", "127.0.0.1:99999", "h:1/x"])
def test_malformed_http_address_names_the_field_and_value(address: str) -> None:
    with pytest.raises(SettingsError, match=f"http_address = '{address}'.*HOST:PORT"):
        load_settings(http_address=address)
