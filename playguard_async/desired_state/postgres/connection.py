"""Where the PostgreSQL desired state lives and how to reach it: the ``desired_state`` URL taken
apart, the password from the settings or a file, and errors that never carry it.

asyncpg is given the URL's parts, never the URL itself: its DSN parser reads query parameters
(``passfile``, ``sslrootcert``, ...) that a setting should not smuggle in, and a password is
refused in the URL so that it cannot reach a log line through ``describe()``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from playguard_async.kits.files import FileRefused, read_text_limited

if TYPE_CHECKING:
    import asyncpg

SCHEMES = ("postgresql", "postgres")

PASSWORD_FILE_LIMIT = 64 << 10
"""Bytes the password file may have."""


DEFAULT_SCHEMA = "playguard"
"""The schema playguard owns in the database (setting ``desired_state_schema``)."""

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_FOREIGN_SCHEMAS = ("public", "information_schema")


def schema_name(value: str) -> str:
    """``value`` when it may name playguard's schema, else ValueError saying why.

    Lower case letters, digits and ``_`` only, so it needs no quoting rules of its own and reads
    the same in SQL, logs and the settings; never ``public`` (the application's namespace, the
    very thing playguard must stay out of), ``information_schema`` or a ``pg_`` name."""
    if not _SCHEMA_NAME.fullmatch(value):
        raise ValueError(
            "must be a schema name of 1-63 characters: a-z, 0-9 and '_', not starting with a digit"
        )
    if value in _FOREIGN_SCHEMAS or value.startswith("pg_"):
        raise ValueError(f"must be a schema of playguard's own, not {value!r}")
    return value


def qualified(schema: str, relation: str) -> str:
    """``"schema"."relation"`` for SQL text; both are names we chose or validated."""
    return f'"{schema}"."{relation}"'


class DatabaseError(RuntimeError):
    """The database cannot be used: one line naming the database and why, never a password."""


def is_postgresql_url(value: str) -> bool:
    return value.split("://", 1)[0].lower() in SCHEMES and "://" in value


@dataclass(frozen=True)
class PgAddress:
    """A ``postgresql://user@host:port/database`` URL's parts (TCP only, no password)."""

    user: str
    host: str
    port: int
    database: str

    @classmethod
    def parse(cls, url: str) -> PgAddress:
        """ValueError, naming what is wrong but never echoing a password, for a malformed URL."""
        if not is_postgresql_url(url):
            raise ValueError("must be 'yaml' or a postgresql://user@host:port/database URL")
        try:
            parts = urlsplit(url)
            port = parts.port or 5432
        except ValueError:
            raise ValueError("must be postgresql://user@host:port/database (bad port)") from None
        if parts.password is not None:
            raise ValueError(
                "must not carry a password: set desired_state_password "
                "(PLAYGUARD_DESIRED_STATE_PASSWORD) or desired_state_password_file"
            )
        if parts.query or parts.fragment:
            raise ValueError("must not carry ?parameters or a #fragment")
        database = unquote(parts.path.removeprefix("/"))
        if not parts.username or not parts.hostname or not database or "/" in database:
            raise ValueError("must name a user, a host and a database: postgresql://user@host/db")
        return cls(unquote(parts.username), parts.hostname, port, database)

    def describe(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"postgresql://{self.user}@{host}:{self.port}/{self.database}"


PasswordSource = Callable[[], str | None]
"""Gives the password when a connection is made, so a rotated file is picked up."""


def password_from(value: str | None, file: Path | None) -> PasswordSource:
    """The password given in the settings, else read from ``file`` at each connect, else none."""

    def read() -> str | None:
        if value is not None:
            return value
        if file is None:
            return None
        try:
            return read_text_limited(file, PASSWORD_FILE_LIMIT).strip() or None
        except FileRefused as exc:
            raise DatabaseError(f"desired_state_password_file {file}: {exc.reason}") from None

    return read


def redacted(message: str, password: str | None) -> str:
    """``message`` on one line, with the password (should a server echo it) masked."""
    if password:
        message = message.replace(password, "***")
    return re.sub(r"\s*[\r\n]+\s*", " ", message).strip()


async def connect(
    address: PgAddress, password: PasswordSource, *, timeout: float
) -> asyncpg.Connection:
    """A connection, or DatabaseError saying why in one line (password masked)."""
    import asyncpg  # noqa: PLC0415 - settings import this module; only a connection needs asyncpg

    secret = password()
    try:
        return await asyncpg.connect(
            host=address.host,
            port=address.port,
            user=address.user,
            database=address.database,
            password=secret,
            timeout=timeout,
            command_timeout=timeout,
            server_settings={"application_name": "playguard"},
        )
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise DatabaseError(
            f"{address.describe()}: cannot connect: {redacted(error_text(exc), secret)}"
        ) from None


def error_text(exc: BaseException) -> str:
    """An exception as ``Type: message`` (the type alone when it has none); not yet one line
    nor masked: pass it through ``redacted``."""
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
