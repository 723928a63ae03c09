"""A web application's own database, Rails style, for playguard to live in: the app's tables in
``public`` (``bigserial`` ids, ``varchar``, ``timestamp(6)``, ``schema_migrations``), the views
that map them into playguard's schema (as the README's integration guide writes them), the
wake-up triggers, and the limited role playguard connects as."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from playguard_lab.postgres import postgres_binaries
from tests.support.postgres import LabDatabase

RAILS_SCHEMA = """
CREATE TABLE public.schema_migrations (version character varying NOT NULL PRIMARY KEY);
CREATE TABLE public.ar_internal_metadata (
    key character varying NOT NULL PRIMARY KEY, value character varying,
    created_at timestamp(6) without time zone NOT NULL,
    updated_at timestamp(6) without time zone NOT NULL);
CREATE TABLE public.marquees (
    id bigserial PRIMARY KEY, name character varying NOT NULL UNIQUE,
    hostname character varying NOT NULL, ssh_port integer NOT NULL DEFAULT 22,
    launchable boolean NOT NULL DEFAULT true,
    created_at timestamp(6) without time zone NOT NULL DEFAULT now(),
    updated_at timestamp(6) without time zone NOT NULL DEFAULT now());
CREATE TABLE public.playgrounds (
    id bigserial PRIMARY KEY, marquee_id bigint NOT NULL REFERENCES public.marquees (id),
    name character varying NOT NULL UNIQUE, spec character varying NOT NULL,
    branch character varying NOT NULL DEFAULT 'main',
    status character varying NOT NULL DEFAULT 'running',
    expires_at timestamp(6) without time zone,
    created_at timestamp(6) without time zone NOT NULL DEFAULT now(),
    updated_at timestamp(6) without time zone NOT NULL DEFAULT now());
CREATE INDEX index_playgrounds_on_marquee_id ON public.playgrounds (marquee_id);
CREATE TABLE public.agent_chats (
    id bigserial PRIMARY KEY, playground_id bigint NOT NULL REFERENCES public.playgrounds (id),
    name character varying NOT NULL UNIQUE, image character varying NOT NULL,
    command character varying[] NOT NULL, closed boolean NOT NULL DEFAULT false,
    created_at timestamp(6) without time zone NOT NULL DEFAULT now(),
    updated_at timestamp(6) without time zone NOT NULL DEFAULT now());
INSERT INTO public.schema_migrations VALUES ('20240101000000'), ('20240215093000');
INSERT INTO public.ar_internal_metadata VALUES ('environment', 'production', now(), now());
"""

TRIGGERS = """
CREATE TRIGGER playguard_notify AFTER INSERT OR UPDATE OR DELETE ON public.marquees
    FOR EACH ROW EXECUTE FUNCTION playguard.notify_marquee('name');
CREATE TRIGGER playguard_notify AFTER INSERT OR UPDATE OR DELETE ON public.playgrounds
    FOR EACH ROW EXECUTE FUNCTION playguard.notify_marquee('marquee_id',
        'SELECT name FROM public.marquees WHERE id = ANY ($1::bigint[])');
CREATE TRIGGER playguard_notify AFTER INSERT OR UPDATE OR DELETE ON public.agent_chats
    FOR EACH ROW EXECUTE FUNCTION playguard.notify_marquee('playground_id',
        'SELECT m.name FROM public.marquees m JOIN public.playgrounds p ON p.marquee_id = m.id
         WHERE p.id = ANY ($1::bigint[])');
CREATE TRIGGER playguard_truncate BEFORE TRUNCATE ON public.agent_chats
    FOR EACH STATEMENT EXECUTE FUNCTION playguard.playguard_table_truncated('playground_id',
        'SELECT m.name FROM public.marquees m JOIN public.playgrounds p ON p.marquee_id = m.id
         WHERE p.id = ANY ($1::bigint[])');
"""
"""As the README shows them: run by the application's owner, never by playguard."""

DROP_MAPPED_TABLES = "DROP TABLE playguard.agent_chats, playguard.playgrounds, playguard.marquees;"

PLAYGROUNDS_VIEW = """
CREATE VIEW playguard.playgrounds AS
SELECT p.name, p.spec AS playspec, m.name AS marquee, p.branch,
       CASE p.status WHEN 'stopped' THEN 'stopped' ELSE 'running' END AS state,
       p.expires_at AT TIME ZONE 'UTC' AS expires_at, false AS stop_when_branch_gone
FROM public.playgrounds p JOIN public.marquees m ON m.id = p.marquee_id;
"""

AGENT_CHATS_VIEW = """
CREATE VIEW playguard.agent_chats AS
SELECT c.name, p.name AS playground, c.image, c.command,
       CASE WHEN c.closed THEN 'closed' ELSE 'active' END AS state
FROM public.agent_chats c JOIN public.playgrounds p ON p.id = c.playground_id;
"""

ACCESS_COLUMNS = ("user", "identity_file", "known_hosts", "docker_socket", "workdir", "state_dir")
"""What a Marquee needs that the application does not keep: fleet-wide constants in the
README's view; per host here, since every lab host has its own keys and directories."""


def literal(value: object) -> str:
    """A SQL literal for the test's own values (paths, names)."""
    if value is None:
        return "NULL"
    return "'" + str(value).replace("'", "''") + "'"


def marquees_view(access: Mapping[str, Mapping[str, Any]]) -> str:
    """``playguard.marquees`` over ``public.marquees``, joined to each Marquee's access details."""
    rows = ",\n    ".join(
        "(" + ", ".join([literal(name), *(literal(fields.get(c)) for c in ACCESS_COLUMNS)]) + ")"
        for name, fields in access.items()
    )
    columns = ", ".join(f'"{column}"' for column in ACCESS_COLUMNS)
    return f"""
CREATE VIEW playguard.marquees AS
SELECT m.name, m.hostname AS host, m.ssh_port AS port, a."user", a.identity_file,
       a.known_hosts, coalesce(a.docker_socket, '/var/run/docker.sock') AS docker_socket,
       a.workdir, a.state_dir, m.launchable
FROM public.marquees m
JOIN (VALUES
    {rows}) AS a(name, {columns}) ON a.name = m.name;
"""


@dataclass
class AppFleet:
    """The application's rows: Marquees (with their access details for the view), Playgrounds
    and AgentChats as the app keeps them."""

    marquees: list[dict[str, Any]] = field(default_factory=list)
    playgrounds: list[dict[str, Any]] = field(default_factory=list)
    agent_chats: list[dict[str, Any]] = field(default_factory=list)

    def access(self) -> dict[str, dict[str, Any]]:
        return {m["name"]: {c: m.get(c) for c in ACCESS_COLUMNS} for m in self.marquees}


async def create_app(database: LabDatabase, fleet: AppFleet) -> None:
    """The application's schema and rows, as its owner (the test's superuser) writes them."""
    connection = await database.connect()
    try:
        await _create_app(connection, fleet)
    finally:
        await connection.close()


async def execute_in(database: LabDatabase, sql: str) -> None:
    """Run ``sql`` on a connection of its own to ``database`` (as its user)."""
    connection = await database.connect()
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


async def _create_app(connection: asyncpg.Connection, fleet: AppFleet) -> None:
    await connection.execute(RAILS_SCHEMA)
    for marquee in fleet.marquees:
        await connection.execute(
            "INSERT INTO public.marquees (name, hostname, ssh_port, launchable) "
            "VALUES ($1, $2, $3, $4)",
            marquee["name"], marquee["host"], marquee["port"], marquee.get("launchable", True),
        )  # fmt: skip
    for playground in fleet.playgrounds:
        await connection.execute(
            "INSERT INTO public.playgrounds (marquee_id, name, spec, branch) "
            "SELECT id, $2, $3, $4 FROM public.marquees WHERE name = $1",
            playground["marquee"], playground["name"], playground["playspec"],
            playground["branch"],
        )  # fmt: skip
    for chat in fleet.agent_chats:
        await connection.execute(
            "INSERT INTO public.agent_chats (playground_id, name, image, command) "
            "SELECT id, $2, $3, $4 FROM public.playgrounds WHERE name = $1",
            chat["playground"], chat["name"], chat["image"], chat["command"],
        )  # fmt: skip


def mapping_sql(fleet: AppFleet) -> str:
    """What the app's owner runs as playguard's role once ``db migrate`` made the tables: the
    three app-kept relations become views (registries and playspecs stay playguard's tables)."""
    return "\n".join(
        (DROP_MAPPED_TABLES, marquees_view(fleet.access()), PLAYGROUNDS_VIEW, AGENT_CHATS_VIEW)
    )


@dataclass(frozen=True)
class LimitedRole:
    """A login role that may create only in playguard's schema: no superuser, no CREATE on the
    database or on ``public``; SELECT on the app's tables the views read."""

    name: str
    database: LabDatabase
    """The test's database as this role reaches it."""


GRANTS = """
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT SELECT ON public.marquees, public.playgrounds, public.agent_chats TO {role};
"""


@asynccontextmanager
async def limited_role(
    admin: LabDatabase, *, schema: str | None = "owned"
) -> AsyncIterator[LimitedRole]:
    """Create the role (and, as a DBA would, playguard's schema: ``owned`` by the role, or
    ``granted`` USAGE and CREATE on it, or None: not made); drop all it owns and it at the end."""
    name = f"guard_{secrets.token_hex(5)}"
    password = secrets.token_urlsafe(12)
    connection = await admin.connect()
    try:
        await connection.execute(
            f"CREATE ROLE {name} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD "
            f"{literal(password)}"
        )
        await connection.execute(GRANTS.format(role=name))
        if schema == "owned":
            await connection.execute(f"CREATE SCHEMA playguard AUTHORIZATION {name}")
        elif schema == "granted":
            await connection.execute("CREATE SCHEMA playguard")
            await connection.execute(f"GRANT USAGE, CREATE ON SCHEMA playguard TO {name}")
        url = admin.url.replace(f"{admin.server.user}@", f"{name}@", 1)
        yield LimitedRole(name, LabDatabase(admin.server, admin.name, url, password))
    finally:
        await connection.execute(f"DROP OWNED BY {name} CASCADE")
        await connection.close()
        # The role owns nothing now; only the server-wide role itself is left.
        server = await asyncpg.connect(admin.server.url, password=admin.server.password)
        try:
            await server.execute(f"DROP ROLE IF EXISTS {name}")
        finally:
            await server.close()


def dump_public(database: LabDatabase) -> str:
    """``pg_dump --schema=public`` of the database, rows included, as its superuser sees it."""
    done = subprocess.run(
        [str(postgres_binaries() / "pg_dump"), "--schema=public", "--no-password",
         # A fixed key for psql's \\restrict line (else random per dump: nothing to compare).
         "--restrict-key=playguardtestdump",
         "-h", "127.0.0.1", "-p", str(database.server.port), "-U", database.server.user,
         database.name],
        env={"PGPASSWORD": database.server.password}, capture_output=True, text=True,
        timeout=60, check=True,
    )  # fmt: skip
    return done.stdout


def sorted_names(records: Sequence[Any]) -> list[str]:
    return sorted(record.name for record in records)
