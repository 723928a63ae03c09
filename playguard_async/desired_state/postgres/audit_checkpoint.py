"""Checkpoints of the change log's chain heads, kept outside the database and signed with a key
it never holds, so that ``audit verify`` catches what no role of the database can hide from it:
a chain rewritten with hashes computed again, entries cut from its end, a chain or the whole
table deleted, an entry appended with an id the log had passed.

A checkpoint file is JSON lines, one per checkpoint, appended under an exclusive ``flock``
(replicas on one host share it). Each line says when (``at``, wall clock), the change log's
version its snapshot saw (``high``, ``unseen``: as a cycle's record names it), the heads
(``[seq, hash]``) of the chains that changed since the line before, the MAC of the line before
(``prev``) and its own ``mac``: HMAC-SHA256 with the key of ``audit_checkpoint_key_file`` over
the line's canonical JSON without ``mac``. A line changed, removed from the middle or moved is
told by its MAC or its ``prev``; lines cut from the end are not (the newest checkpoint then
looks older, and ``verify`` says how old it is). Folding every line gives each chain's newest
checkpointed head.

The file and the key are outside input: a line of another shape or with a wrong MAC is a
problem named by its line number, never an exception; a line is at most ``LINE_MAX`` bytes.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import hmac
import json
import os
import stat
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import asyncpg
import structlog

from playguard_async.desired_state.postgres.change_log import log_version
from playguard_async.desired_state.postgres.connection import qualified

log = structlog.get_logger("playguard.audit")

KEY_MIN_BYTES = 32
KEY_MAX_BYTES = 4096
LINE_MAX = 64 * 1024 * 1024
"""Bytes of one checkpoint line at most (the heads of every chain a fleet-wide import made)."""

UNSEEN_KEPT = 1000
"""Ids below a checkpoint's highest it keeps as not yet seen (of ``change_log.UNSEEN_WINDOW``):
the next checkpoint reads those again, so a long transaction's entries are checkpointed too."""

_NEW_HEADS = """
SELECT DISTINCT ON (chain) chain, seq, hash FROM {changes}
WHERE (id > $1 OR id = ANY ($2::bigint[])) AND id <= $3
ORDER BY chain, seq DESC
"""
"""The heads of the chains with an entry the last checkpoint had not seen: the PK index's range
above its highest id, and its unseen ids. Cost: the entries new since, not the log's size."""


class CheckpointError(Exception):
    """A key or checkpoint file that cannot be used; the message names the file and why."""


def read_key(path: Path) -> bytes:
    """The HMAC key in ``path``: a regular file no one but its owner may read, of
    ``KEY_MIN_BYTES`` to ``KEY_MAX_BYTES`` (surrounding whitespace stripped)."""
    try:
        with path.open("rb") as opened:
            info = os.fstat(opened.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise CheckpointError(f"{path}: the checkpoint key is not a regular file")
            if info.st_mode & 0o077:
                mode = stat.S_IMODE(info.st_mode)
                raise CheckpointError(f"{path}: the checkpoint key is readable by others "
                                      f"(mode {mode:o}): chmod 600 it")  # fmt: skip
            key = opened.read(KEY_MAX_BYTES + 1).strip()
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read the checkpoint key: {exc.strerror}") from None
    if not KEY_MIN_BYTES <= len(key) <= KEY_MAX_BYTES:
        raise CheckpointError(f"{path}: the checkpoint key must be {KEY_MIN_BYTES} to "
                              f"{KEY_MAX_BYTES} bytes (it has {len(key)})")  # fmt: skip
    return key


def _mac(key: bytes, body: Mapping[str, Any]) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Checkpoint:
    """One line: when, what the snapshot saw, the heads that changed, and its MACs."""

    at: float
    high: int
    unseen: tuple[int, ...]
    heads: Mapping[str, tuple[int, str]]
    prev: str
    mac: str = ""

    def body(self) -> dict[str, Any]:
        return {"at": self.at, "high": self.high, "unseen": list(self.unseen),
                "heads": {chain: list(head) for chain, head in self.heads.items()},
                "prev": self.prev}  # fmt: skip

    def line(self) -> str:
        return json.dumps({**self.body(), "mac": self.mac}, sort_keys=True,
                          separators=(",", ":"), ensure_ascii=True) + "\n"  # fmt: skip


def _parsed(text: bytes, key: bytes) -> Checkpoint | str:
    """A line as a checkpoint, else why not (of another shape, its MAC wrong)."""
    try:
        value = json.loads(text)
        at, high, unseen = value["at"], value["high"], value["unseen"]
        heads = {str(chain): (int(head[0]), str(head[1])) for chain, head in
                 value["heads"].items()}  # fmt: skip
        checkpoint = Checkpoint(float(at), int(high), tuple(int(i) for i in unseen), heads,
                                str(value["prev"]), str(value["mac"]))  # fmt: skip
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError):
        return "not a checkpoint of the written shape"
    if not hmac.compare_digest(checkpoint.mac, _mac(key, checkpoint.body())):
        return "its MAC is wrong: changed, or signed with another key"
    return checkpoint


@dataclass
class CheckpointLog:
    """Every line of a checkpoint file folded: each chain's newest checkpointed head (and when),
    the newest checkpoint, and the lines that do not verify."""

    heads: dict[str, tuple[int, str, float]] = field(default_factory=dict)
    newest: Checkpoint | None = None
    lines: int = 0
    problems: list[str] = field(default_factory=list)


def _lines(path: Path) -> Iterator[bytes]:
    with path.open("rb") as opened:
        while line := opened.readline(LINE_MAX + 1):
            yield line


def read_checkpoints(path: Path, key: bytes) -> CheckpointLog:
    """``path`` folded (an absent file: no checkpoint yet). Each line must verify and follow
    the one before (its ``prev``); a line that does not is a problem, and is not folded."""
    log = CheckpointLog()
    if not path.exists():
        return log
    try:
        for number, text in enumerate(_lines(path), start=1):
            log.lines = number
            parsed = _parsed(text, key) if len(text) <= LINE_MAX else "longer than LINE_MAX"
            if isinstance(parsed, str):
                log.problems.append(f"{path} line {number}: {parsed}")
                continue
            if parsed.prev != (log.newest.mac if log.newest is not None else ""):
                log.problems.append(f"{path} line {number}: does not follow the line before "
                                    "it (a line removed, moved or from another file)")  # fmt: skip
            for chain, (seq, hash_) in parsed.heads.items():
                log.heads[chain] = (seq, hash_, parsed.at)
            log.newest = parsed
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read the checkpoints: {exc.strerror}") from None
    return log


def _last_line(descriptor: int) -> bytes | None:
    """The file's last line, read backwards from its end a block at a time (at most
    ``LINE_MAX`` bytes): a tick reads what it appends to, not the whole history."""
    end = os.fstat(descriptor).st_size
    tail = b""
    position = end
    while position > 0 and tail.count(b"\n") < 2 and len(tail) <= LINE_MAX:
        step = min(_BLOCK, position)
        position -= step
        tail = os.pread(descriptor, step, position) + tail
    lines = tail.rstrip(b"\n").rsplit(b"\n", 1)
    return lines[-1] or None


_BLOCK = 64 * 1024


def _last(path: Path, descriptor: int, key: bytes) -> Checkpoint | None:
    """The file's last checkpoint (None: none yet); CheckpointError when it does not verify."""
    last = _last_line(descriptor)
    if last is None:
        return None
    parsed = _parsed(last, key)
    if isinstance(parsed, str):
        raise CheckpointError(f"{path}: its last line does not verify ({parsed}): no checkpoint "
                              "is added until an operator looks (audit verify)")  # fmt: skip
    return parsed


async def _locked(descriptor: int) -> None:
    """An exclusive lock of the file, waited for without holding the loop (another replica on
    this host may hold it for a query's time); the caller's timeout bounds the wait."""
    while True:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            await asyncio.sleep(0.05)


async def take_checkpoint(
    connection: asyncpg.Connection, schema: str, path: Path, key: bytes
) -> Checkpoint:
    """Append to ``path`` a checkpoint of the chains whose heads moved since its last one, read
    in one REPEATABLE READ snapshot; the file is locked meanwhile, so two replicas on one host
    append one after the other. Raises CheckpointError (the file) or asyncpg's errors."""
    changes = qualified(schema, "changes")
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot open the checkpoints: {exc.strerror}") from None
    try:
        await _locked(descriptor)
        last = _last(path, descriptor, key)
        async with connection.transaction(isolation="repeatable_read", readonly=True):
            high, unseen = await log_version(connection, schema, kept=UNSEEN_KEPT)
            rows = await connection.fetch(
                _NEW_HEADS.format(changes=changes), 0 if last is None else last.high,
                [] if last is None else list(last.unseen), high or 0,
            )  # fmt: skip
        checkpoint = Checkpoint(time.time(), high or 0, tuple(unseen),
                                {row["chain"]: (row["seq"], row["hash"]) for row in rows},
                                "" if last is None else last.mac)  # fmt: skip
        signed = replace(checkpoint, mac=_mac(key, checkpoint.body()))
        os.write(descriptor, signed.line().encode())
        os.fsync(descriptor)
        return signed
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot write the checkpoint: {exc.strerror}") from None
    finally:
        os.close(descriptor)


class CheckpointWriter:
    """The daemon's checkpoints: its key read once (a bad key file stops the start, as a bad
    password file does), one checkpoint after each whole read of the desired state. A
    checkpoint that fails is logged and never fails the read."""

    def __init__(self, path: Path, key_file: Path) -> None:
        self.path = path
        self._key = read_key(key_file)
        self._since = time.monotonic()
        """When the last checkpoint was taken, or this writer made (none taken yet)."""

    def age(self) -> float:
        """Seconds since the last checkpoint this writer took (since it was made, before its
        first): what an alert watches, as a daemon that never manages one ages too."""
        return time.monotonic() - self._since

    async def take(self, connection: asyncpg.Connection, schema: str) -> None:
        try:
            taken = await take_checkpoint(connection, schema, self.path, self._key)
        except (CheckpointError, asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            log.error("audit.checkpoint_failed", file=str(self.path), error=str(exc)[:300])
            return
        self._since = time.monotonic()
        log.debug("audit.checkpointed", file=str(self.path), high=taken.high,
                  heads=len(taken.heads))  # fmt: skip


def passed_ids(newest: Checkpoint | None) -> tuple[int, frozenset[int]]:
    """The highest id the newest checkpoint saw and the ids below it it did not: an entry whose
    id it passed but which it did not see, appended to a chain after its head, was forged."""
    if newest is None:
        return 0, frozenset()
    return newest.high, frozenset(newest.unseen)


def unchecked_heads(
    log: CheckpointLog, seen: Sequence[str], anchors: Mapping[str, tuple[int, bool]]
) -> Iterator[tuple[str, int, float]]:
    """The checkpointed heads of chains ``seen`` does not hold and that no named anchor at or
    after their seq explains: (chain, seq, when checkpointed) of what was deleted."""
    held = set(seen)
    for chain, (seq, _hash, at) in sorted(log.heads.items()):
        if chain in held:
            continue
        anchor = anchors.get(chain)
        if anchor is not None and anchor[0] >= seq and anchor[1]:
            continue
        yield chain, seq, at
