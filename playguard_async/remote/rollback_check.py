"""Whether every part of a revision can be had before a rollback touches the host.

A rollback writes in steps (checkout, ``.env``, override, ``up``); one that meets a missing part
midway leaves the host half changed, and the next cycle, seeing the same failed release, tries
again. So before its first write it asks, with reads only:

- the commit: in the checkout, or else served by the origin (asked by a shallow fetch of that
  one commit into a temporary directory, removed at once: the checkout is not written);
- each image, by the reference the revision names: on the host, or else in its registry (the
  manifest, asked through the host's engine as pulls are: ``remote.registry``);
- the ``.env``: the copy the host kept of it (``revision.kept_env_path``), with the digest the
  revision records.

Only what the rollback would use is asked: a commit the checkout is already at, or a ``.env``
that already has the recorded digest, needs nothing. The answer names each missing part by
digest and path, never by content (a ``.env`` holds secrets).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from playguard_async.cycle_record import ABSENT_FILE
from playguard_async.desired_state.model import InventoryError, Registry
from playguard_async.remote.docker import inspect_or_none
from playguard_async.remote.errors import DockerApiError
from playguard_async.remote.git import COMMIT_ON_ORIGIN
from playguard_async.remote.registry import auth_for, registry_digest
from playguard_async.remote.revision import Revision
from playguard_async.remote.ssh import RemoteSession

# $1 the checkout, $2 the commit ("" when none is needed), $3 the origin, $4 the kept .env copy
# ("" when none is needed), $5 ``git.COMMIT_ON_ORIGIN`` (the pin's own question of the origin).
# Prints "commit host|origin|none" when $2 is given, and "env <sha256>" or "env -" when $4 is;
# writes nothing but the scratch directory $5 removes.
_PROBE_SCRIPT = r"""
c=$1 commit=$2 repo=$3 kept=$4 on_origin=$5
case $kept in "~/"*) kept=$HOME/${kept#"~/"} ;; esac
if [ -n "$commit" ]; then
    if git -C "$c" --git-dir=.git cat-file -e "$commit^{commit}" 2>/dev/null; then
        echo "commit host"
    elif sh -c "$on_origin" sh "$repo" "$commit" >/dev/null 2>&1; then
        echo "commit origin"
    else
        echo "commit none"
    fi
fi
if [ -n "$kept" ]; then
    if [ -f "$kept" ] && set -- $(sha256sum <"$kept"); then echo "env $1"; else echo "env -"; fi
fi
exit 0
"""


@dataclass(frozen=True)
class HostFacts:
    """What the host said of a revision's parts: where its commit is (``host``, ``origin``,
    ``none``; None when not asked), the digest of the kept ``.env`` copy (``-`` when there is
    none; None when not asked), and service -> whether its image can be had (with why not)."""

    commit: str | None = None
    env_copy: str | None = None
    images: Mapping[str, str | None] | None = None
    """Service -> None when its image can be had, else why not."""


def missing_parts(revision: Revision, facts: HostFacts, env_copy_path: str) -> tuple[str, ...]:
    """Each part of ``revision`` the rollback needs and cannot have, in words an operator acts
    on (digests and paths only); empty when it can go ahead."""
    missing: list[str] = []
    if revision.commit is not None and facts.commit == "none":
        missing.append(
            f"commit {revision.commit[:12]} is neither in the checkout nor served by its origin"
        )
    for service, why in sorted((facts.images or {}).items()):
        if why is not None:
            image = revision.images.get(service, "?")
            missing.append(f"image {service}={image} {why}")
    if facts.env_copy is not None and facts.env_copy != revision.env:
        if facts.env_copy == ABSENT_FILE:
            missing.append(f".env copy {env_copy_path} is missing (env={revision.env[:12]})")
        else:
            missing.append(
                f".env copy {env_copy_path} has env={facts.env_copy[:12]}, "
                f"not the recorded env={revision.env[:12]}"
            )
    return tuple(missing)


def fingerprint(playground: str, revision: Revision, missing: Sequence[str]) -> str:
    """What a blocked rollback is told once per: the Playground, the revision, what is missing."""
    document = [playground, revision.to_json(), sorted(missing)]
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:32]


async def check_revision(
    session: RemoteSession,
    *,
    checkout: str,
    repo: str,
    revision: Revision,
    now_commit: str | None,
    now_env: str,
    env_copy_path: str,
    registry: Registry | None,
) -> tuple[str, ...]:
    """``missing_parts`` of ``revision`` for a rollback from a checkout at ``now_commit`` with a
    ``.env`` of digest ``now_env``: one command on the host, and an engine read per image."""
    want_commit = revision.commit if revision.commit not in (None, now_commit) else ""
    want_env = revision.commit is not None and revision.env not in (
        ABSENT_FILE,
        now_env,
    )  # _roll_back restores the .env only with a commit, and removes it when it had none
    facts = HostFacts(images=await _images(session, revision.images, registry))
    if want_commit or want_env:
        argv = ["sh", "-c", _PROBE_SCRIPT, "sh", checkout, want_commit or "", repo,
                env_copy_path if want_env else "", COMMIT_ON_ORIGIN]  # fmt: skip
        said = dict(
            line.split(" ", 1)
            for line in (await session.run(argv)).stdout.splitlines()
            if " " in line
        )
        facts = HostFacts(said.get("commit"), said.get("env"), facts.images)
    return missing_parts(revision, facts, env_copy_path)


async def _images(
    session: RemoteSession, images: Mapping[str, str], registry: Registry | None
) -> dict[str, str | None]:
    """Service -> None when the host has its image or its registry serves the digest, else
    why not (an image ID, never pushed, can only be on the host)."""
    found: dict[str, str | None] = {}
    for service, image in sorted(images.items()):
        if await inspect_or_none(session, f"images/{image}/json") is not None:
            found[service] = None
        elif "@sha256:" not in image:
            found[service] = "is not on the host (an image never pushed)"
        else:
            found[service] = await _in_registry(session, image, registry)
    return found


async def _in_registry(session: RemoteSession, image: str, registry: Registry | None) -> str | None:
    try:
        auth = auth_for(image, registry)
    except InventoryError:
        auth = None  # refresh_credentials names the unreadable password
    try:
        await registry_digest(session, image, auth)
    except DockerApiError as exc:
        return f"is neither on the host nor served by its registry (engine answered {exc.status})"
    return None
