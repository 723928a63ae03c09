"""Every knob of the daemon in one typed object: its default, its environment name, its check.

Settings come from a TOML file (``playguard run --config FILE``) and ``PLAYGUARD_*`` environment
variables; the environment wins, so a container or a systemd drop-in can override one value without
editing the file. A bad value stops start-up with one line naming the field, the value and where it
came from; secrets are ``SecretStr`` and never appear in a log line or an error.

The fields live by concern in ``sections.py`` (Redis, lease, scheduling, desired state...), each
section with the checks on its own fields; ``Settings`` here is all of them, flat, with the checks
that span sections. ``addresses.py`` reads and masks the addresses settings hold.
"""

from __future__ import annotations

import os
import re
import reprlib
import tomllib
import typing
from pathlib import Path
from typing import Any, ClassVar

import pydantic_settings
from pydantic import SecretStr, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from playguard_async.kits.capacity import cycle_slots
from playguard_async.kits.files import FileRefused, read_text_limited
from playguard_async.settings.addresses import mask_url
from playguard_async.settings.sections import (
    ContainerSettings,
    CycleSettings,
    DesiredStateSettings,
    HttpSettings,
    LeaseSettings,
    LogSettings,
    NotificationSettings,
    RecordSettings,
    RedisSettings,
    RemoteSettings,
    SchedulingSettings,
)

ENV_PREFIX = "PLAYGUARD_"

SETTINGS_FILE_LIMIT = 1 << 20
"""Bytes a settings file may have; it is a few hundred in practice."""

MAX_NESTING = 8
"""Levels of lists or tables a settings value may nest; the deepest setting needs one."""


class SettingsError(ValueError):
    """Settings that cannot be used; the message names field, value and source."""


class Settings(
    BaseSettings,
    LogSettings,
    NotificationSettings,
    HttpSettings,
    RecordSettings,
    ContainerSettings,
    RemoteSettings,
    CycleSettings,
    DesiredStateSettings,
    SchedulingSettings,
    LeaseSettings,
    RedisSettings,
):
    """The daemon's settings: every section's fields side by side, under their own flat names.
    Field descriptions are the settings reference of the docs (reference/settings.md, written
    from them when the site is built).

    The sections are listed last to first because pydantic orders fields from the last base up:
    so the fields read in the order of ``sections.py``. The checks here span sections.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="forbid",
        frozen=True,
        validate_default=True,
    )

    _file_data: ClassVar[dict[str, Any]] = {}
    """The settings file's values, read and bounded by ``load_settings``."""

    @model_validator(mode="after")
    def _renewal_fits_in_lease(self) -> Settings:
        if self.redis_socket_timeout * 2 >= self.lock_ttl:
            raise ValueError(
                f"lock_ttl ({self.lock_ttl}) must exceed twice redis_socket_timeout "
                f"({self.redis_socket_timeout}), or a slow renewal could outlive the lease"
            )
        return self

    @model_validator(mode="after")
    def _replica_wait_fits_in_call(self) -> Settings:
        # A node that lacks the script answers NOSCRIPT and the call is sent again with its
        # WAIT: twice the wait must fit in one call.
        if self.lock_min_replicas and self.lock_replica_timeout * 2 >= self.redis_socket_timeout:
            raise ValueError(
                f"lock_replica_timeout ({self.lock_replica_timeout}) must be less than half of "
                f"redis_socket_timeout ({self.redis_socket_timeout}): a call may wait twice"
            )
        return self

    @model_validator(mode="after")
    def _remote_calls_fit_in_lease(self) -> Settings:
        for name in ("remote_command_timeout", "docker_api_timeout"):
            if getattr(self, name) >= self.lock_ttl:
                raise ValueError(
                    f"{name} ({getattr(self, name)}) must be less than lock_ttl "
                    f"({self.lock_ttl}), or one remote call could outlast the lease"
                )
        return self

    def cycle_slots(self) -> int:
        """``max_concurrent_cycles``, with ``auto`` sized from the open-files limit now."""
        if self.max_concurrent_cycles != "auto":
            return self.max_concurrent_cycles
        return cycle_slots(
            ssh_pool_size=self.ssh_pool_size, redis_connections=self.redis_max_connections
        )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            init_settings,
            _Environment(settings_cls),
            InitSettingsSource(settings_cls, init_kwargs=cls._file_data),
        )


class _Environment(EnvSettingsSource):
    """``PLAYGUARD_*`` variables; a list value nested too deeply for the JSON decoder is a bad
    value of that variable (pydantic-settings names it), not a ``RecursionError``."""

    def decode_complex_value(self, field_name: str, field: FieldInfo, value: Any) -> Any:
        try:
            return super().decode_complex_value(field_name, field, value)
        except RecursionError:
            raise ValueError("nested too deeply") from None


def load_settings(config: Path | None = None, **overrides: Any) -> Settings:
    """Build settings from ``config`` (TOML), the environment and ``overrides``, in rising priority.

    Raises ``SettingsError`` naming each bad field, its value and its source.
    """
    file_data = _read_toml(config) if config is not None else {}

    class SettingsFromFile(Settings):
        _file_data = file_data

    try:
        return SettingsFromFile(**overrides)
    except ValidationError as exc:
        raise SettingsError(_describe(exc, config, file_data, overrides)) from None
    except pydantic_settings.SettingsError as exc:
        raise SettingsError(_undecodable(exc)) from None


NO_SETTINGS = (
    "no inventory named: give a settings file with --config FILE or PLAYGUARD_CONFIG=FILE "
    "(its `inventory` names the desired state), or set PLAYGUARD_INVENTORY"
)


def load_named_settings(config: Path | None = None, **overrides: Any) -> Settings:
    """``load_settings`` for a command a person runs: the YAML desired state must be named, by
    the settings file or ``PLAYGUARD_INVENTORY``; the ``inventory`` default (a path relative to
    the working directory) is never read by itself, so a command run inside a checkout of the
    repository does not silently act on its example inventory, and one run elsewhere says where
    the settings go instead of naming a file nobody meant.

    Raises ``SettingsError`` naming ``--config`` and ``PLAYGUARD_CONFIG`` when it is not."""
    settings = load_settings(config, **overrides)
    if settings.desired_state == "yaml" and "inventory" not in settings.model_fields_set:
        where = "" if config is None else f"{config} names no inventory; "
        raise SettingsError(where + NO_SETTINGS)
    return settings


def _read_toml(config: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(read_text_limited(config, SETTINGS_FILE_LIMIT))
    except FileRefused as exc:
        raise SettingsError(f"{config}: cannot read settings file: {exc.reason}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{config}: not valid TOML: {exc}") from None
    except RecursionError:
        raise SettingsError(f"{config}: not valid TOML: nested too deeply") from None
    for key, value in data.items():
        if _depth(value) > MAX_NESTING:
            raise SettingsError(f"{config}: {key}: nested more than {MAX_NESTING} levels deep")
    return data


def _depth(value: object) -> int:
    """How many lists or tables deep ``value`` goes, without recursing (TOML can nest deeply)."""
    deepest, level = 0, [(value, 0)]
    while level:
        item, depth = level.pop()
        deepest = max(deepest, depth)
        if depth > MAX_NESTING:
            continue
        if isinstance(item, dict):
            level.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            level.extend((child, depth + 1) for child in item)
    return deepest


def _describe(
    exc: ValidationError, config: Path | None, file_data: dict[str, Any], overrides: dict[str, Any]
) -> str:
    problems = []
    for error in exc.errors():
        reason = error["msg"].removeprefix("Value error, ")
        if not error["loc"]:  # a rule across fields: its message names them and their values
            problems.append(f"settings: {reason}")
            continue
        field = str(error["loc"][0])
        source = _source_of(field, config, file_data, overrides)
        place = ".".join(str(part) for part in error["loc"])  # rollout.waves.0: within a table
        if error["type"] == "extra_forbidden" and len(error["loc"]) > 1:
            # A key unknown within a table: its value is not shown, it may be a secret typed
            # into the wrong place.
            problems.append(f"{source}: {place}: {reason}")
            continue
        problems.append(f"{source}: {place} = {_shown(field, error.get('input'))}: {reason}")
    return invalid_settings(problems)


def invalid_settings(problems: list[str]) -> str:
    """One problem is one line (``invalid settings: environment PLAYGUARD_PHASES: ...``);
    several are a heading and one line each."""
    if len(problems) == 1:
        return f"invalid settings: {problems[0]}"
    return "invalid settings:\n  " + "\n  ".join(problems)


def _undecodable(exc: pydantic_settings.SettingsError) -> str:
    """pydantic-settings' own error (a list value that is not JSON) as our one line: which
    variable, which value, why."""
    found = re.search(r'field "(\w+)"', str(exc))
    field = found[1] if found else "settings"
    name = _environment_name(field)
    value = os.environ.get(name, "") if name else ""
    cause = exc.__cause__
    why = f"not JSON ({' '.join(str(cause).split())})" if cause else "not JSON"
    variable = name or ENV_PREFIX + field.upper()
    return invalid_settings([f"environment {variable}: {field} = {_shown(field, value)}: {why}"])


_VALUE_REPR = reprlib.Repr()
_VALUE_REPR.maxstring = 80
_VALUE_REPR.maxother = 80


def _is_secret(field: str) -> bool:
    """Whether ``field`` holds a ``SecretStr`` (passwords, the webhook's URL and key)."""
    known = Settings.model_fields.get(field)
    if known is None:
        return False
    return known.annotation is SecretStr or SecretStr in typing.get_args(known.annotation)


def _shown(field: str, value: object) -> str:
    """The value as the reader typed it, bounded in length and depth; secrets masked, and so are
    the credentials of any URL (an otlp_endpoint refused for holding them is not shown) and the
    whole of a malformed redis_url or desired_state (a password may be anywhere in it)."""
    if _is_secret(field):
        return "***"
    if isinstance(value, str) and (field in ("redis_url", "desired_state") or "://" in value):
        return _VALUE_REPR.repr(mask_url(value))
    return _VALUE_REPR.repr(value)


def _environment_name(field: str) -> str | None:
    """The variable that sets ``field`` now, if any (matched without case, as pydantic-settings
    matches it)."""
    wanted = (ENV_PREFIX + field).upper()
    return next((name for name in list(os.environ) if name.upper() == wanted), None)


def _source_of(
    field: str, config: Path | None, file_data: dict[str, Any], overrides: dict[str, Any]
) -> str:
    if field in overrides:
        return "command line"
    env_name = _environment_name(field)
    if env_name is not None:
        return f"environment {env_name}"
    if config is not None and field in file_data:
        return str(config)
    return "defaults"
