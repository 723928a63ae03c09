"""The shapes of the names a revision is made of, in one place for every reader of them (the
host's record, a pin in Redis, the PostgreSQL write-back): a value read back from outside is used
only when it is exactly of its shape, so it can never be an option, a ref or a command."""

from __future__ import annotations

import re

COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
"""A full git commit name (SHA-1 or SHA-256); never an abbreviation, a ref or an option."""

DIGEST = re.compile(r"[0-9a-f]{64}")
"""A SHA-256, as a file's digest."""

PINNED_IMAGE = re.compile(r"[a-z0-9][a-z0-9._/:-]{0,254}@sha256:[0-9a-f]{64}|sha256:[0-9a-f]{64}")
"""An image by repo digest, or an image ID: exactly one image, whatever a tag points at."""


def is_commit(value: object) -> bool:
    return isinstance(value, str) and COMMIT.fullmatch(value) is not None
