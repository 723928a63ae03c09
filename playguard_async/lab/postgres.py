"""The lab's PostgreSQL: Debian's server, ``initdb`` in the lab's directory, its own port on
127.0.0.1 and its own unix socket directory, stopped by its PID like every lab server.

PostgreSQL refuses to run as root, so when the lab runs as root the cluster belongs to the
``postgres`` system user (Debian's package makes it) and both ``initdb`` and the server are started
through ``setpriv`` as that user; the lab's directories on the way to the data directory get the
search bit for others (never read), or the server could not reach its own files. Password logins
over TCP (scram-sha-256) are required, so clients are tested with the password they will need.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import signal
import stat
from pathlib import Path

from playguard_async.lab.process import (
    LabCommandFailed,
    LabServer,
    MissingBinary,
    find_binary,
    free_port,
    run_command,
)

POSTGRES_PACKAGE = "postgresql"
SERVER_USER = "postgres"
"""The system user Debian's postgresql package creates; the cluster's owner when we are root."""


def postgres_binaries() -> Path:
    """The newest installed ``/usr/lib/postgresql/N/bin`` (Debian keeps them off PATH)."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/postgres"),
        key=lambda path: int(path.parent.parent.name) if path.parent.parent.name.isdigit() else 0,
    )
    if not found:
        raise MissingBinary("postgres", POSTGRES_PACKAGE, "not found in /usr/lib/postgresql/*/bin")
    return found[-1].parent


def _open_ancestors_for_search(path: Path) -> None:
    """Give others the search bit (x, not r) on our own directories from ``path`` up, so the
    server's user can walk to its data directory under a test's private temp directory."""
    for directory in [path, *path.parents]:
        with contextlib.suppress(OSError):
            info = directory.stat()
            if info.st_uid == os.getuid() and not info.st_mode & stat.S_IXOTH:
                directory.chmod(stat.S_IMODE(info.st_mode) | stat.S_IXOTH)


class PostgresServer(LabServer):
    """One PostgreSQL cluster: superuser ``user`` with a random ``password``, database
    ``postgres``; ``url`` leaves the password out, as the daemon's setting does."""

    name = "postgres"
    start_timeout = 60.0
    stop_signal = signal.SIGINT  # "fast" shutdown: SIGTERM would wait for every client to leave

    def __init__(self, workdir: Path, *, user: str = "playguard") -> None:
        super().__init__(workdir)
        binaries = postgres_binaries()
        self._postgres = str(binaries / "postgres")
        self._initdb = str(binaries / "initdb")
        self._pg_isready = str(binaries / "pg_isready")
        self._owner = self._server_user()
        self._as_owner = (
            [find_binary("setpriv", "util-linux"),
             f"--reuid={self._owner.pw_uid}", f"--regid={self._owner.pw_gid}",
             "--clear-groups", "--"]
            if os.geteuid() == 0
            else []
        )  # fmt: skip
        self.user = user
        self.password = secrets.token_urlsafe(18)
        self.port = free_port()
        self.data_dir = self.workdir / "data"
        self.socket_dir = self.workdir / "socket"
        self.url = f"postgresql://{user}@127.0.0.1:{self.port}/postgres"

    @staticmethod
    def _server_user() -> pwd.struct_passwd:
        if os.geteuid() != 0:
            return pwd.getpwuid(os.getuid())
        try:
            return pwd.getpwnam(SERVER_USER)
        except KeyError:
            raise MissingBinary(
                "postgres", POSTGRES_PACKAGE, f"system user {SERVER_USER!r} does not exist"
            ) from None

    def url_of(self, database: str) -> str:
        """The URL of another database of this server (no password: it is ``password``)."""
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def _owned_directory(self, path: Path) -> None:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chown(path, self._owner.pw_uid, self._owner.pw_gid)

    def _prepare(self) -> None:
        _open_ancestors_for_search(self.workdir)
        self._owned_directory(self.socket_dir)
        if (self.data_dir / "PG_VERSION").exists():
            return
        self._owned_directory(self.data_dir)
        password_file = self.workdir / "initdb-password"
        password_file.write_text(self.password + "\n")
        password_file.chmod(0o600)
        os.chown(password_file, self._owner.pw_uid, self._owner.pw_gid)
        try:
            run_command([
                *self._as_owner, self._initdb,
                "-D", str(self.data_dir),
                "-U", self.user,
                f"--pwfile={password_file}",
                "--auth-host=scram-sha-256",
                "--auth-local=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ], cwd=self.workdir)  # fmt: skip
        except LabCommandFailed:
            # A half-made data directory would make every later start fail the same odd way.
            run_command(["rm", "-rf", "--", str(self.data_dir)])
            raise
        finally:
            password_file.unlink(missing_ok=True)

    def _command(self) -> list[str]:
        return [
            *self._as_owner, self._postgres,
            "-D", str(self.data_dir),
            "-p", str(self.port),
            "-k", str(self.socket_dir),
            "-c", "listen_addresses=127.0.0.1",
            # A throwaway cluster: durability costs time and buys nothing here.
            "-c", "fsync=off",
            "-c", "synchronous_commit=off",
            "-c", "full_page_writes=off",
        ]  # fmt: skip

    def _ready(self) -> bool:
        try:
            run_command(
                [self._pg_isready, "-q", "-h", "127.0.0.1", "-p", str(self.port), "-t", "1"],
                timeout=5.0,
            )
        except LabCommandFailed:
            return False
        return True
