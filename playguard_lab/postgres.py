"""The lab's PostgreSQL: Debian's server, ``initdb`` in the lab's directory, its own port on
127.0.0.1 and its own unix socket directory, stopped by its PID like every lab server.

PostgreSQL refuses to run as root, so when the lab runs as root the cluster belongs to the
``postgres`` system user (Debian's package makes it) and both ``initdb`` and the server are started
through ``setpriv`` as that user. That user cannot reach a lab directory under ``/root`` (0700), and
the lab changes the mode of no directory it did not make: the cluster (data and socket directories)
then lives in a new directory of its own under the temporary directory (``mkdtemp``: an unguessable
name), which ``cluster`` in the server's directory links to, so a restart finds the same data and
``lab down`` removes it. A temporary directory that user cannot reach either is refused in one
line naming the directory that blocks it. Password logins over TCP (scram-sha-256) are required, so
clients are tested with the password they will need.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import signal
import stat
import tempfile
from pathlib import Path
from types import TracebackType

from playguard_lab.process import (
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


CLUSTER_LINK = "cluster"
"""In the server's directory: the symbolic link to a cluster that lives outside it."""
CLUSTER_PREFIX = "playguard-lab-postgres-"


class ClusterUnreachable(RuntimeError):
    """The server's user cannot reach any directory the lab may put its cluster in; one line."""


def first_unsearchable(path: Path, user: pwd.struct_passwd) -> Path | None:
    """The first directory from ``/`` down to ``path`` that ``user`` (its primary group only, as
    ``setpriv --clear-groups`` runs it) may not search by its mode bits; None when it reaches it."""
    for directory in [*reversed(path.parents), path]:
        try:
            info = directory.stat()
        except OSError:
            return directory
        if info.st_uid == user.pw_uid:
            allowed = info.st_mode & stat.S_IXUSR
        elif info.st_gid == user.pw_gid:
            allowed = info.st_mode & stat.S_IXGRP
        else:
            allowed = info.st_mode & stat.S_IXOTH
        if not allowed:
            return directory
    return None


def relocated_cluster(workdir: Path) -> Path | None:
    """The cluster directory ``workdir``'s link names, when it is one the lab made: an absolute
    path named ``playguard-lab-postgres-*``, a real directory (not a link) that we own."""
    link = workdir / CLUSTER_LINK
    if not link.is_symlink():
        return None
    target = Path(os.readlink(link))
    if not target.is_absolute() or not target.name.startswith(CLUSTER_PREFIX):
        return None
    try:
        info = target.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        return None
    return target


def remove_relocated_cluster(workdir: Path) -> None:
    """Remove the cluster outside ``workdir`` that its link names (once the server has stopped),
    and the link; nothing when there is none."""
    target = relocated_cluster(workdir)
    if target is not None:
        shutil.rmtree(target)
    (workdir / CLUSTER_LINK).unlink(missing_ok=True)


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
        self.cluster_dir = self.workdir
        """Where ``data`` and ``socket`` are: ``workdir`` unless the server runs as another user."""
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

    @property
    def data_dir(self) -> Path:
        return self.cluster_dir / "data"

    @property
    def socket_dir(self) -> Path:
        return self.cluster_dir / "socket"

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stop, and remove a cluster outside ``workdir`` (one inside it goes with it)."""
        self.stop()
        self.remove_cluster()

    def remove_cluster(self) -> None:
        """Remove the cluster if it lives outside ``workdir``; call it once the server stopped."""
        remove_relocated_cluster(self.workdir)

    def _owned_directory(self, path: Path) -> None:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chown(path, self._owner.pw_uid, self._owner.pw_gid)

    def _locate_cluster(self) -> Path:
        """``workdir`` when the server runs as us; else the directory its link names, or a new
        one under the temporary directory: no mode of a directory the lab did not make changes."""
        if self._owner.pw_uid == os.getuid():
            return self.workdir
        existing = relocated_cluster(self.workdir)
        if existing is not None:
            return existing
        parent = Path(tempfile.gettempdir()).absolute()
        blocked = first_unsearchable(parent, self._owner)
        if blocked is not None:
            mode = stat.filemode(blocked.stat().st_mode) if blocked.exists() else "missing"
            raise ClusterUnreachable(
                f"postgres: its user {self._owner.pw_name!r} cannot reach {parent} for the "
                f"lab's cluster ({blocked} is {mode}) and the lab changes no directory it did "
                "not make; set TMPDIR to a directory that user can reach, such as /tmp"
            )
        cluster = Path(tempfile.mkdtemp(prefix=CLUSTER_PREFIX, dir=parent))
        cluster.chmod(0o711)  # ours and new: its user may pass through to its 0700 directories
        link = self.workdir / CLUSTER_LINK
        link.unlink(missing_ok=True)
        link.symlink_to(cluster)
        return cluster

    def _prepare(self) -> None:
        self.cluster_dir = self._locate_cluster()
        self._owned_directory(self.socket_dir)
        if (self.data_dir / "PG_VERSION").exists():
            return
        self._owned_directory(self.data_dir)
        password_file = self.cluster_dir / "initdb-password"
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
            ], cwd=self.cluster_dir)  # fmt: skip
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
            # Names the server's directory on its command line, where `lab down` looks for it
            # when the cluster (its working directory) lives outside the lab's directory.
            "-c", f"playguard.lab_workdir={self.workdir}",
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
