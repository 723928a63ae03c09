"""The audit of desired-state changes (migration 0009's ``changes``): checking its hash chains,
and the operator's retention cut that keeps them checkable.

The hashes are computed here again from each entry's fields, as migration 0009's
``playguard_change_canonical`` defines them, not by calling that function: a function changed in
the database must not vouch for the rows it would have to condemn. An entry is condemned when
its hash is not that of its fields, when it does not follow the hash before it in its chain, or
when entries are missing before it (its chain's numbers jump). Entries cut from a chain's tail
leave no trace in the chain itself: the docs (operations/why.md) say how to keep the heads
elsewhere.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from playguard_async.desired_state.postgres.audit_checkpoint import (
    CheckpointLog,
    passed_ids,
    unchecked_heads,
)
from playguard_async.desired_state.postgres.connection import DEFAULT_SCHEMA, qualified

FLEET_CHAIN = "*"
"""The chain of changes that concern no Marquee or several (no Marquee name can be ``*``)."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FETCH_ROWS = 1000
_COLUMNS = (
    "id, at, relation, key, columns, operation, actor, marquees, chain, seq, prev_hash, hash, "
    "session_role, acting_role"
)

PRUNE = "PRUNE"
"""The operation of the entry a prune appends to each chain it cuts; its key names the anchor it
leaves (``anchor_key``)."""

ROLES_MIGRATION = 10
"""The migration that made prunes entries of their chains: an anchor cut before it was applied
is named by no entry, and is trusted as before."""


def _field(value: str | None) -> str:
    return "-" if value is None else f"{len(value)}:{value}"


def _listed(values: Sequence[str | None]) -> str:
    return f"{len(values)}[" + "".join(_field(value) for value in values) + "]"


def canonical(entry: Mapping[str, Any]) -> str:
    """The text an entry's hash covers besides the previous hash (the SQL function
    ``playguard_change_canonical_roles``: 0009's text, then the roles when the entry has them;
    an entry made before migration 0010 has none and hashes as it did)."""
    micros = (entry["at"] - _EPOCH) // timedelta(microseconds=1)
    text = (
        f"{entry['id']}|{micros}|{_field(entry['relation'])}{_field(entry['key'])}"
        f"{_listed(entry['columns'])}{_field(entry['operation'])}{_field(entry['actor'])}"
        f"{_listed(entry['marquees'])}{_field(entry['chain'])}{entry['seq']}"
    )
    if entry.get("session_role") is None:
        return text
    return f"{text}|{_field(entry['session_role'])}{_field(entry.get('acting_role'))}"


def anchor_key(seq: int, hash_: str) -> str:
    """The key of a prune's entry: the anchor it leaves, ``<seq> <hash>``."""
    return f"{seq} {hash_}"


def entry_hash(prev_hash: str, entry: Mapping[str, Any]) -> str:
    return hashlib.sha256(f"{prev_hash}|{canonical(entry)}".encode()).hexdigest()


@dataclass(frozen=True)
class ChainProblem:
    """One entry condemned (or a run of entries missing), said in one line."""

    chain: str
    seq: int
    change_id: int | None
    """The entry's id; None for missing entries."""
    problem: str

    def line(self) -> str:
        where = f"changes id {self.change_id}" if self.change_id is not None else "changes"
        return f"{where} (chain {self.chain!r}, seq {self.seq}): {self.problem}"


@dataclass
class Verification:
    """What ``verify`` found: every entry read, the problems up to ``limit`` and a count of the
    rest, so a table rewritten whole still answers in bounded output."""

    limit: int
    entries: int = 0
    chains: int = 0
    problems: list[ChainProblem] = field(default_factory=list)
    more: int = 0

    @property
    def intact(self) -> bool:
        return not self.problems

    def add(self, problem: ChainProblem) -> None:
        if len(self.problems) < self.limit:
            self.problems.append(problem)
        else:
            self.more += 1


@dataclass
class _ChainCursor:
    """Where the walk is in one chain: the seq and hash the next entry must follow, and the
    chain's checkpointed head (``seq, hash, when``) until the walk meets it."""

    seq: int
    hash: str
    change_id: int | None
    named: bool = True
    """Whether an entry of the chain names this anchor (a prune's), or it needs none (no anchor,
    or one cut before prunes were entries)."""
    checkpoint: tuple[int, str, float] | None = None
    passed: int = 0
    """The seq of the checkpointed head, kept after it is met: entries after it are new."""
    anchor_seq: int = field(init=False)
    anchor_hash: str = field(init=False)

    def __post_init__(self) -> None:
        self.anchor_seq, self.anchor_hash = self.seq, self.hash

    def follow(self, entry: Mapping[str, Any]) -> None:
        self.seq, self.hash, self.change_id = entry["seq"], entry["hash"], entry["id"]


_LOG_OWNER = """
SELECT r.rolname AS owner, r.rolcanlogin AS logs_in
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_roles r ON r.oid = c.relowner
WHERE n.nspname = $1 AND c.relname = 'changes'
"""


@dataclass(frozen=True)
class LogOwner:
    """The role that owns the change log, and whether anyone logs in as it: an owner that logs
    in (the daemon's role, before the docs' hand-over) can append entries of its own making
    after the newest checkpoint, which nothing in the database can then tell apart."""

    role: str
    logs_in: bool

    def line(self) -> str:
        if not self.logs_in:
            return f"the log is owned by role {self.role}, which nobody logs in as"
        return (
            f"the log is owned by role {self.role}, which logs in: it can append entries of its "
            "own making after the newest checkpoint (docs, operations/why.md: hand the log to a "
            "role nobody logs in as)"
        )


async def log_owner(
    connection: asyncpg.Connection, schema: str = DEFAULT_SCHEMA
) -> LogOwner | None:
    """Who owns ``schema``'s change log; None when there is none (not migrated)."""
    row = await connection.fetchrow(_LOG_OWNER, schema)
    return None if row is None else LogOwner(str(row["owner"]), bool(row["logs_in"]))


async def verify_changes(
    connection: asyncpg.Connection,
    schema: str = DEFAULT_SCHEMA,
    *,
    limit: int = 100,
    checkpoints: CheckpointLog | None = None,
) -> Verification:
    """Walk every chain of ``changes`` in one REPEATABLE READ snapshot, from each chain's newest
    retention anchor (else its start). An anchor counts only when an entry of its chain (the
    prune's) names it; one cut before migration 0010 was applied needs none. With
    ``checkpoints`` each chain must still hold its checkpointed head, with that hash (unless a
    named anchor cut past it), and hold no entry after it with an id the newest checkpoint had
    passed without seeing."""
    found = Verification(limit)
    log = checkpoints or CheckpointLog()
    high, pending = passed_ids(log.newest)
    async with connection.transaction(isolation="repeatable_read", readonly=True):
        anchors = {
            row["chain"]: _ChainCursor(row["seq"], row["hash"], None, row["legacy"])
            for row in await connection.fetch(
                f"SELECT DISTINCT ON (chain) chain, seq, hash, cut_at < coalesce(("
                f"SELECT applied_at FROM {qualified(schema, 'schema_version')} "
                f"WHERE version = {ROLES_MIGRATION}), 'infinity') AS legacy "
                f"FROM {qualified(schema, 'change_anchors')} ORDER BY chain, seq DESC"
            )
        }
        named = {chain: (anchor.seq, anchor.named) for chain, anchor in anchors.items()}
        walked: list[str] = []
        current: tuple[str, _ChainCursor] | None = None
        async for row in connection.cursor(
            f"SELECT {_COLUMNS} FROM {qualified(schema, 'changes')} ORDER BY chain, seq",
            prefetch=_FETCH_ROWS,
        ):
            found.entries += 1
            if current is None or current[0] != row["chain"]:
                _chain_end(current, found, named)
                found.chains += 1
                walked.append(row["chain"])
                cursor = anchors.pop(row["chain"], None) or _ChainCursor(0, "", None)
                cursor.checkpoint = log.heads.get(row["chain"])
                cursor.passed = 0 if cursor.checkpoint is None else cursor.checkpoint[0]
                current = (row["chain"], cursor)
            cursor = current[1]
            if row["operation"] == PRUNE and row["key"] == anchor_key(
                cursor.anchor_seq, cursor.anchor_hash
            ):
                cursor.named = True  # fmt: skip
            for problem in _problems(row, cursor):
                found.add(problem)
            for problem in _against_checkpoint(row, cursor, high, pending):
                found.add(problem)
            cursor.follow(row)
        _chain_end(current, found, named)
        for chain, anchor in sorted(anchors.items()):  # anchors of chains with no entry left
            if anchor.named:
                continue  # cut whole before prunes were entries
            found.add(ChainProblem(chain, anchor.seq + 1, None, "every entry after the anchor "
                                   f"at seq {anchor.seq} is missing"))  # fmt: skip
    for chain, seq, at in unchecked_heads(log, walked, named):
        found.add(ChainProblem(chain, seq, None, f"the chain, checkpointed at seq {seq} on "
                               f"{_when(at)}, is missing whole"))  # fmt: skip
    return found


def _against_checkpoint(
    row: Mapping[str, Any], cursor: _ChainCursor, high: int, pending: frozenset[int]
) -> Iterator[ChainProblem]:
    """What the checkpoints say of ``row``: its hash, if it is its chain's checkpointed head;
    a forgery, if it comes after that head with an id the newest checkpoint had passed."""
    chain, seq, change_id = row["chain"], row["seq"], row["id"]
    head = cursor.checkpoint
    if head is not None and seq == head[0]:
        cursor.checkpoint = None
        if row["hash"] != head[1]:
            yield ChainProblem(chain, seq, change_id, "not the entry checkpointed on "
                               f"{_when(head[2])}: the chain up to it was rewritten")  # fmt: skip
    if seq > cursor.passed and change_id <= high and change_id not in pending:
        yield ChainProblem(chain, seq, change_id, "appended after the newest checkpoint with an "
                           f"id (<= {high}) that checkpoint had passed: forged")  # fmt: skip


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _chain_end(
    current: tuple[str, _ChainCursor] | None,
    found: Verification,
    named: Mapping[str, tuple[int, bool]],
) -> None:
    """The problems a chain just walked leaves at its end: an anchor no entry of it names; a
    checkpointed head it no longer holds, which no named anchor at or past it explains."""
    if current is None:
        return
    chain, cursor = current
    if not cursor.named:
        found.add(
            ChainProblem(
                chain,
                cursor.anchor_seq,
                None,
                f"the anchor at seq {cursor.anchor_seq} is named by no prune entry of the chain",
            )
        )
    head = cursor.checkpoint
    anchor = named.get(chain)
    if head is not None and not (anchor is not None and anchor[0] >= head[0] and cursor.named):
        found.add(ChainProblem(chain, head[0], None, f"seq {head[0]}, checkpointed on "
                               f"{_when(head[2])}, is missing: cut from the chain"))  # fmt: skip


def _problems(row: Mapping[str, Any], before: _ChainCursor) -> Iterator[ChainProblem]:
    chain, seq, change_id = row["chain"], row["seq"], row["id"]
    if seq > before.seq + 1:
        after = f"after id {before.change_id}" if before.change_id is not None else "at its start"
        first = before.seq + 1
        gap = f"seq {first}" if seq == first + 1 else f"seq {first}..{seq - 1}"
        yield ChainProblem(chain, first, None,
                           f"{gap} missing ({after}, before id {change_id})")  # fmt: skip
    elif row["prev_hash"] != before.hash:
        yield ChainProblem(chain, seq, change_id, "does not follow the hash of the entry before it")
    if seq <= before.seq:
        yield ChainProblem(chain, seq, change_id, f"seq {seq} is not after {before.seq}")
    if entry_hash(row["prev_hash"], row) != row["hash"]:
        yield ChainProblem(chain, seq, change_id, "hash mismatch: the entry was changed")
    if before.change_id is not None and change_id <= before.change_id:
        yield ChainProblem(chain, seq, change_id, f"id is not after id {before.change_id}")


async def prune_changes(
    connection: asyncpg.Connection, schema: str = DEFAULT_SCHEMA, *, older_than: timedelta
) -> dict[str, int]:
    """Cut each chain's entries older than ``older_than``, in one transaction, recording the
    last entry cut as the chain's anchor so the first one kept still verifies, and appending to
    the chain an entry of the cut (``PRUNE``, its key the anchor's ``anchor_key``: verify trusts
    no anchor its chain does not name); returns the entries cut per chain. Each chain is locked
    as the trigger locks it, so an entry appended meanwhile follows the anchor. Needs INSERT and
    DELETE on ``changes`` and INSERT on ``change_anchors``: the audit's owner's, not the
    daemon's (docs, operations/why.md: "Why did this change?")."""
    changes, anchors = qualified(schema, "changes"), qualified(schema, "change_anchors")
    cut: dict[str, int] = {}
    async with connection.transaction():
        heads = await connection.fetch(
            f"SELECT chain, max(seq) AS seq FROM {changes} "
            "WHERE at < transaction_timestamp() - $1::interval GROUP BY chain ORDER BY chain",
            older_than,
        )
        for head in heads:
            chain, seq = head["chain"], head["seq"]
            await connection.execute(
                f"SELECT {qualified(schema, 'playguard_lock_chain')}($1)", chain
            )
            anchor = await connection.fetchrow(
                f"INSERT INTO {anchors} (chain, seq, hash) "
                f"SELECT chain, seq, hash FROM {changes} WHERE chain = $1 AND seq = $2 "
                "RETURNING seq, hash",
                chain,
                seq,
            )
            if anchor is None:  # another prune, holding the lock first, cut it
                continue
            await connection.execute(
                f"SELECT {qualified(schema, 'playguard_append_change')}"
                "($1, $2, $3, '{}', $4, current_user::text)",
                f"{schema}.changes", anchor_key(anchor["seq"], anchor["hash"]), PRUNE,
                [] if chain == FLEET_CHAIN else [chain],
            )  # fmt: skip
            deleted = await connection.execute(
                f"DELETE FROM {changes} WHERE chain = $1 AND seq <= $2", chain, seq
            )
            cut[chain] = int(deleted.split()[-1])
    return cut
