"""Registries through the Docker Engine API: check a login, ask what a tag points at, pull.

Credentials travel only in request bodies and the X-Registry-Auth header, never in argv. An error
from a request that carried a password is quoted to operators only after the password has been cut
out of it: what a remote engine or registry echoes back is outside our control.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import TypeVar

import aiodocker
from aiodocker.utils import compose_auth_header

from playguard_async.inventory import Registry
from playguard_async.remote.docker import registry_auth
from playguard_async.remote.errors import DockerApiError
from playguard_async.remote.ssh import RemoteSession

_T = TypeVar("_T")

RegistryAuth = dict[str, str]
"""What ``registry_auth`` returns. Taken once per request, so the password that is sent is the one
cut out of the request's errors, even if the password file changes meanwhile."""

_REDACTED = "<redacted>"


def registry_host(reference: str) -> str | None:
    """The registry an image reference names, by Docker's rule: the first path component when it
    has a '.' or ':' or is 'localhost'; None for a Docker Hub name such as ``library/busybox``."""
    first, slash, _ = reference.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first
    return None


def auth_for(reference: str, registry: Registry | None) -> RegistryAuth | None:
    """``registry``'s credentials if ``reference`` lives on its server, else None: a playspec
    listing an image hosted elsewhere must not send that host its registry's password."""
    if registry is not None and registry_host(reference) == registry.server:
        return registry_auth(registry)
    return None


async def _redacting(call: Awaitable[_T], auth: RegistryAuth | None) -> _T:
    """Await ``call``; if the engine refuses it, re-raise its error without the password in it.

    Raised ``from None``: the original error, which might quote the password, is not chained.
    """
    try:
        return await call
    except aiodocker.DockerError as exc:
        message = str(exc.message)
        if auth is not None and auth["password"]:
            message = message.replace(auth["password"], _REDACTED)
        raise aiodocker.DockerError(exc.status, message) from None


async def check_login(session: RemoteSession, auth: RegistryAuth) -> None:
    """Have the host's engine log in to the registry now (``POST /auth``).

    Proves the credentials work from that host; the engine stores nothing, so this is a read, not
    a change. Engine 20.10 answers a wrong password with 500, quoting the registry's 401.
    """
    await session.api(
        _redacting(session.docker._query_json("auth", method="POST", data=json.dumps(auth)), auth)
    )


async def registry_digest(session: RemoteSession, reference: str, auth: RegistryAuth | None) -> str:
    """The manifest digest the registry serves for ``reference`` now, as the host's engine sees
    it (``GET /distribution/{name}/json``); nothing is downloaded but the manifest."""
    headers = {"X-Registry-Auth": compose_auth_header(auth)} if auth is not None else None
    answer = await session.api(
        _redacting(
            session.docker._query_json(f"distribution/{reference}/json", headers=headers), auth
        )
    )
    return str(answer["Descriptor"]["digest"])


async def local_digests(session: RemoteSession, reference: str) -> set[str] | None:
    """The registry digests of the image ``reference`` names on the host (from its RepoDigests);
    None when the host has no such image.

    A manifest digest names exactly one image content, so a match with any of them means the
    local tag already holds what the registry serves, whichever repository name recorded it.
    """
    try:
        image = await session.api(session.docker.images.inspect(reference))
    except DockerApiError as exc:
        if exc.status == 404:
            return None
        raise
    return {entry.partition("@")[2] for entry in image.get("RepoDigests") or []}


async def pull(session: RemoteSession, reference: str, auth: RegistryAuth | None) -> None:
    """Pull ``reference`` through the write funnel (so dry-run only says it would).

    aiodocker raises ``DockerStreamError`` (status 0) for an error reported inside the progress
    stream, which is where Engine puts a refused pull; ``session.api`` turns either into
    ``DockerApiError``.
    """

    async def operation() -> None:
        await session.api(_redacting(session.docker.images.pull(reference, auth=auth), auth))

    await session.change(f"pull {reference}", operation)
