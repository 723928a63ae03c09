"""Keep the host's registry logins working: prove each one, and keep the compose command's
``config.json`` holding exactly the registries this Marquee's playgrounds pull from.

The phase runs its logins in dry-run too: ``POST /auth`` changes nothing on the host, and it is how
dry-run can tell a working password from a broken one.

A registry whose login fails keeps the entry the file already holds for it: a credential known to
be refused must not replace one that may still work (a password rotated in the inventory before
the registry). Registries no playground uses any more lose their entry. The file is written only
when its content would change, and its current content (secrets) is read but never logged.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from playguard_async.desired_state.model import Registry
from playguard_async.phases.protocol import PhaseReport
from playguard_async.phases.toolkit import CycleContext, change_outcome, finish, handle_each
from playguard_async.remote.docker import config_entry, docker_config_dir, registry_auth
from playguard_async.remote.registry import check_login
from playguard_async.remote.ssh import RemoteSession

# Prints the file if it exists, nothing otherwise: an absent file is not an error.
_CAT_IF_PRESENT = 'test ! -e "$1" || cat -- "$1"'


class RefreshCredentials:
    """Phase ``refresh_credentials``.

    Findings: ``registries`` maps each registry name to ``{"server", "state": "logged_in"}`` or
    ``{"state": "failed", "error"}``; ``config`` is ``{"path", "state"}`` with state
    ``unchanged``, ``written`` or ``would write``. Raises ``PartialFailure`` naming the registries
    whose login failed, after the file is brought up to date for the others.
    """

    name = "refresh_credentials"

    async def __call__(self, ctx: CycleContext) -> PhaseReport:
        session = await ctx.remote()
        path = f"{docker_config_dir(ctx.marquee)}/config.json"
        current_text, current_auths = await _read_config(session, path)
        wanted = ctx.inventory.registries_on(ctx.marquee.name)
        auths: dict[str, Any] = {}
        registries, failed = await handle_each(
            ctx.log,
            "registry",
            {registry.name: partial(_log_in, session, registry, auths) for registry in wanted},
        )
        for registry in wanted:
            if registry.name in failed and registry.server in current_auths:
                auths[registry.server] = current_auths[registry.server]
        content = json.dumps({"auths": auths}, indent=2, sort_keys=True) + "\n"
        config_state = "unchanged"
        # A host without the file and with nothing to put in it (every login failed) keeps none.
        if content != current_text and (auths or current_text is not None):
            await session.write_file(f"write registry credentials to {path}", path, content)
            config_state = change_outcome(session, "written", "write")
        report = PhaseReport(
            findings={"registries": registries, "config": {"path": path, "state": config_state}}
        )
        return finish(self.name, "registry", report, failed)


async def _log_in(
    session: RemoteSession, registry: Registry, auths: dict[str, Any]
) -> dict[str, Any]:
    """Log in through the host's engine; once that worked, add the registry's entry to ``auths``."""
    auth = registry_auth(registry)
    await check_login(session, auth)
    auths[registry.server] = config_entry(auth)
    return {"server": registry.server, "state": "logged_in"}


async def _read_config(session: RemoteSession, path: str) -> tuple[str | None, dict[str, Any]]:
    """The file's text (None if absent or empty) and its ``auths``; an unreadable JSON document
    counts as holding none, so the next write replaces it."""
    result = await session.run(["sh", "-c", _CAT_IF_PRESENT, "sh", path])
    text = result.stdout or None
    try:
        document = json.loads(text) if text is not None else {}
    except ValueError:
        return text, {}
    auths = document.get("auths") if isinstance(document, dict) else None
    return text, auths if isinstance(auths, dict) else {}


refresh_credentials = RefreshCredentials()
