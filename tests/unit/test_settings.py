"""Settings: defaults, precedence of file and environment, errors naming field, value, source."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from playguard_async.settings import SettingsError, load_settings
from playguard_async.settings.addresses import mask_url
from playguard_async.settings.sections import DEFAULT_PHASES


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
    config = write(
        tmp_path,
        "tick_interval = 5\nlock_ttl = 30\nremote_command_timeout = 20\ndocker_api_timeout = 20\n",
    )
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
        load_settings(
            None,
            lock_ttl=1.0,
            redis_socket_timeout=0.5,
            remote_command_timeout=0.5,
            docker_api_timeout=0.5,
        )


def test_repeated_phase_is_an_error() -> None:
    with pytest.raises(SettingsError, match="phase listed twice: sync_git"):
        load_settings(None, phases=("sync_git", "sync_git"))


def test_missing_or_broken_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"absent\.toml: cannot read settings file: No such"):
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
    assert load_settings(http_address=address, web_view=False).http_bind() == bind


@pytest.mark.parametrize("address", ["9464", ":9464", "127.0.0.1", "127.0.0.1:99999", "h:1/x"])
def test_malformed_http_address_names_the_field_and_value(address: str) -> None:
    with pytest.raises(SettingsError, match=f"http_address = '{address}'.*HOST:PORT"):
        load_settings(http_address=address)


DURATIONS = [
    "redis_socket_timeout",
    "redis_connect_timeout",
    "redis_keepalive",
    "tick_interval",
    "lock_ttl",
    "shutdown_grace",
    "inventory_read_timeout",
    "desired_state_probe_interval",
    "ssh_connect_timeout",
    "ssh_keepalive_interval",
    "remote_command_timeout",
    "docker_api_timeout",
    "stuck_after",
    "orphan_grace",
]


@pytest.mark.parametrize("field", DURATIONS)
@pytest.mark.parametrize("text", ["inf", "-inf", "nan", "1e300", "604801", "-1", "abc"])
def test_every_duration_from_the_environment_is_bounded_and_blamed_on_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, field: str, text: str
) -> None:
    # The same field in the file is fine: the environment's value is the bad one.
    config = write(tmp_path, f"{field} = 1.0\n")
    monkeypatch.setenv(f"PLAYGUARD_{field.upper()}", text)
    with pytest.raises(SettingsError) as error:
        load_settings(config)
    [line] = [line for line in str(error.value).splitlines() if field in line]
    problem = line.removeprefix("invalid settings: ").strip()
    assert problem.startswith(f"environment PLAYGUARD_{field.upper()}: {field} = '{text}'")
    assert str(config) not in line


def test_environment_names_are_matched_without_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("playguard_tick_interval", "nan")
    with pytest.raises(SettingsError, match="environment playguard_tick_interval: tick_interval"):
        load_settings()


@pytest.mark.parametrize("field", ["remote_command_timeout", "docker_api_timeout"])
@pytest.mark.parametrize("seconds", [30.0, 31.0, 600.0])
def test_a_remote_call_that_could_outlast_the_lease_is_refused_naming_both(
    field: str, seconds: float
) -> None:
    with pytest.raises(SettingsError) as error:
        load_settings(
            None,
            lock_ttl=30.0,
            **{"remote_command_timeout": 10.0, "docker_api_timeout": 10.0} | {field: seconds},
        )
    assert f"{field} ({seconds}) must be less than lock_ttl (30.0)" in str(error.value)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("redis://h:abc/0", "port must be a number"),
        ("redis://h:99999/0", "port must be a number"),
        ("redis://h:0/0", "port must be a number"),
        ("redis://h:-1/0", "port must be a number"),
        ("redis://h/0?socket_timeout=9", "no query"),
        ("redis://h/zero", "DB a number"),
        ("http://h:6379", "must be redis://"),
        ("redis:///0", "must be redis://"),
        ("redis://[::1/0", "port must be a number"),
    ],
)
def test_malformed_redis_url_is_one_line_naming_the_url(url: str, reason: str) -> None:
    with pytest.raises(SettingsError) as error:
        load_settings(None, redis_url=url)
    [problem] = str(error.value).removeprefix("invalid settings: ").splitlines()
    assert "redis_url = " in problem
    assert reason in problem


SECRET = "Zq7-s3cr3t"


@pytest.mark.parametrize("special", ["#", "/", "?", "@", "#/?@", "%", "[", "]", " "])
@pytest.mark.parametrize(
    "template",
    [
        "redis://app:{pw}@redis.example:6380/2",
        "rediss://:{pw}@h",
        "redis://{pw}@h:1",
        "redis://app:{pw}@h:notaport",
        "redis:/app:{pw}@h",
        "app:{pw}@h",
    ],
)
def test_a_password_never_shows_in_a_masked_url_or_an_error(template: str, special: str) -> None:
    for password in (f"{special}{SECRET}", f"{SECRET}{special}", f"a{special}{SECRET}"):
        url = template.format(pw=password)
        assert SECRET not in mask_url(url)
        try:
            settings = load_settings(None, redis_url=url)
        except SettingsError as error:
            said = str(error)
        else:
            said = f"{settings.redis_url_for_display()} {settings!r}"
        assert SECRET not in said


@given(
    st.text(alphabet=st.characters(exclude_characters=":@"), max_size=20),
    st.text(min_size=1, max_size=40),
)
def test_mask_url_hides_any_password_however_written(user: str, password: str) -> None:
    url = f"redis://{user}:{password}@host:6379/0"
    assert mask_url(url) == f"redis://{user}:***@host:6379/0"


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("PLAYGUARD_PHASES", "[", "not JSON"),
        ("PLAYGUARD_PHASES", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ("PLAYGUARD_COMPOSE_COMMAND", '["docker",', "not JSON"),
        ("PLAYGUARD_PHASES", '{"a": 1}', "phases"),
    ],
)
def test_undecodable_environment_value_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, said: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as error:
        load_settings()
    message = str(error.value)
    assert f"environment {name}" in message
    assert said in message
    assert len(message) < 600


@pytest.mark.parametrize("depth", [10, 50, 500, 100_000])
@pytest.mark.parametrize("field", ["phases", "compose_command", "lock_ttl", "unknown"])
def test_deeply_nested_file_value_is_one_line_naming_file_and_field(
    tmp_path: Path, depth: int, field: str
) -> None:
    config = write(tmp_path, f"{field} = {'[' * depth}{']' * depth}\n")
    with pytest.raises(SettingsError) as error:
        load_settings(config)
    message = str(error.value)
    assert message.startswith(f"{config}: ")
    assert field in message or "nested too deeply" in message
    assert len(message.splitlines()) == 1
    assert len(message) < 300


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda path: path.write_bytes(b"tick_interval = '\xff\xfe'\n"), id="not-utf8"),
        pytest.param(lambda path: path.mkdir(), id="directory"),
        pytest.param(os.mkfifo, id="fifo"),
        pytest.param(lambda path: path.symlink_to("/dev/zero"), id="dev-zero"),
        pytest.param(lambda path: path.write_bytes(b"#" * (2 << 20)), id="huge"),
    ],
)
def test_unreadable_settings_file_is_one_line_naming_it(tmp_path: Path, make: Any) -> None:
    config = tmp_path / "playguard.toml"
    make(config)
    with pytest.raises(SettingsError) as error:
        load_settings(config)
    assert str(config) in str(error.value)
    assert len(str(error.value).splitlines()) == 1


@given(st.dictionaries(st.sampled_from([*DURATIONS, "phases", "redis_url"]), st.text(max_size=40)))
def test_any_environment_text_ends_in_settings_or_one_settings_error(
    values: dict[str, str],
) -> None:
    assume(all("\x00" not in text for text in values.values()))
    with pytest.MonkeyPatch.context() as patch:
        for field, text in values.items():
            patch.setenv(f"PLAYGUARD_{field.upper()}", text)
        try:
            load_settings()
        except SettingsError as error:
            text = str(error).removeprefix("invalid settings:")
            for problem in filter(None, (line.strip() for line in text.splitlines())):
                assert problem.startswith("environment PLAYGUARD_") or "lock_ttl" in problem


def test_replica_wait_must_fit_in_one_call_only_when_replicas_are_awaited() -> None:
    assert load_settings(None, redis_socket_timeout=0.5).lock_min_replicas == 0
    with pytest.raises(SettingsError, match=r"lock_replica_timeout \(0.5\) must be less than half"):
        load_settings(None, redis_socket_timeout=1.0, lock_min_replicas=1)


def test_the_fleets_default_rollout_is_none_a_toml_table_or_json_in_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert load_settings().rollout is None
    config = write(tmp_path, '[rollout]\nwaves = [1, "10%", "100%"]\nbake = 60\n')
    from_file = load_settings(config).rollout
    assert from_file is not None
    assert (from_file.waves, from_file.bake, from_file.max_failures) == ([1, "10%", "100%"], 60, 0)
    monkeypatch.setenv("PLAYGUARD_ROLLOUT", '{"waves": ["50%"], "max_failures": 2}')
    from_environment = load_settings(config).rollout
    assert from_environment is not None
    assert (from_environment.waves, from_environment.max_failures) == (["50%"], 2)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ('{"waves": [true]}', "rollout.waves.0 = True: a wave is a number of Marquees"),
        ('{"waves": ["0%"]}', "rollout.waves.0 = '0%'"),
        ('{"waves": [1], "bake": -1}', "rollout.bake = -1"),
        ('{"waves": [1], "speed": 2}', "rollout.speed: Extra inputs are not permitted"),
        ('{"waves": []}', "rollout.waves = []"),
        ('"10%"', "rollout = '10%'"),
    ],
)
def test_a_bad_default_rollout_in_the_environment_names_the_variable_and_the_field(
    monkeypatch: pytest.MonkeyPatch, value: str, shown: str
) -> None:
    monkeypatch.setenv("PLAYGUARD_ROLLOUT", value)
    with pytest.raises(SettingsError) as error:
        load_settings()
    assert f"environment PLAYGUARD_ROLLOUT: {shown}" in str(error.value)
