"""The ``desired_state`` setting: 'yaml' or a PostgreSQL URL without a password, one-line errors
that never show a password."""

from __future__ import annotations

import pytest

from playguard_async.desired_state.postgres.connection import PgAddress, redacted
from playguard_async.settings import SettingsError, load_settings

SECRET = "Zq7-pg-s3cr3t"


def test_the_yaml_file_stays_the_default() -> None:
    assert load_settings(None).desired_state == "yaml"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://app@db:6543/fleet", PgAddress("app", "db", 6543, "fleet")),
        ("postgres://app@127.0.0.1/fleet", PgAddress("app", "127.0.0.1", 5432, "fleet")),
        ("postgresql://a%40b@[::1]:5/f%20g", PgAddress("a@b", "::1", 5, "f g")),
    ],
)
def test_a_postgresql_url_is_taken_apart(url: str, expected: PgAddress) -> None:
    assert load_settings(None, desired_state=url).desired_state == url
    assert PgAddress.parse(url) == expected


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        (f"postgresql://app:{SECRET}@db/fleet", "must not carry a password"),
        ("postgresql://db/fleet", "must name a user, a host and a database"),
        ("postgresql://app@db/", "must name a user, a host and a database"),
        ("postgresql://app@db/a/b", "must name a user, a host and a database"),
        ("postgresql://app@db:99999/f", "bad port"),
        ("postgresql://app@db/f?passfile=/etc/shadow", "must not carry ?parameters"),
        ("mysql://app@db/f", "must be 'yaml' or a postgresql://"),
        ("YAML", "must be 'yaml' or a postgresql://"),
    ],
)
def test_a_bad_desired_state_is_one_line_without_the_password(url: str, reason: str) -> None:
    with pytest.raises(SettingsError) as error:
        load_settings(None, desired_state=url)
    [problem] = str(error.value).splitlines()  # one problem: one line
    assert "desired_state = " in problem
    assert reason in problem
    assert SECRET not in str(error.value)


def test_the_password_setting_never_shows_in_an_error_or_repr() -> None:
    settings = load_settings(None, desired_state_password=SECRET)
    assert SECRET not in repr(settings)
    with pytest.raises(SettingsError) as error:
        load_settings(None, desired_state_password=SECRET, desired_state_timeout=-1)
    assert SECRET not in str(error.value)


def test_a_server_message_echoing_the_password_is_masked_and_one_line() -> None:
    assert redacted(f"auth failed for\n  {SECRET}\r\n", SECRET) == "auth failed for ***"


def test_playguards_schema_defaults_to_its_own_name() -> None:
    assert load_settings(None).desired_state_schema == "playguard"
    assert load_settings(None, desired_state_schema="fleet_2").desired_state_schema == "fleet_2"


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ("public", "must be a schema of playguard's own, not 'public'"),
        ("information_schema", "must be a schema of playguard's own"),
        ("pg_catalog", "must be a schema of playguard's own"),
        ("Playguard", "a-z, 0-9 and '_'"),
        ('play"guard', "a-z, 0-9 and '_'"),
        ("play guard", "a-z, 0-9 and '_'"),
        ("x; DROP SCHEMA public", "a-z, 0-9 and '_'"),
        ("1fleet", "not starting with a digit"),
        ("", "1-63 characters"),
        ("a" * 64, "1-63 characters"),
        ("fleet\n", "a-z, 0-9 and '_'"),
    ],
)
def test_a_schema_name_that_is_not_plainly_ours_is_refused_in_one_line(
    schema: str, reason: str
) -> None:
    with pytest.raises(SettingsError) as error:
        load_settings(None, desired_state_schema=schema)
    [problem] = str(error.value).splitlines()
    assert "desired_state_schema = " in problem
    assert reason in problem
