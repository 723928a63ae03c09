"""Every knob of the daemon in one typed object: its default, its environment name, its check.

Settings come from a TOML file (``playguard run --config FILE``) and ``PLAYGUARD_*`` environment
variables; the environment wins, so a container or a systemd drop-in can override one value without
editing the file. A bad value stops start-up with one line naming the field, the value and where it
came from; secrets are ``SecretStr`` and never appear in a log line or an error.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from playguard_async.lock import default_replica_id

ENV_PREFIX = "PLAYGUARD_"

DEFAULT_PHASES = (
    "sync_git",
    "fetch_branches",
    "refresh_credentials",
    "pull_images",
    "reconcile_playgrounds",
    "process_agent_chats",
    "sweep_orphans",
)


class SettingsError(ValueError):
    """Settings that cannot be used; the message names field, value and source."""


class Settings(BaseSettings):
    """The daemon's settings. Field descriptions are the configuration reference in README.md."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="forbid",
        frozen=True,
        validate_default=True,
    )

    redis_url: str = Field(
        "redis://127.0.0.1:6379/0",
        description="Redis to lock in: redis:// or rediss:// (TLS); may carry user and password.",
        repr=False,  # may hold a password; redis_url_for_display() is the safe form
    )
    redis_password: SecretStr | None = Field(
        None, description="Redis password, when not in redis_url (keeps it out of the URL)."
    )
    redis_socket_timeout: float = Field(
        5.0, gt=0, description="Seconds any single Redis call may take; past it, a lease is lost."
    )
    redis_connect_timeout: float = Field(5.0, gt=0, description="Seconds to connect to Redis.")
    redis_max_connections: int = Field(
        50, ge=1, description="Connections in the Redis pool; callers beyond it wait their turn."
    )
    tick_interval: float = Field(60.0, gt=0, description="Seconds between ticks.")
    tick_jitter: float = Field(
        0.1,
        ge=0,
        le=0.5,
        description="Share of tick_interval over which cycle starts are spread at random, so "
        "replicas that tick together share the fleet.",
    )
    lock_ttl: float = Field(900.0, gt=0, description="Seconds a lease lasts without renewal.")
    max_concurrent_cycles: int = Field(16, ge=1, description="Cycles running at once.")
    shutdown_grace: float = Field(
        30.0, ge=0, description="Seconds a draining cycle may take before it is cancelled."
    )
    inventory: Path = Field(
        Path("config/inventory.yaml"), description="The desired state (YAML inventory)."
    )
    phases: tuple[str, ...] = Field(
        DEFAULT_PHASES, min_length=1, description="Enabled phases, in the order they run."
    )
    dry_run: bool = Field(False, description="Report what every phase would do; change nothing.")
    log_format: Literal["json", "console", "auto"] = Field(
        "auto", description="json, console, or auto (console on a TTY, json elsewhere)."
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field("info")
    replica_id: str = Field(
        default_factory=default_replica_id,
        min_length=1,
        description="This replica's name in locks and records (default host:pid).",
    )
    event_loop: Literal["uvloop", "asyncio"] = Field("uvloop")
    ssh_connect_timeout: float = Field(10.0, gt=0, description="Seconds to open an SSH connection.")
    ssh_keepalive_interval: float = Field(
        15.0, gt=0, description="Seconds between SSH keepalives; 3 unanswered drop the connection."
    )
    remote_command_timeout: float = Field(
        300.0, gt=0, description="Seconds any remote command (git, compose) may run."
    )
    remote_output_limit: int = Field(
        1 << 20, ge=1024, description="Characters of a remote command's stdout/stderr kept."
    )
    docker_api_timeout: float = Field(
        300.0, gt=0, description="Seconds any Docker API call (an image pull included) may take."
    )
    compose_command: tuple[str, ...] = Field(
        ("docker", "compose"),
        min_length=1,
        description='How compose runs on the hosts: ["docker", "compose"] or ["docker-compose"].',
    )
    stuck_after: float = Field(
        300.0,
        gt=0,
        description="Seconds a container may stay restarting, created or unhealthy before it "
        "is recreated.",
    )
    orphan_grace: float = Field(
        600.0, ge=0, description="Seconds an orphaned container of ours lives before removal."
    )
    agent_chat_network: str = Field(
        "none", min_length=1, description="Docker network mode of AgentChat containers."
    )
    history_length: int = Field(
        50, ge=1, description="Cycle records kept per Marquee in Redis for operators."
    )
    http_address: str = Field(
        "",
        description="HOST:PORT of the HTTP endpoints /healthz, /readyz and /metrics ([::1]:PORT "
        "for IPv6; port 0 picks a free one); empty: no HTTP server.",
    )

    @field_validator("redis_url")
    @classmethod
    def _redis_url_scheme(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("redis", "rediss") or not parts.hostname:
            raise ValueError("must be redis://HOST[:PORT][/DB] or rediss://HOST[:PORT][/DB]")
        return value

    @field_validator("http_address")
    @classmethod
    def _http_address_form(cls, value: str) -> str:
        if value:
            parse_http_address(value)
        return value

    @field_validator("phases")
    @classmethod
    def _phases_unique(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        repeated = sorted({phase for phase in value if value.count(phase) > 1})
        if repeated:
            raise ValueError(f"phase listed twice: {', '.join(repeated)}")
        return value

    @model_validator(mode="after")
    def _renewal_fits_in_lease(self) -> Settings:
        if self.redis_socket_timeout * 2 >= self.lock_ttl:
            raise ValueError(
                f"lock_ttl ({self.lock_ttl}) must exceed twice redis_socket_timeout "
                f"({self.redis_socket_timeout}), or a slow renewal could outlive the lease"
            )
        return self

    def http_bind(self) -> tuple[str, int] | None:
        """The host and port to serve HTTP on, or None when ``http_address`` is empty."""
        return parse_http_address(self.http_address) if self.http_address else None

    def redis_url_for_display(self) -> str:
        """The Redis URL with any password masked, for logs and status output."""
        return mask_url(self.redis_url)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings, TomlConfigSettingsSource(settings_cls)


def load_settings(config: Path | None = None, **overrides: Any) -> Settings:
    """Build settings from ``config`` (TOML), the environment and ``overrides``, in rising priority.

    Raises ``SettingsError`` naming each bad field, its value and its source.
    """
    settings_cls = Settings
    if config is not None:
        _check_toml(config)

        class SettingsFromFile(Settings):
            model_config = SettingsConfigDict(toml_file=config)

        settings_cls = SettingsFromFile
    try:
        return settings_cls(**overrides)
    except ValidationError as exc:
        raise SettingsError(_describe(exc, config, overrides)) from None


def _check_toml(config: Path) -> None:
    try:
        tomllib.loads(config.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SettingsError(f"{config}: settings file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{config}: cannot read settings file: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{config}: not valid TOML: {exc}") from None


def _describe(exc: ValidationError, config: Path | None, overrides: dict[str, Any]) -> str:
    problems = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else "settings"
        source = _source_of(field, config, overrides)
        where = f"{field} = {_shown(field, error.get('input'))}" if error["loc"] else "settings"
        problems.append(f"{source}: {where}: {error['msg']}")
    return "invalid settings:\n  " + "\n  ".join(problems)


def _shown(field: str, value: object) -> str:
    if field == "redis_password":
        return "***"
    if field == "redis_url" and isinstance(value, str):
        return repr(mask_url(value))
    return repr(value)


def parse_http_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[V6]:PORT`` for IPv6) as a host and a port; ValueError when malformed.

    The host is required: binding every interface must be asked for (``0.0.0.0:9464``), never the
    accident of a missing host.
    """
    try:
        parts = urlsplit(f"//{address}")
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ValueError(f"must be HOST:PORT with a port from 0 to 65535 ({exc})") from None
    if not host or port is None or parts.path or parts.query or parts.fragment or parts.username:
        raise ValueError("must be HOST:PORT, e.g. 127.0.0.1:9464 or [::1]:9464")
    return host, port


def mask_url(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***``."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "<unparseable URL>"
    if password is None:
        return url
    netloc = f"{parts.username or ''}:***@{parts.hostname}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def _source_of(field: str, config: Path | None, overrides: dict[str, Any]) -> str:
    if field in overrides:
        return "command line"
    env_name = ENV_PREFIX + field.upper()
    if env_name in os.environ:
        return f"environment {env_name}"
    if config is not None:
        return str(config)
    return "defaults"
