"""Every knob of the daemon in one typed object: its default, its environment name, its check.

Settings come from a TOML file (``playguard run --config FILE``) and ``PLAYGUARD_*`` environment
variables; the environment wins, so a container or a systemd drop-in can override one value without
editing the file. A bad value stops start-up with one line naming the field, the value and where it
came from; secrets are ``SecretStr`` and never appear in a log line or an error.
"""

from __future__ import annotations

import ipaddress
import os
import re
import reprlib
import tomllib
import typing
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal
from urllib.parse import urlsplit

import pydantic_settings
from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from playguard_async.coordination.address import parse_redis_url
from playguard_async.coordination.lock import default_replica_id
from playguard_async.desired_state.postgres.connection import (
    DEFAULT_SCHEMA,
    PasswordSource,
    password_from,
    schema_name,
)
from playguard_async.desired_state.registry import source_kind
from playguard_async.desired_state.windows import Window
from playguard_async.desired_state.yaml_source import INVENTORY_MAX_BYTES, INVENTORY_READ_TIMEOUT
from playguard_async.kits.capacity import MAX_SECONDS, cycle_slots
from playguard_async.kits.files import FileRefused, read_text_limited
from playguard_async.kits.host_header import host_entry
from playguard_async.phases.protocol import BUILTIN_PHASES

ENV_PREFIX = "PLAYGUARD_"

SETTINGS_FILE_LIMIT = 1 << 20
"""Bytes a settings file may have; it is a few hundred in practice."""

MAX_NESTING = 8
"""Levels of lists or tables a settings value may nest; the deepest setting needs one."""

DEFAULT_PHASES = BUILTIN_PHASES
"""Every built-in phase, in the registry's order."""


class SettingsError(ValueError):
    """Settings that cannot be used; the message names field, value and source."""


def _seconds(default: float, *, description: str, zero: bool = False) -> Any:
    """A duration field: finite, above 0 (or at least 0 with ``zero``), at most ``MAX_SECONDS``."""
    return Field(
        default,
        gt=None if zero else 0,
        ge=0 if zero else None,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description=description,
    )


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
        description="Redis to lock in: redis://, redis+sentinel://HOST:PORT,.../SERVICE or "
        "redis+cluster://HOST:PORT,... (rediss... for TLS); may carry user and password.",
        repr=False,  # may hold a password; redis_url_for_display() is the safe form
    )
    redis_password: SecretStr | None = Field(
        None, description="Redis password, when not in redis_url (keeps it out of the URL)."
    )
    redis_sentinel_password: SecretStr | None = Field(
        None, description="Password of the sentinels themselves (redis+sentinel:// only)."
    )
    redis_tls_ca_file: Path | None = Field(
        None,
        description="CA certificate (PEM) that signed the Redis servers' certificates, for "
        "rediss... URLs; default: the system's trusted CAs.",
    )
    lock_min_replicas: int = Field(
        0,
        ge=0,
        le=100,
        description="Replicas that must acknowledge (WAIT) a lock's acquire and renew; a lease "
        "they do not acknowledge within lock_replica_timeout is not held. 0: no wait.",
    )
    lock_replica_timeout: float = _seconds(
        0.5,
        description="Seconds acquire and renew wait for lock_min_replicas acknowledgements; "
        "must be below half of redis_socket_timeout when lock_min_replicas is above 0.",
    )
    redis_socket_timeout: float = _seconds(
        5.0, description="Seconds any single Redis call may take; past it, a lease is lost."
    )
    redis_connect_timeout: float = _seconds(5.0, description="Seconds to connect to Redis.")
    redis_keepalive: float = _seconds(
        15.0,
        zero=True,
        description="Seconds within which TCP itself ends a Redis connection whose server "
        "vanished without a reset (a black hole, a dead host): keepalive probes on an idle one, "
        "TCP_USER_TIMEOUT on unacknowledged data, so no dead socket waits for TCP's minutes "
        "and no abandoned command is delivered later than this; 0: the kernel's defaults.",
    )
    redis_max_connections: int = Field(
        50,
        ge=1,
        le=10_000,
        description="Connections in the Redis pool; callers beyond it wait their turn.",
    )
    tick_interval: float = _seconds(60.0, description="Seconds between ticks.")
    redis_down_log_interval: float = _seconds(
        300.0,
        description="Seconds between the redis.still_down lines while Redis stays away (it is "
        "told once when it goes, and once when it is back).",
    )
    tick_jitter: float = Field(
        0.1,
        ge=0,
        le=0.5,
        description="Share of tick_interval over which cycle starts are spread at random, so "
        "a replica's share of the fleet does not start at one instant.",
    )
    lock_ttl: float = _seconds(900.0, description="Seconds a lease lasts without renewal.")
    max_concurrent_cycles: Annotated[int, Field(ge=1, le=100_000)] | Literal["auto"] = Field(
        "auto",
        description="Cycles running at once; auto: what the open-files limit leaves beside the "
        "SSH and Redis pools, 4 files a cycle, at most redis_max_connections, 16 to 1024.",
    )
    shutdown_grace: float = _seconds(
        30.0, zero=True, description="Seconds a draining cycle may take before it is cancelled."
    )
    inventory: Path = Field(
        Path("config/inventory.yaml"), description="The desired state (YAML inventory)."
    )
    inventory_max_bytes: int = Field(
        INVENTORY_MAX_BYTES,
        ge=1,
        le=1 << 30,
        description="Bytes the inventory file (or a PostgreSQL snapshot's rows as text) may "
        "have; a larger one is refused unread.",
    )
    inventory_read_timeout: float = _seconds(
        INVENTORY_READ_TIMEOUT,
        description="Seconds reading, parsing and validating the inventory may take; past it the "
        "read is abandoned and the last good inventory stays in force.",
    )
    desired_state: str = Field(
        "yaml",
        description="Where the desired state is: 'yaml' (the inventory file) or "
        "postgresql://user@host:port/database (no password in the URL).",
    )
    desired_state_password: SecretStr | None = Field(
        None, description="PostgreSQL password for desired_state (never in the URL or argv)."
    )
    desired_state_password_file: Path | None = Field(
        None,
        description="File holding the PostgreSQL password, read at each connect (a rotated "
        "secret is picked up); used when desired_state_password is not set.",
    )
    desired_state_schema: str = Field(
        DEFAULT_SCHEMA,
        description="The one PostgreSQL schema playguard owns: its tables, functions, "
        "schema_version and the mapping views; it creates nothing elsewhere.",
    )
    desired_state_timeout: float = _seconds(
        10.0,
        description="Seconds connecting to PostgreSQL and reading one snapshot may take; past "
        "it the last good snapshot stays in force.",
    )
    desired_state_probe_interval: float = _seconds(
        30.0,
        description="Seconds between the SELECT 1 probes of the LISTEN connection "
        "(bounded by desired_state_timeout): a dead link to PostgreSQL is noticed within the "
        "two, and the listener reconnects.",
    )
    phases: tuple[str, ...] = Field(
        DEFAULT_PHASES, min_length=1, description="Enabled phases, in the order they run."
    )
    dry_run: bool = Field(False, description="Report what every phase would do; change nothing.")
    windows: tuple[Window, ...] = Field(
        (),
        description="The fleet's default maintenance windows, for Marquees without windows of "
        'their own: [{kind = "allow" or "deny", cron = "0 2 * * 6", duration = 7200, timezone '
        '= "Europe/Berlin"}]; outside what they allow a cycle runs as detect. Empty: always.',
    )
    pause_default_for: float = _seconds(
        14400.0,
        description="Seconds a `playguard pause` without --for lasts; every pause expires by "
        "itself.",
    )
    fleet_pause_read_interval: float = _seconds(
        1.0,
        description="Seconds between a replica's reads of the fleet-wide pause (`pause --all`): "
        "a running cycle stops for it at its first phase boundary this long after it was taken.",
    )
    log_format: Literal["json", "console", "auto"] = Field(
        "auto", description="json, console, or auto (console on a TTY, json elsewhere)."
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field("info")
    replica_id: str = Field(
        default_factory=default_replica_id,
        min_length=1,
        description="This replica's name in locks, records and the replicas that split the "
        "fleet; unique per process (default host:pid).",
    )
    event_loop: Literal["uvloop", "asyncio"] = Field("uvloop")
    ssh_connect_timeout: float = _seconds(10.0, description="Seconds to open an SSH connection.")
    ssh_keepalive_interval: float = _seconds(
        15.0,
        description="Seconds between SSH keepalives on a quiet connection (pooled ones too); "
        "ssh_keepalive_count_max unanswered in a row close it.",
    )
    ssh_keepalive_count_max: int = Field(
        3,
        ge=1,
        le=100,
        description="SSH keepalives left unanswered before the connection is closed: a dead "
        "link is noticed within ssh_keepalive_interval x (this + 1) seconds.",
    )
    ssh_pool_size: int = Field(
        1024,
        ge=0,
        le=1_000_000,
        description="Idle SSH connections kept for the next cycle of their Marquee (one per "
        "Marquee; the least recently used is closed past it); 0 connects anew every cycle.",
    )
    ssh_pool_idle_timeout: float = _seconds(
        300.0, description="Seconds an idle pooled SSH connection is kept before it is closed."
    )
    compose_memo_size: int = Field(
        100_000,
        ge=0,
        le=10_000_000,
        description="Compose projects whose config answers are remembered across cycles (one "
        "entry per Playground, least recently used first out); 0 asks compose every cycle.",
    )
    remote_command_timeout: float = _seconds(
        300.0, description="Seconds any remote command (git, compose) may run."
    )
    remote_output_limit: int = Field(
        1 << 20,
        ge=1024,
        le=1 << 30,
        description="Characters of a remote command's stdout/stderr kept.",
    )
    docker_api_timeout: float = _seconds(
        300.0, description="Seconds any Docker API call (an image pull included) may take."
    )
    compose_command: tuple[str, ...] = Field(
        ("docker", "compose"),
        min_length=1,
        description='How compose runs on the hosts: ["docker", "compose"] or ["docker-compose"].',
    )
    stuck_after: float = _seconds(
        300.0,
        description="Seconds a container may stay restarting, created or unhealthy before it "
        "is recreated.",
    )
    health_grace: float = _seconds(
        5.0,
        zero=True,
        description="Seconds a service without a healthcheck must have been running to count "
        "as healthy after its Playground was (re)created.",
    )
    orphan_grace: float = _seconds(
        600.0, zero=True, description="Seconds an orphaned container of ours lives before removal."
    )
    agent_chat_network: str = Field(
        "none", min_length=1, description="Docker network mode of AgentChat containers."
    )
    history_length: int = Field(
        50, ge=1, le=10_000, description="Cycle records kept per Marquee in Redis for operators."
    )
    history_max_bytes: int = Field(
        32_768,
        ge=1_024,
        le=16 * 2**20,
        description="Bytes of cycle records a Marquee's history keeps in Redis at most (the "
        "newest record always stays); the older ones beyond it are trimmed.",
    )
    record_max_bytes: int = Field(
        4_096,
        ge=1_024,
        le=2**20,
        description="Bytes one cycle record takes at most: a bigger one loses notice details, "
        "then notices, findings and actions (counted in its `truncated` field), never its outcome.",
    )
    http_address: str = Field(
        "",
        description="HOST:PORT of the HTTP endpoints /healthz, /readyz and /metrics ([::1]:PORT "
        "for IPv6; port 0 picks a free one); empty: no HTTP server. The web view is served "
        "there too: beyond loopback only with web_credential_file set.",
    )
    web_view: bool = Field(
        True,
        description="Serve the read-only web view of the fleet at / on http_address (false: "
        "the probes and /metrics only, which need no credential wherever they are bound).",
    )
    web_credential_file: Path | None = Field(
        None,
        description="File holding the web view's credential (one line; read at start): every page "
        "and stream then asks for it, as `Authorization: Bearer <it>` or as the password of "
        "basic auth (any user name). Required when http_address is beyond loopback. Refused "
        "at start if it is a symbolic link, not a regular file, or readable or writable by "
        "group or others (chmod 600).",
    )
    http_allowed_hosts: tuple[str, ...] = Field(
        (),
        description="Names (or addresses) besides http_address's own that a request's Host "
        "header may carry, e.g. the name a proxy or Prometheus reaches this replica by; any other "
        "Host is answered 421 (a DNS-rebinding page sends its own name).",
    )
    metrics_require_credential: bool = Field(
        False,
        description="/metrics asks for the web credential too (`Authorization: Bearer <it>`, "
        "Prometheus' `authorization`); needs web_credential_file.",
    )
    web_refresh_interval: float = _seconds(
        10.0,
        description="Seconds between the web view's reads of the whole fleet from Redis; a "
        "cycle's end on any replica shows at once (Pub/Sub), so this is the safety net.",
    )
    web_update_interval: float = _seconds(
        1.0,
        description="Seconds between two updates of the web view's fleet picture at most: the "
        "cycle ends within it are shown together, so an open page is told of a change (and "
        "fetches itself again) at most once per interval, however many cycles end.",
    )
    web_streams_per_client: int = Field(
        20,
        ge=1,
        le=10_000,
        description="Live-update streams (open pages) one client address may hold at once; one "
        "more is refused with 429 (clients behind one proxy or NAT share an address).",
    )
    web_streams_total: int = Field(
        100,
        ge=1,
        le=100_000,
        description="Live-update streams (open pages) the replica holds at once, all clients "
        "together; one more is refused with 503. Pages still work without one (reload them).",
    )

    webhook_url: SecretStr | None = Field(
        None,
        description="http(s) URL that Marquee health changes, lost locks and refused writes are "
        "POSTed to as JSON; a secret (tokens live in such URLs): only its origin is ever logged. "
        "Unset: logged only.",
    )
    webhook_secret: SecretStr | None = Field(
        None,
        description="Key of the HMAC-SHA256 signature of each webhook body, sent as "
        "X-Playguard-Signature: sha256=<hex>; unset: unsigned.",
    )
    webhook_timeout: float = _seconds(5.0, description="Seconds one webhook POST may take.")
    webhook_retries: int = Field(
        3, ge=0, le=10, description="Retries of a webhook POST that failed (timeout, 5xx, 429)."
    )
    notify_window: float = _seconds(
        600.0,
        description="Seconds within which the same lost lock or refused write of a Marquee (same "
        "reason) is told once, however many replicas saw it.",
    )

    _file_data: ClassVar[dict[str, Any]] = {}
    """The settings file's values, read and bounded by ``load_settings``."""

    @field_validator("redis_url")
    @classmethod
    def _redis_url_form(cls, value: str) -> str:
        parse_redis_url(value)
        return value

    @field_validator("desired_state")
    @classmethod
    def _desired_state_form(cls, value: str) -> str:
        source_kind(value)
        return value

    @field_validator("desired_state_schema")
    @classmethod
    def _desired_state_schema_form(cls, value: str) -> str:
        return schema_name(value)

    @field_validator("http_address")
    @classmethod
    def _http_address_form(cls, value: str) -> str:
        if value:
            parse_http_address(value)
        return value

    @field_validator("http_allowed_hosts")
    @classmethod
    def _http_allowed_hosts_form(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(str(host_entry(host)) for host in value)

    @field_validator("webhook_url")
    @classmethod
    def _webhook_url_form(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            url = urlsplit(value.get_secret_value())
            if url.scheme not in ("http", "https") or not url.hostname:
                raise ValueError("must be an http:// or https:// URL with a host")
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

    @model_validator(mode="after")
    def _web_view_beyond_loopback_has_a_credential(self) -> Settings:
        bind = self.http_bind()
        if (
            self.web_view
            and bind is not None
            and self.web_credential_file is None
            and not is_loopback(bind[0])
        ):
            raise ValueError(
                f"http_address {self.http_address} is beyond loopback: the web view there needs "
                "web_credential_file (or web_view = false)"
            )
        return self

    @model_validator(mode="after")
    def _metrics_credential_is_set(self) -> Settings:
        if self.metrics_require_credential and self.web_credential_file is None:
            raise ValueError("metrics_require_credential needs web_credential_file")
        return self

    def web_credential(self) -> str | None:
        """The web view's credential from ``web_credential_file`` (None: not set); a file that
        cannot be read, is empty, is a symbolic link or is open to group or others is a
        ``SettingsError`` now, not an open door later."""
        path = self.web_credential_file
        if path is None:
            return None
        try:
            credential = read_text_limited(path, CREDENTIAL_FILE_LIMIT, private=True).strip()
        except FileRefused as exc:
            raise SettingsError(f"web_credential_file {path}: {exc.reason}") from None
        if not credential or "\n" in credential:
            raise SettingsError(f"web_credential_file {path}: must hold one non-empty line")
        return credential

    def cycle_slots(self) -> int:
        """``max_concurrent_cycles``, with ``auto`` sized from the open-files limit now."""
        if self.max_concurrent_cycles != "auto":
            return self.max_concurrent_cycles
        return cycle_slots(
            ssh_pool_size=self.ssh_pool_size, redis_connections=self.redis_max_connections
        )

    def http_bind(self) -> tuple[str, int] | None:
        """The host and port to serve HTTP on, or None when ``http_address`` is empty."""
        return parse_http_address(self.http_address) if self.http_address else None

    def database_password(self) -> PasswordSource:
        """Where the desired state's database password comes from: the setting, else its file
        (read at each connect, so a rotated file is picked up)."""
        secret = self.desired_state_password
        return password_from(
            secret.get_secret_value() if secret else None, self.desired_state_password_file
        )

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
        problems.append(f"{source}: {field} = {_shown(field, error.get('input'))}: {reason}")
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
    """The value as the reader typed it, bounded in length and depth; secrets masked."""
    if _is_secret(field):
        return "***"
    if field in ("redis_url", "desired_state") and isinstance(value, str):
        return _VALUE_REPR.repr(mask_url(value))
    return _VALUE_REPR.repr(value)


CREDENTIAL_FILE_LIMIT = 4_096
"""Bytes a credential file may hold: a token or a password, never a document."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (from ``parse_http_address``) binds loopback only: ``localhost`` or a
    loopback address; any other name may resolve beyond the machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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


_URL_FORM = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)", re.DOTALL)


def mask_url(url: str) -> str:
    """``url`` with its credentials masked: ``scheme://user:***@host...``.

    The credentials are everything before the URL's last ``@``, however they are written: a
    password holding ``#``, ``/``, ``?`` or ``@`` fools URL parsers into reading part of it as
    path, query or host, so this does not ask one. A user without a password is masked whole
    (``redis://SECRET@host`` is a password to many), and so is anything without the
    ``scheme://`` form.
    """
    match = _URL_FORM.fullmatch(url)
    if match is None:
        return "***"
    credentials, at, location = match["rest"].rpartition("@")
    if not at:
        return url
    user, colon, _ = credentials.partition(":")
    masked = f"{user}:***" if colon else "***"
    return f"{match['scheme']}://{masked}@{location}"


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
