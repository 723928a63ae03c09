"""Reading the files that outside input names: settings, inventory, SSH keys, password files.

Each is outside input. A path may name ``/dev/zero`` (endless), a FIFO (an ``open`` that blocks
until a writer comes), a directory, or a file of gigabytes; each of those must end in one readable
error, never a hang or a ``MemoryError``. So every such read goes through ``read_limited``: opened
without blocking, refused unless it is a regular file, and read to at most ``limit`` bytes.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path


class FileRefused(ValueError):
    """A file that cannot be read within the bounds; the message names the file and why."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


@dataclass(frozen=True)
class FileContent:
    """The bytes of a file and the stat fields that tell a later read whether it changed."""

    data: bytes
    signature: tuple[int, ...]
    mtime_ns: int


def signature_of(status: os.stat_result) -> tuple[int, ...]:
    """The stat fields that change whenever a file is replaced or written (as git compares them)."""
    return (
        status.st_dev,
        status.st_ino,
        status.st_size,
        status.st_mtime_ns,
        status.st_ctime_ns,
    )


OPEN_TO_OTHERS = stat.S_IRGRP | stat.S_IWGRP | stat.S_IROTH | stat.S_IWOTH
"""The mode bits a file holding a secret must not have: read or write by group or others."""


def read_limited(path: Path, limit: int, *, private: bool = False) -> FileContent:
    """The content of the regular file ``path``, at most ``limit`` bytes; ``FileRefused`` otherwise.

    ``O_NONBLOCK`` makes opening a FIFO return at once (it is then refused as not a regular file);
    on a regular file the flag changes nothing. The size is checked before reading and again by
    reading one byte past the limit, so a file that grows meanwhile is still bounded.

    ``private`` (a file holding a secret): a symbolic link is refused (``O_NOFOLLOW``), and so is
    a file group or others may read or write. Both are judged on the file opened (``fstat`` of its
    descriptor), so a file swapped between the check and the read cannot slip through.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
    if private:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if private and exc.errno == errno.ELOOP:
            raise FileRefused(path, "a symbolic link: name the file itself") from None
        raise FileRefused(path, exc.strerror or str(exc)) from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise FileRefused(path, "not a regular file")
        mode = stat.S_IMODE(status.st_mode)
        if private and mode & OPEN_TO_OTHERS:
            raise FileRefused(
                path, f"mode {mode:04o} lets group or others read or write it: chmod 600 it"
            )
        if status.st_size > limit:
            raise FileRefused(path, f"{status.st_size} bytes, more than the limit of {limit}")
        chunks = []
        left = limit + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise FileRefused(path, exc.strerror or str(exc)) from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise FileRefused(path, f"more than the limit of {limit} bytes")
    return FileContent(data, signature_of(status), status.st_mtime_ns)


def read_text_limited(path: Path, limit: int, *, private: bool = False) -> str:
    """``read_limited`` decoded as UTF-8; bytes that are not UTF-8 are ``FileRefused`` too."""
    data = read_limited(path, limit, private=private).data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileRefused(
            path, f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None
