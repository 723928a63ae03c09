"""The web view's named users: the users file (``web_credential_file``), one line per user,
``name role secret-hash``, and the check of a password against it.

The hash is argon2id (``argon2-cffi``): slow on purpose, so a copied file is costly to guess
from. A file in the old format (one shared secret on one line) is refused with the line and the
``add-user`` command that replaces it: a plain secret is never accepted as a hash, and never
echoed in an error. Every line is outside input: an error names the file, the line, the field and
at most ``SHOWN_VALUE`` characters of its value (never of a hash field).

The file is read again when it changes (``UsersFile.current``: one ``stat`` per request, its
inode, size and times compared), so a user removed from it is refused at their next request.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import hmac
import os
import re
import secrets
import tempfile
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from playguard_async.kits.files import FileRefused, read_limited, signature_of
from playguard_async.settings import SettingsError
from playguard_async.settings.sections import WEB_ROLES

log = structlog.get_logger("playguard.web")

USERS_FILE_LIMIT = 1 << 20
"""Bytes a users file may hold: some thousands of users."""

SHOWN_VALUE = 40
"""Characters of a bad value an error quotes at most."""

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
"""A user name: what a log line, a pause's ``who`` and a page show without escaping trouble."""

HASH_PREFIX = "$argon2id$"
HASH_LIMIT = 512

VERIFY_CONCURRENCY = 2
"""argon2 verifications running at once (each takes tens of ms and 64 MiB): more wait their
turn in threads' stead, so a flood of logins cannot take the machine's memory."""

VERIFY_QUEUE = 16
"""Verifications waiting for their turn at most; one more is refused at once (``VerifyRefused``),
so a login waits for at most this many verifications before its own, however many are sent."""

DECOY_HASH = (
    "$argon2id$v=19$m=65536,t=3,p=4$4X7GfGh1onnd9kB0k7+wQA$utojcL"
    "MSnAf7HyF+DDUkqZXEXtlZ5NKwKEHNzAJVrig"
)
"""What an unknown user's password is checked against: the hash of a random secret nobody
kept, at the hasher's default cost, so a refusal takes as long whether the name exists or not."""

VERIFIED_KEPT = 256
"""(user, password) pairs remembered as verified: basic auth sends the password with every request
(a page's stream and fetches too), and each must not cost an argon2 run."""


class Role(enum.IntEnum):
    """What a user may do, each role everything the one below may."""

    VIEWER = 1
    OPERATOR = 2
    ADMIN = 3

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def named(cls, text: str) -> Role | None:
        return cls.__members__.get(text.upper()) if text.islower() else None


ROLE_NAMES = WEB_ROLES


@dataclass(frozen=True)
class WebUser:
    name: str
    role: Role
    secret_hash: str


class UsersFileError(SettingsError):
    """A users file that cannot be used; the message names the file, line, field and value."""


class OldFormat(UsersFileError):
    """A file of one shared secret, the format before named users: ``add-user`` replaces it."""


def _shown(value: str) -> str:
    cut = value[:SHOWN_VALUE]
    return repr(cut) + ("..." if len(value) > SHOWN_VALUE else "")


def parse_users(text: str, path: Path) -> dict[str, WebUser]:
    """The users of ``text`` (the file ``path``) by name; ``UsersFileError`` on the first bad
    line. Blank lines and lines starting with ``#`` are skipped; a CRLF line end is a line end.

    A file of one line that is not a users line is taken for the old format (one shared secret,
    which may hold spaces): refused without quoting any of it."""
    lines = [
        (number, line)
        for number, raw in enumerate(text.split("\n"), start=1)
        if (line := raw.removesuffix("\r")).strip() and not line.lstrip().startswith("#")
    ]
    users: dict[str, WebUser] = {}
    for number, line in lines:
        where = f"{path}: line {number}"
        try:
            user = _parse_line(line, where)
        except _BadField as exc:
            if len(lines) == 1 and not _looks_like_users_line(line):
                raise OldFormat(
                    f"{where}: not a `name role secret-hash` line, as in the old format of one "
                    f"shared secret: write named users with `playguard web add-user NAME ROLE "
                    f"--file {path}` (roles {', '.join(ROLE_NAMES)})"
                ) from None
            raise UsersFileError(str(exc)) from None
        if user.name in users:
            raise UsersFileError(f"{where}: field name {_shown(user.name)}: a second line for it")
        users[user.name] = user
    return users


def _looks_like_users_line(line: str) -> bool:
    """Whether ``line`` is meant as ``name role secret-hash`` (three fields, the last an argon2id
    hash), however wrong its name or role: such a file is refused, not taken for the old format
    and replaced."""
    fields = line.split()
    return len(fields) == 3 and fields[2].startswith(HASH_PREFIX)


class _BadField(Exception):
    """A line that is not ``name role secret-hash``; its hash is never quoted."""


def _parse_line(line: str, where: str) -> WebUser:
    fields = line.split()
    if len(fields) != 3:
        raise _BadField(f"{where}: {len(fields)} fields, expected 3 (name role secret-hash)")
    name, role_text, secret_hash = fields
    if not NAME.fullmatch(name):
        raise _BadField(
            f"{where}: field name {_shown(name)}: letters, digits and . _ @ - only, "
            "at most 64, starting with a letter or digit"
        )
    role = Role.named(role_text)
    if role is None:
        raise _BadField(f"{where}: field role {_shown(role_text)}: one of {', '.join(ROLE_NAMES)}")
    if (
        not secret_hash.startswith(HASH_PREFIX)
        or len(secret_hash) > HASH_LIMIT
        or not secret_hash.isascii()
        or not secret_hash.isprintable()
    ):
        # Never quoted: it may be a plain secret written where the hash belongs.
        raise UsersFileError(
            f"{where}: field secret-hash of user {name}: not an argon2id hash (it starts "
            f"{HASH_PREFIX}); write it with `playguard web add-user {name} {role.label}`"
        )
    return WebUser(name, role, secret_hash)


def read_users(path: Path) -> tuple[dict[str, WebUser], tuple[int, ...]]:
    """The users of the file ``path`` and its signature (``kits.files.signature_of``)."""
    try:
        content = read_limited(path, USERS_FILE_LIMIT, private=True)
    except FileRefused as exc:
        raise UsersFileError(f"web_credential_file {path}: {exc.reason}") from None
    try:
        text = content.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsersFileError(
            f"{path}: not UTF-8 text (byte 0x{content.data[exc.start]:02x} at offset {exc.start})"
        ) from None
    return parse_users(text, path), content.signature


class UsersFile:
    """The users of ``path`` as it is now: read at start (a bad file stops the start), and again
    at the first request after it changed. A file gone bad meanwhile admits nobody until it is
    fixed (logged once per change), rather than the users it held before."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.users, self.signature = read_users(path)

    def current(self) -> dict[str, WebUser]:
        try:
            signature = signature_of(os.stat(self.path, follow_symlinks=False))
        except OSError:
            signature = ()
        if signature != self.signature:
            self.signature = signature
            try:
                self.users, self.signature = read_users(self.path)
                log.info("web.users_read", file=str(self.path), users=len(self.users))
            except UsersFileError as exc:
                self.users = {}
                log.error("web.users_unusable", error=str(exc))
        return self.users

    def user(self, name: str) -> WebUser | None:
        return self.current().get(name)


class VerifyRefused(Exception):
    """A verification not run: ``busy`` (``VERIFY_QUEUE`` already waiting) or ``gone`` (the
    client left before its turn came)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class PasswordCheck:
    """argon2id verification off the event loop (``asyncio.to_thread``), ``VERIFY_CONCURRENCY`` at
    once and ``VERIFY_QUEUE`` waiting at most; a pair verified is remembered (keyed by an HMAC
    under a key of this process, with the hash it was verified against) so basic auth's every
    request does not cost a run."""

    def __init__(self) -> None:
        self.hasher = PasswordHasher()
        self.slots = asyncio.Semaphore(VERIFY_CONCURRENCY)
        self.waiting = 0
        self._key = secrets.token_bytes(32)
        self._verified: OrderedDict[bytes, None] = OrderedDict()

    def _remembered(self, user: WebUser, password: str) -> bytes:
        message = f"{user.name}\n{user.secret_hash}\n{password}".encode("utf-8", "surrogatepass")
        return hmac.new(self._key, message, hashlib.sha256).digest()

    def known(self, user: WebUser | None, password: str) -> bool:
        """Whether ``password`` was verified as ``user``'s before (and is remembered)."""
        return user is not None and self._remembered(user, password) in self._verified

    async def verify(
        self, user: WebUser | None, password: str, *, wanted: Callable[[], bool] = lambda: True
    ) -> bool:
        """Whether ``password`` is ``user``'s; an unknown user (None) costs as much as a known
        one, so the time of a refusal does not tell which names exist. ``VerifyRefused`` when
        the queue is full, or when ``wanted`` says no more at its turn (the client left)."""
        if user is not None:
            key = self._remembered(user, password)
            if key in self._verified:
                self._verified.move_to_end(key)
                return True
        if self.waiting >= VERIFY_QUEUE:
            raise VerifyRefused("busy")
        secret_hash = DECOY_HASH if user is None else user.secret_hash
        self.waiting += 1
        try:
            await self.slots.acquire()
        finally:
            self.waiting -= 1
        try:
            if not wanted():
                raise VerifyRefused("gone")
            ok = await asyncio.to_thread(self._check, secret_hash, password)
        finally:
            self.slots.release()
        if ok and user is not None:
            self._verified[key] = None
            if len(self._verified) > VERIFIED_KEPT:
                self._verified.popitem(last=False)
        return ok and user is not None

    def _check(self, secret_hash: str, password: str) -> bool:
        try:
            return self.hasher.verify(secret_hash, password.encode("utf-8", "surrogatepass"))
        except (VerificationError, InvalidHashError, UnicodeError):
            return False


def password_problem(password: str, min_length: int) -> str | None:
    """Why ``password`` may not be a user's (None: it may): shorter than ``min_length``
    characters, or nothing but white space."""
    if not password.strip():
        return "an empty or blank password: give one"
    if len(password) < min_length:
        length = len(password)
        return f"a password of {length} characters: at least {min_length} (web_password_min_length)"
    return None


def hash_password(password: str) -> str:
    return PasswordHasher().hash(password)


def add_user(path: Path, name: str, role: Role, password: str) -> str:
    """Write ``name`` with ``role`` and ``password``'s hash into the users file ``path``,
    replacing its line if it has one, keeping every other line as it is; what it did, in words.
    A file in the old format (one shared secret) is replaced whole: that is how it is moved to
    named users. The file is written whole beside itself and renamed over (mode 0600), so a daemon
    reading it sees the old file or the new one, never half of one. A file that is not a users
    file otherwise (a bad line) is refused, not overwritten."""
    if not NAME.fullmatch(name):
        raise UsersFileError(f"user name {_shown(name)}: letters, digits and . _ @ - only")
    if not path.parent.is_dir():
        raise UsersFileError(f"{path}: its directory {path.parent} does not exist")
    lines: list[str] = []
    done = f"added {name} ({role.label}) to {path}"
    if path.exists():
        try:
            read_users(path)  # the whole file checked before anything is kept of it
            lines = read_limited(path, USERS_FILE_LIMIT, private=True).data.decode().splitlines()
        except OldFormat:
            done = f"replaced the old shared secret of {path} by user {name} ({role.label})"
    entry = f"{name} {role.label} {hash_password(password)}"
    for index, line in enumerate(lines):
        if line.split()[:1] == [name]:
            lines[index] = entry
            done = f"replaced {name}'s line in {path} (now {role.label})"
    if entry not in lines:
        lines.append(entry)
    try:
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as exc:
        raise UsersFileError(f"{path}: cannot write beside it: {exc.strerror}") from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:  # mkstemp's mode: 0600
            out.write("\n".join(lines) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return done
