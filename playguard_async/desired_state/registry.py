"""The one place the ``desired_state`` setting is read: which source a value names, whether it is
well formed, how the source is built, and whether ``playguard db`` can work on it.

Settings validation, the daemon's wiring and ``playguard db`` all ask ``source_kind``; a new source
is its own module (or package) plus one entry in ``SOURCE_KINDS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from playguard_async.desired_state.postgres.connection import (
    DatabaseError,
    PasswordSource,
    PgAddress,
    is_postgresql_url,
)
from playguard_async.desired_state.source import DesiredState
from playguard_async.desired_state.yaml_source import YamlInventorySource


class SourceSettings(Protocol):
    """What the sources read from the settings (``playguard_async.settings.Settings`` has it)."""

    @property
    def desired_state(self) -> str: ...
    @property
    def inventory(self) -> Path: ...
    @property
    def inventory_max_bytes(self) -> int: ...
    @property
    def inventory_read_timeout(self) -> float: ...
    @property
    def desired_state_timeout(self) -> float: ...
    @property
    def desired_state_probe_interval(self) -> float: ...
    @property
    def desired_state_schema(self) -> str: ...
    @property
    def replica_id(self) -> str: ...
    @property
    def audit_checkpoint_file(self) -> Path | None: ...
    @property
    def audit_checkpoint_key_file(self) -> Path | None: ...
    def database_password(self) -> PasswordSource: ...


@dataclass(frozen=True)
class SourceKind:
    """One kind of desired-state source, as the ``desired_state`` setting names it."""

    name: str
    """How the settings, the errors and the docs call it."""
    names: Callable[[str], bool]
    """Whether a ``desired_state`` value names this kind."""
    check: Callable[[str], None]
    """Raises ValueError, saying what is wrong (never a password), for a malformed value."""
    build: Callable[[SourceSettings], DesiredState]
    """The source the settings name. May raise ``DatabaseError`` for a password file that
    cannot be read: a configuration error, which the caller reports as one."""
    database: bool
    """Whether ``playguard db`` (migrate, import, export, check) works on it."""


def _yaml_source(settings: SourceSettings) -> DesiredState:
    return YamlInventorySource(
        settings.inventory,
        max_bytes=settings.inventory_max_bytes,
        timeout=settings.inventory_read_timeout,
    )


def _postgres_source(settings: SourceSettings) -> DesiredState:
    """The PostgreSQL source with its password source and its observed-state writer; a password
    file (or checkpoint key file) that cannot be read raises now, as a malformed URL is refused:
    only the database itself being out of reach is waited out."""
    # Imported here: asyncpg is loaded only where the settings name a database.
    from playguard_async.desired_state.postgres.audit_checkpoint import (  # noqa: PLC0415
        CheckpointError,
        CheckpointWriter,
    )
    from playguard_async.desired_state.postgres.observed_state import ObservedStateWriter  # noqa: PLC0415
    from playguard_async.desired_state.postgres.source import PostgresDesiredState  # noqa: PLC0415

    address, password = PgAddress.parse(settings.desired_state), settings.database_password()
    password()
    checkpoints = None
    if settings.audit_checkpoint_file is not None and settings.audit_checkpoint_key_file:
        try:
            checkpoints = CheckpointWriter(
                settings.audit_checkpoint_file, settings.audit_checkpoint_key_file
            )
        except CheckpointError as exc:
            raise DatabaseError(f"audit_checkpoint_key_file {exc}") from None
    return PostgresDesiredState(
        address,
        password,
        timeout=settings.desired_state_timeout,
        validate_timeout=settings.inventory_read_timeout,
        max_bytes=settings.inventory_max_bytes,
        probe_interval=settings.desired_state_probe_interval,
        observed=ObservedStateWriter(
            address,
            password,
            replica=settings.replica_id,
            timeout=settings.desired_state_timeout,
            schema=settings.desired_state_schema,
        ),
        schema=settings.desired_state_schema,
        checkpoints=checkpoints,
    )


def _check_yaml(value: str) -> None:
    return None


def _check_postgresql(value: str) -> None:
    PgAddress.parse(value)


SOURCE_KINDS: tuple[SourceKind, ...] = (
    SourceKind("yaml", "yaml".__eq__, _check_yaml, _yaml_source, database=False),
    SourceKind("postgresql", is_postgresql_url, _check_postgresql, _postgres_source, database=True),
)


def source_kind(value: str) -> SourceKind:
    """The kind of source ``value`` (a ``desired_state`` setting) names, its form checked;
    ValueError naming what is wrong otherwise."""
    for kind in SOURCE_KINDS:
        if kind.names(value):
            kind.check(value)
            return kind
    raise ValueError("must be 'yaml' or a postgresql://user@host:port/database URL")
