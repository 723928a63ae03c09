"""The settings by concern, one section each: its fields (default, bounds, description) and the
checks that need only its own fields.

``Settings`` (in ``playguard_async.settings``) is all sections together, flat: a field keeps its
one name as the settings file's key and, upper-cased after ``PLAYGUARD_``, as its environment
variable; the sections group the code, never the names a user types. A check across sections (a
lease longer than two Redis calls, say) is on ``Settings``.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator

from playguard_async.coordination.address import parse_redis_url
from playguard_async.coordination.lock import default_replica_id
from playguard_async.desired_state.postgres.connection import (
    DEFAULT_SCHEMA,
    PasswordSource,
    password_from,
    schema_name,
)
from playguard_async.desired_state.registry import source_kind
from playguard_async.desired_state.rollout_policy import RolloutPolicy
from playguard_async.desired_state.windows import Window
from playguard_async.desired_state.yaml_source import INVENTORY_MAX_BYTES, INVENTORY_READ_TIMEOUT
from playguard_async.kits.capacity import MAX_SECONDS
from playguard_async.kits.host_header import host_entry
from playguard_async.phases.protocol import BUILTIN_PHASES
from playguard_async.settings.addresses import is_loopback, mask_url, parse_http_address

DEFAULT_PHASES = BUILTIN_PHASES
"""Every built-in phase, in the registry's order."""


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


class RedisSettings(BaseModel):
    """Where Redis is and how long any one call to it may take."""

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
    redis_down_log_interval: float = _seconds(
        300.0,
        description="Seconds between the redis.still_down lines while Redis stays away (it is "
        "told once when it goes, and once when it is back).",
    )

    @field_validator("redis_url")
    @classmethod
    def _redis_url_form(cls, value: str) -> str:
        parse_redis_url(value)
        return value

    def redis_url_for_display(self) -> str:
        """The Redis URL with any password masked, for logs and status output."""
        return mask_url(self.redis_url)


class LeaseSettings(BaseModel):
    """How long a Marquee's lease lasts and who must acknowledge it."""

    lock_ttl: float = _seconds(900.0, description="Seconds a lease lasts without renewal.")
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


class SchedulingSettings(BaseModel):
    """When cycles start, how many run at once, and this replica's process."""

    tick_interval: float = _seconds(60.0, description="Seconds between ticks.")
    tick_jitter: float = Field(
        0.1,
        ge=0,
        le=0.5,
        description="Share of tick_interval over which cycle starts are spread at random, so "
        "a replica's share of the fleet does not start at one instant.",
    )
    max_concurrent_cycles: Annotated[int, Field(ge=1, le=100_000)] | Literal["auto"] = Field(
        "auto",
        description="Cycles running at once; auto: what the open-files limit leaves beside the "
        "SSH and Redis pools, 4 files a cycle, at most redis_max_connections, 16 to 1024.",
    )
    shutdown_grace: float = _seconds(
        30.0, zero=True, description="Seconds a draining cycle may take before it is cancelled."
    )
    replica_id: str = Field(
        default_factory=default_replica_id,
        min_length=1,
        description="This replica's name in locks, records and the replicas that split the "
        "fleet; unique per process (default host:pid).",
    )
    event_loop: Literal["uvloop", "asyncio"] = Field("uvloop")
    loop_lag_bound: float = Field(
        1.0,
        ge=0.1,
        le=30.0,
        allow_inf_nan=False,
        description="Seconds the event loop may wake later than asked: past it, a loop.held line "
        "names what held it and /readyz answers 503 until the loop has been well a while.",
    )


class DesiredStateSettings(BaseModel):
    """Where the desired state comes from (the YAML inventory or PostgreSQL) and how long reading
    it may take; the fleet's defaults for what the desired state leaves unset (maintenance
    windows, rollouts)."""

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
    audit_retention_days: int = Field(
        90,
        ge=0,
        le=36500,
        description="Days the audit of desired-state changes (PostgreSQL's playguard.changes) "
        "keeps entries when the operator's `playguard audit prune` runs; 0 keeps them forever.",
    )
    audit_checkpoint_file: Path | None = Field(
        None,
        description="File the daemon appends a signed checkpoint of the change log's chain heads "
        "to at each tick (and `playguard audit checkpoint` on demand), outside the database; "
        "`playguard audit verify` checks the log against it. Needs audit_checkpoint_key_file. "
        "None: no checkpoints.",
    )
    audit_checkpoint_key_file: Path | None = Field(
        None,
        description="File holding the HMAC key (32 to 4096 bytes, mode 600) that signs the "
        "checkpoints; never given to the database.",
    )
    desired_state_probe_interval: float = _seconds(
        30.0,
        description="Seconds between the SELECT 1 probes of the LISTEN connection "
        "(bounded by desired_state_timeout): a dead link to PostgreSQL is noticed within the "
        "two, and the listener reconnects.",
    )
    windows: tuple[Window, ...] = Field(
        (),
        description="The fleet's default maintenance windows, for Marquees without windows of "
        'their own: [{kind = "allow" or "deny", cron = "0 2 * * 6", duration = 7200, timezone '
        '= "Europe/Berlin"}]; outside what they allow a cycle runs as detect. Empty: always.',
    )
    rollout: RolloutPolicy | None = Field(
        None,
        description="The fleet's default rollout, for Playspecs without one of their own: "
        '{waves = [1, "10%", "100%"], bake = 300, max_failures = 0, wave_timeout = 900} (in the '
        "environment as JSON); a release reaches the Marquees wave by wave. None: every Marquee "
        "at once.",
    )

    @field_validator("desired_state")
    @classmethod
    def _desired_state_form(cls, value: str) -> str:
        source_kind(value)
        return value

    @field_validator("desired_state_schema")
    @classmethod
    def _desired_state_schema_form(cls, value: str) -> str:
        return schema_name(value)

    @model_validator(mode="after")
    def _checkpoint_pair(self) -> DesiredStateSettings:
        if (self.audit_checkpoint_file is None) != (self.audit_checkpoint_key_file is None):
            raise ValueError("audit_checkpoint_file and audit_checkpoint_key_file go together: "
                             "set both or neither")  # fmt: skip
        return self

    def database_password(self) -> PasswordSource:
        """Where the desired state's database password comes from: the setting, else its file
        (read at each connect, so a rotated file is picked up)."""
        secret = self.desired_state_password
        return password_from(
            secret.get_secret_value() if secret else None, self.desired_state_password_file
        )


class CycleSettings(BaseModel):
    """What a cycle does: its phases, whether it only reports, and how it is paused."""

    phases: tuple[str, ...] = Field(
        DEFAULT_PHASES, min_length=1, description="Enabled phases, in the order they run."
    )
    dry_run: bool = Field(False, description="Report what every phase would do; change nothing.")
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

    @field_validator("phases")
    @classmethod
    def _phases_unique(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        repeated = sorted({phase for phase in value if value.count(phase) > 1})
        if repeated:
            raise ValueError(f"phase listed twice: {', '.join(repeated)}")
        return value


class RemoteSettings(BaseModel):
    """How the hosts are reached: SSH connections and their pool, remote commands, the Docker
    API and compose."""

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
    compose_memo_size: int = Field(
        100_000,
        ge=0,
        le=10_000_000,
        description="Compose projects whose config answers are remembered across cycles (one "
        "entry per Playground, least recently used first out); 0 asks compose every cycle.",
    )


class ContainerSettings(BaseModel):
    """How containers are judged and run: when one is stuck, healthy or orphaned, and AgentChat's
    network."""

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


class RecordSettings(BaseModel):
    """What Redis keeps of each cycle for operators: how many records and how big."""

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


WEB_ROLES = ("viewer", "operator", "admin")
"""The web view's roles, each allowed what the one before it is (``web.users.Role``)."""


class HttpSettings(BaseModel):
    """The HTTP endpoints (/healthz, /readyz, /metrics) and the web view served beside them."""

    http_address: str = Field(
        "",
        description="HOST:PORT of the HTTP endpoints /healthz, /readyz and /metrics ([::1]:PORT "
        "for IPv6; port 0 picks a free one); empty: no HTTP server. The web view is served "
        "there too: beyond loopback only with web_credential_file set.",
    )
    http_header_timeout: float = _seconds(
        5.0,
        description="Seconds a connection may take to send a request's complete head (request "
        "line and headers), counted from its opening and from the end of the previous answer "
        "(so also how long a keep-alive connection may idle); past it the connection is closed.",
    )
    http_connections_max: int = Field(
        256,
        ge=1,
        le=100_000,
        description="Connections the HTTP server holds at once, all clients together; one more is "
        "closed at once (counted and logged). Lowered at start to what the open-files limit leaves "
        "beside the cycles' files.",
    )
    http_connections_per_client: int = Field(
        32,
        ge=1,
        le=100_000,
        description="Connections one client address may hold at once (the addresses of "
        "web_trusted_proxies: http_connections_max only); one more is closed at once.",
    )
    http_allowed_hosts: tuple[str, ...] = Field(
        (),
        description="Names (or addresses) besides http_address's own that a request's Host "
        "header may carry, e.g. the name a proxy or Prometheus reaches this replica by; any other "
        "Host is answered 421 (a DNS-rebinding page sends its own name).",
    )
    web_view: bool = Field(
        True,
        description="Serve the read-only web view of the fleet at / on http_address (false: "
        "the probes and /metrics only, which need no credential wherever they are bound).",
    )
    web_credential_file: Path | None = Field(
        None,
        description="The web view's users file: one line per user, `name role secret-hash` "
        "(roles viewer, operator, admin; an argon2id hash), written by `playguard web add-user`. "
        "Every page and stream then asks who is there (the login page, or basic auth of a user), "
        "and actions are open to operators and admins. Read again when it changes. Required when "
        "http_address is beyond loopback. Refused at start if it is a symbolic link, not a "
        "regular file, readable or writable by group or others (chmod 600), or has a bad line.",
    )
    web_password_min_length: int = Field(
        12,
        ge=1,
        le=1_024,
        description="Characters a password given to `playguard web add-user` must have at least "
        "(a blank one is refused whatever its length).",
    )
    metrics_require_credential: bool = Field(
        False,
        description="/metrics asks for a user of web_credential_file too (basic auth, "
        "Prometheus' `basic_auth`); needs web_credential_file.",
    )
    web_trusted_proxies: tuple[str, ...] = Field(
        (),
        description="Addresses or CIDR networks of an auth proxy (oauth2-proxy) whose "
        "X-Forwarded-User and X-Forwarded-Groups headers name the user; the same headers from "
        "any other peer are ignored (and logged once per peer).",
    )
    web_proxy_group_roles: dict[str, str] = Field(
        {},
        description="Group (of X-Forwarded-Groups) -> role (viewer, operator, admin) of a user "
        "a trusted proxy names; the highest role of its groups wins, none: refused.",
    )
    web_cookie_secure: bool = Field(
        False,
        description="Mark the login's session cookie Secure even when this server is reached "
        "over plain HTTP (behind a proxy that ends TLS, so the pages' origin is https://); over "
        "TLS it is marked anyway.",
    )
    metrics_marquees_shown: int = Field(
        100,
        ge=0,
        le=100_000,
        description="Marquees not ok that /metrics shows one by one (those not ok the longest); "
        "the others are counted in playguard_marquees_not_ok_unshown. Marquees that are ok "
        "are counted, never shown one by one.",
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

    @field_validator("web_trusted_proxies")
    @classmethod
    def _web_trusted_proxies_form(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for network in value:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise ValueError(f"{network[:80]!r}: not an address or CIDR network") from None
        return value

    @field_validator("web_proxy_group_roles")
    @classmethod
    def _web_proxy_group_roles_form(cls, value: dict[str, str]) -> dict[str, str]:
        for group, role in value.items():
            if role not in WEB_ROLES:
                raise ValueError(
                    f"group {group[:80]!r}: role {role[:40]!r} is not one of {', '.join(WEB_ROLES)}"
                )
        return value

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

    @model_validator(mode="after")
    def _web_view_beyond_loopback_has_a_credential(self) -> HttpSettings:
        bind = self.http_bind()
        if (
            self.web_view
            and bind is not None
            and self.web_credential_file is None
            and not self.web_trusted_proxies
            and not is_loopback(bind[0])
        ):
            raise ValueError(
                f"http_address {self.http_address} is beyond loopback: the web view there needs "
                "web_credential_file or web_trusted_proxies (or web_view = false)"
            )
        return self

    @model_validator(mode="after")
    def _metrics_credential_is_set(self) -> HttpSettings:
        if self.metrics_require_credential and self.web_credential_file is None:
            raise ValueError("metrics_require_credential needs web_credential_file")
        return self

    def http_bind(self) -> tuple[str, int] | None:
        """The host and port to serve HTTP on, or None when ``http_address`` is empty."""
        return parse_http_address(self.http_address) if self.http_address else None


class NotificationSettings(BaseModel):
    """Where Marquee health changes, lost locks and refused writes are told, and how often."""

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

    @field_validator("webhook_url")
    @classmethod
    def _webhook_url_form(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            url = urlsplit(value.get_secret_value())
            if url.scheme not in ("http", "https") or not url.hostname:
                raise ValueError("must be an http:// or https:// URL with a host")
        return value


class LogSettings(BaseModel):
    """How the daemon's log is written, and where its cycles' traces go."""

    log_format: Literal["json", "console", "auto"] = Field(
        "auto", description="json, console, or auto (console on a TTY, json elsewhere)."
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field("info")
    otlp_endpoint: str = Field(
        "",
        description="OTLP/HTTP URL the cycles' traces are sent to (e.g. "
        "http://127.0.0.1:4318/v1/traces): http:// only to a loopback host, https:// beyond; "
        "OTEL_* variables never choose it. Empty: no tracing code runs.",
    )
    otlp_headers: SecretStr | None = Field(
        None,
        description="Headers sent with each export, as name=value,name=value (an API key); a "
        "secret: never logged or put in a span.",
    )
    otlp_timeout: float = _seconds(
        5.0, description="Seconds one export to otlp_endpoint may take, retries included."
    )
    trace_queue_size: int = Field(
        2048,
        ge=1,
        le=1_000_000,
        description="Finished spans waiting for export at most; while the endpoint is down or "
        "slow, further spans are dropped and counted, never waited for.",
    )
    trace_sample_ratio: float = Field(
        0.1,
        ge=0.0,
        le=1.0,
        allow_inf_nan=False,
        description="Share of cycles traced, 0 to 1, chosen by trace ID (a cycle's phases and "
        "renewals follow it); the default keeps a 10,000-Marquee replica's spans within "
        "trace_queue_size while one export takes otlp_timeout.",
    )

    @field_validator("otlp_endpoint")
    @classmethod
    def _otlp_endpoint_form(cls, value: str) -> str:
        if value:
            url = urlsplit(value)
            if url.scheme not in ("http", "https") or not url.hostname:
                raise ValueError("must be an http:// or https:// URL with a host")
            if url.scheme == "http" and not is_loopback(url.hostname):
                raise ValueError(f"{url.hostname} is beyond loopback: use https://")
            if url.username or url.password:
                raise ValueError("no credentials in the URL: put them in otlp_headers")
        return value

    @field_validator("otlp_headers")
    @classmethod
    def _otlp_headers_form(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            otlp_header_pairs(value.get_secret_value())
        return value


def otlp_header_pairs(text: str) -> dict[str, str]:
    """``name=value,name=value`` as a mapping; a malformed pair is refused without its value."""
    pairs = {}
    for index, item in enumerate(filter(None, (part.strip() for part in text.split(",")))):
        name, equals, header_value = item.partition("=")
        if not equals or not name.strip():
            raise ValueError(f"otlp_headers: pair {index + 1} is not name=value")
        pairs[name.strip()] = header_value.strip()
    return pairs
