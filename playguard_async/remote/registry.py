"""Registries: check a login and ask what a tag points at (Engine API reads), and pull (a fenced
``docker pull`` on the host).

Credentials travel only in request bodies, the X-Registry-Auth header and a command's stdin, never
in argv. An error from a request or command that carried a password is quoted to operators only
after the password has been cut out of it: what a remote engine or registry echoes back is outside
our control.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import TypeVar

import aiodocker
from aiodocker.utils import compose_auth_header

from playguard_async.desired_state.model import Registry
from playguard_async.kits.image_reference import normalized, registry_of
from playguard_async.remote.docker import (
    config_entry,
    inspect_or_none,
    pull_image,
    query,
    registry_auth,
)
from playguard_async.remote.errors import RemoteCommandFailed
from playguard_async.remote.ssh import RemoteSession

_T = TypeVar("_T")

RegistryAuth = dict[str, str]
"""What ``registry_auth`` returns. Taken once per request, so the password that is sent is the one
cut out of the request's errors, even if the password file changes meanwhile."""

_REDACTED = "<redacted>"


def _cut(text: str, auth: RegistryAuth | None) -> str:
    if auth is not None and auth["password"]:
        return text.replace(auth["password"], _REDACTED)
    return text


def auth_for(reference: str, registry: Registry | None) -> RegistryAuth | None:
    """``registry``'s credentials if ``reference`` lives on its server, else None: a playspec
    listing an image hosted elsewhere must not send that host its registry's password."""
    if registry is not None and registry_of(reference) == registry.server:
        return registry_auth(registry)
    return None


async def _redacting(call: Awaitable[_T], auth: RegistryAuth | None) -> _T:
    """Await ``call``; if the engine refuses it, re-raise its error without the password in it.

    Raised ``from None``: the original error, which might quote the password, is not chained.
    """
    try:
        return await call
    except aiodocker.DockerError as exc:
        raise aiodocker.DockerError(exc.status, _cut(str(exc.message), auth)) from None


async def check_login(session: RemoteSession, auth: RegistryAuth) -> None:
    """Have the host's engine log in to the registry now (``POST /auth``).

    Proves the credentials work from that host; the engine stores nothing, so this is a read, not
    a change. Engine 20.10 answers a wrong password with 500, quoting the registry's 401.
    """
    await _redacting(query(session, "auth", method="POST", data=json.dumps(auth)), auth)


async def registry_digest(session: RemoteSession, reference: str, auth: RegistryAuth | None) -> str:
    """The manifest digest the registry serves for ``reference`` now, as the host's engine sees
    it (``GET /distribution/{name}/json``); nothing is downloaded but the manifest."""
    headers = {"X-Registry-Auth": compose_auth_header(auth)} if auth is not None else None
    answer = await _redacting(
        query(session, f"distribution/{reference}/json", headers=headers), auth
    )
    return str(answer["Descriptor"]["digest"])


async def registry_digest_once(
    session: RemoteSession, reference: str, auth: RegistryAuth | None
) -> str:
    """``registry_digest``, asked once per cycle: pull_images and the rollout gate (which names
    a release by it) share the answer."""

    async def ask() -> str:
        return await registry_digest(session, reference, auth)

    return await session.read_once(("registry-digest", reference), ask, of_host=False)


async def local_digests(session: RemoteSession, reference: str) -> set[str] | None:
    """The registry digests of the image ``reference`` names on the host (from its RepoDigests);
    None when the host has no such image.

    A manifest digest names exactly one image content, so a match with any of them means the
    local tag already holds what the registry serves, whichever repository name recorded it.
    """
    image = await inspect_or_none(session, f"images/{reference}/json")
    if image is None:
        return None
    return {entry.partition("@")[2] for entry in image.get("RepoDigests") or []}


async def pull(session: RemoteSession, reference: str, auth: RegistryAuth | None) -> None:
    """Pull ``reference`` through the write funnel (fenced; in dry-run it only says it would),
    with ``auth`` handed to the host's ``docker`` on stdin as a one-registry ``config.json``;
    once a cycle (``RemoteSession.pulled``), however the image is spelt."""
    if was_pulled(session, reference):
        return
    auths = {} if auth is None else {auth["serveraddress"]: config_entry(auth)}
    try:
        await session.change(
            f"pull {reference}",
            pull_image(session.marquee, reference),
            stdin=json.dumps({"auths": auths}),
        )
        session.pulled.add(_pulled_as(reference))
    except RemoteCommandFailed as exc:
        raise RemoteCommandFailed(
            session.host, exc.argv, exc.exit_status, _cut(exc.stderr_tail, auth), what=exc.what
        ) from None


def was_pulled(session: RemoteSession, reference: str) -> bool:
    """Whether this cycle pulled the image ``reference`` names (in a dry run: would have),
    under this spelling or another (``busybox:1``, ``docker.io/library/busybox:1``)."""
    return _pulled_as(reference) in session.pulled


def _pulled_as(reference: str) -> str:
    return normalized(reference) or reference
