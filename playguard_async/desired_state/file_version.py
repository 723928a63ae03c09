"""Which version of a desired-state file was read: the start of its SHA-256, its mtime and, when
it lies in a git work tree, that tree's HEAD commit. Computed once per read of changed content
(``yaml_source``), never per cycle; the git commit is read from the repository's files (HEAD, the
ref it names, ``packed-refs``), a few small reads and no ``git`` process.

The HEAD commit says which commit the tree was checked out at, not that the file is unchanged
since: an edit not committed yet reads with the commit it was made on, and the digest tells
them apart.
"""

from __future__ import annotations

from pathlib import Path

from playguard_async.cycle_record import VERSION_DIGEST, DesiredVersion
from playguard_async.kits.revision_shapes import COMMIT

_SMALL = 4096
"""Bytes read of HEAD, a ref or a ``.git`` file at most; packed-refs is read to ``_PACKED``."""
_PACKED = 1 << 20
_DEPTH = 64
"""Directories walked up from the file to find its work tree at most."""


def file_version(path: Path, sha256_hex: str, mtime_ns: int) -> DesiredVersion:
    """The version of the file at ``path`` whose content has digest ``sha256_hex`` and
    modification time ``mtime_ns``."""
    version: DesiredVersion = {"digest": sha256_hex[:VERSION_DIGEST], "mtime": mtime_ns / 1e9}
    commit = git_head(path.parent)
    if commit is not None:
        version["commit"] = commit
    return version


def git_head(directory: Path) -> str | None:
    """The commit HEAD names in the git work tree ``directory`` is in; None outside one, or when
    the repository cannot be read (a detached unborn HEAD, files of another shape)."""
    try:
        git_dir = _git_dir(directory)
        if git_dir is None:
            return None
        head = _read(git_dir / "HEAD", _SMALL).strip()
        if not head.startswith("ref: "):
            return head if COMMIT.fullmatch(head) else None
        return _ref(git_dir, head.removeprefix("ref: ").strip())
    except (OSError, UnicodeDecodeError):
        return None


def _git_dir(directory: Path) -> Path | None:
    """The git directory of the work tree ``directory`` is in (a linked work tree's ``.git``
    file names its own)."""
    for candidate in [directory, *directory.parents][:_DEPTH]:
        dot_git = candidate / ".git"
        if dot_git.is_dir():
            return dot_git
        if dot_git.is_file():
            named = _read(dot_git, _SMALL).strip()
            if named.startswith("gitdir: "):
                return (candidate / named.removeprefix("gitdir: ")).resolve()
            return None
    return None


def _ref(git_dir: Path, ref: str) -> str | None:
    """The commit ``ref`` names: its loose file, else its line in ``packed-refs``; a linked
    work tree's refs are in the common directory its ``commondir`` names."""
    if not ref.startswith("refs/") or ".." in ref:
        return None
    common = git_dir
    if (git_dir / "commondir").is_file():
        common = (git_dir / _read(git_dir / "commondir", _SMALL).strip()).resolve()
    for base in dict.fromkeys((git_dir, common)):
        loose = base / ref
        if loose.is_file():
            commit = _read(loose, _SMALL).strip()
            return commit if COMMIT.fullmatch(commit) else None
    packed = common / "packed-refs"
    if packed.is_file():
        for line in _read(packed, _PACKED).splitlines():
            commit, _, name = line.partition(" ")
            if name == ref and COMMIT.fullmatch(commit):
                return commit
    return None


def _read(path: Path, limit: int) -> str:
    with path.open("rb") as file:
        return file.read(limit).decode()
