"""The commands that steer the fleet: ``pause`` and ``resume`` (a Marquee or the fleet), ``pin``
and ``unpin`` (a Playground's revision), ``rollout`` (list, show and act on a release's waves) and
``web`` (the web view's users); ``cli`` adds them to ``playguard``. Each imports the work it does
when it runs, as every command does (``cli``'s note on imports)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from playguard_async.operator.command_kit import (
    EXIT_NOT_OK,
    command_settings,
    duration_option,
    echo,
    fail,
    one_scope,
    readable_errors,
)
from playguard_async.operator.options import CONFIG_OPTION

if TYPE_CHECKING:
    from playguard_async.operator.pause import PauseActed


def _check_reason(reason: str, limit: int) -> None:
    from playguard_async.operator.action_input import reason_problem

    problem = reason_problem(reason, limit)
    if problem is not None:
        fail(f"--reason {problem}", 1)


_HOSTS_JSON = ('One object: {"pause": {...} or null, "hosts": [{"marquee", "carries", "detail"}], '
               '"on_every_host"}.')  # fmt: skip


@click.command()
@click.argument("marquee", required=False)
@click.option("--all", "fleet_wide", is_flag=True, help="Pause the whole fleet.")
@click.option("--for", "for_", metavar="DURATION", help="How long (90s, 15m, 2h, 1d); default "
              "the pause_default_for setting.")  # fmt: skip
@click.option("--reason", required=True, help="Why, for whoever looks next (500 chars at most).")
@click.option("--json", "as_json", is_flag=True, help=_HOSTS_JSON)
@CONFIG_OPTION
@click.pass_context
def pause(
    ctx: click.Context,
    *,
    marquee: str | None,
    fleet_wide: bool,
    for_: str | None,
    reason: str,
    as_json: bool,
    config: Path | None,
) -> None:
    """Pause MARQUEE (or with --all the fleet) without touching the desired state: every
    replica starts no cycle of it, and a cycle running stops at its next phase boundary (outcome
    paused). Kept in Redis with who, why and until when, and on the host of the Marquee (every
    launchable one's with --all), so it holds until its end when Redis forgets it; it expires by
    itself. Exit status 4 when some of those hosts do not carry it (each named)."""
    from playguard_async.coordination.pause import FLEET, REASON_MAX

    scope = one_scope(marquee, fleet_wide) or FLEET
    seconds = duration_option("--for", for_)
    _check_reason(reason, REASON_MAX)
    with readable_errors(ctx):
        import asyncio

        settings = command_settings(config)
        # The remote layer, once the settings are read: the pause goes onto the hosts.
        from playguard_async.operator.pause import take_scope_pause

        acted = asyncio.run(take_scope_pause(settings, scope, reason, seconds))
    _pause_acted(ctx, acted, as_json=as_json, lifted=False)


@click.command()
@click.argument("marquee", required=False)
@click.option("--all", "fleet_wide", is_flag=True, help="Lift the fleet-wide pause.")
@click.option("--json", "as_json", is_flag=True, help=_HOSTS_JSON)
@CONFIG_OPTION
@click.pass_context
def resume(
    ctx: click.Context, marquee: str | None, fleet_wide: bool, *, as_json: bool,
    config: Path | None,
) -> None:  # fmt: skip
    """Lift MARQUEE's pause (or with --all the fleet-wide one), in Redis and on the hosts that
    carry it; its next cycle runs as usual. Exit status 0 also when Redis held no pause (it says
    so), 4 when some of those hosts do not carry the lift (each named)."""
    from playguard_async.coordination.pause import FLEET

    scope = one_scope(marquee, fleet_wide) or FLEET
    with readable_errors(ctx):
        import asyncio

        settings = command_settings(config)
        from playguard_async.operator.pause import lift_scope_pause

        acted = asyncio.run(lift_scope_pause(settings, scope))
    if acted.pause is None and not as_json:
        echo(f"{'the fleet' if scope == FLEET else scope} is not paused; nothing to lift")
    _pause_acted(ctx, acted, as_json=as_json, lifted=True)


def _pause_acted(ctx: click.Context, acted: PauseActed, *, as_json: bool, lifted: bool) -> None:
    """What ``pause`` or ``resume`` did, in words or JSON; exit status 4 unless every host
    carries it."""
    from playguard_async.operator import display

    if as_json:
        import json

        shown = None if acted.pause is None else acted.pause.to_json()
        echo(json.dumps({"pause": shown, **acted.hosts_json()}))
    else:
        if acted.pause is not None:
            echo(("lifted: " if lifted else "") + display.pause_text(acted.pause))
        for line in acted.host_lines():
            echo(line)
    if not acted.on_every_host:
        ctx.exit(EXIT_NOT_OK)


@click.command("pin")
@click.argument("marquee")
@click.argument("playground")
@click.option(
    "--revision",
    default="last-good",
    show_default=True,
    metavar="last-good|COMMIT",
    help="Its last good revision, or a full commit name (40 or 64 hex digits).",
)
@click.option("--reason", required=True, help="Why, for whoever looks next (500 chars at most).")
@CONFIG_OPTION
@click.pass_context
def pin_command(
    ctx: click.Context, *, marquee: str, playground: str, revision: str, reason: str,
    config: Path | None,
) -> None:  # fmt: skip
    """Hold PLAYGROUND of MARQUEE at a revision, whatever its branch head does: its checkout
    stays at that commit (fetched, never reset to the head) and its images run by digest: for
    last-good, its last good ones; for a commit, the ones it runs when a cycle first applies the
    pin. A commit is stored only if the Playspec's origin has it, asked from MARQUEE. ``plan``
    shows it held, not as drift. Kept in Redis with who and why until ``unpin``."""
    from playguard_async.coordination.pins import LAST_GOOD, REASON_MAX
    from playguard_async.kits.revision_shapes import is_commit

    if revision != LAST_GOOD and not is_commit(revision):
        fail(f"--revision {revision[:80]!r}: give last-good or a full commit name", 1)
    _check_reason(reason, REASON_MAX)
    with readable_errors(ctx):
        import asyncio

        from playguard_async.operator import pin

        settings = command_settings(config)
        taken = asyncio.run(pin.pin(settings, marquee, playground, revision, reason))
    echo(f"{marquee}/{playground}: {taken.describe()}")


@click.command("unpin")
@click.argument("marquee")
@click.argument("playground")
@CONFIG_OPTION
@click.pass_context
def unpin_command(ctx: click.Context, marquee: str, playground: str, config: Path | None) -> None:
    """Let PLAYGROUND of MARQUEE follow its branch head again from its next cycle. Exit status 0
    also when it was not pinned (it says so)."""
    with readable_errors(ctx):
        import asyncio

        from playguard_async.operator import pin

        lifted = asyncio.run(pin.unpin(command_settings(config), marquee, playground))
    echo(f"{marquee}/{playground}: " + ("unpinned" if lifted else "not pinned; nothing to lift"))


@click.group()
def rollout() -> None:
    """The fleet's rollouts: a release of a Playspec at a branch, in waves (see the docs, page
    concepts/rollouts.md, section "Rollouts: a release in waves"). Exit status 0 when done (an
    action: stored in Redis and carried by every host of the scope), 1 on an error (no such
    rollout, another rollout than the one named, an action its status does not allow, Redis
    away: nothing stored), 2 bad usage, 4 an action stored in Redis that some hosts of the scope
    do not carry yet (each named, with why: locked by a cycle, unreachable)."""


@rollout.command("list")
@CONFIG_OPTION
@click.pass_context
def rollout_list(ctx: click.Context, config: Path | None) -> None:
    """Every rollout Redis holds, one line each."""
    with readable_errors(ctx):
        import asyncio

        from playguard_async.operator import rollout as rollouts

        found = asyncio.run(rollouts.rollouts(command_settings(config)))
    for scope, record in found:
        echo(rollouts.summary(record) if record is not None else f"{scope}: unreadable record")
    if not found:
        echo("no rollouts")


@rollout.command("show")
@click.argument("scope", metavar="PLAYSPEC@BRANCH")
@CONFIG_OPTION
@click.pass_context
def rollout_show(ctx: click.Context, scope: str, config: Path | None) -> None:
    """The rollout of PLAYSPEC@BRANCH: its waves, failures and last events."""
    with readable_errors(ctx):
        import asyncio

        from playguard_async.operator import rollout as rollouts

        record, healthy = asyncio.run(rollouts.show(command_settings(config), scope))
    for line in rollouts.schedule(record, healthy):
        echo(line)


def _rollout_action(action: str, summary: str) -> None:
    @rollout.command(action, help=summary)
    @click.argument("scope", metavar="PLAYSPEC@BRANCH")
    @click.option("--rollout", "rollout_id", required=True, metavar="ID",
                  help="The rollout meant (the id `rollout show` prints); refused if the "
                  "scope's rollout is another one now.")  # fmt: skip
    @click.option("--reason", required=True, help="Why, kept with the rollout (500 chars).")
    @click.option("--json", "as_json", is_flag=True,
                  help='One object: {"rollout": {...}, "hosts": [{"marquee", "carries", '
                  '"detail"}], "on_every_host"}.')  # fmt: skip
    @CONFIG_OPTION
    @click.pass_context
    def command(
        ctx: click.Context, scope: str, rollout_id: str, reason: str, *, as_json: bool,
        config: Path | None,
    ) -> None:  # fmt: skip
        from playguard_async.operator import rollout as rollouts

        _check_reason(reason, rollouts.REASON_MAX)
        with readable_errors(ctx):
            import asyncio

            settings = command_settings(config)
            # The remote layer, once the settings are read: the record goes onto the hosts.
            from playguard_async.operator.rollout_hosts import act_on_hosts

            acted = asyncio.run(act_on_hosts(settings, scope, rollout_id, action, reason))
        if as_json:
            import json

            echo(json.dumps({
                "rollout": rollouts.as_json(acted.rollout),
                "hosts": [host.as_json() for host in acted.hosts],
                "on_every_host": acted.on_every_host,
            }))  # fmt: skip
        else:
            echo(rollouts.summary(acted.rollout))
            for line in acted.host_lines():
                echo(line)
        if not acted.on_every_host:
            ctx.exit(EXIT_NOT_OK)


_rollout_action("promote", "Start the next wave now, whatever its bake; lifts a halt.")
_rollout_action("pause", "Start no further wave until resume.")
_rollout_action("resume", "Let a paused rollout go on.")
_rollout_action("abort", "Stop the rollout: no Marquee takes its release from now on.")


@click.group()
def web() -> None:
    """The web view's users (see the docs, page operations/web-view.md, section "Operating from
    the browser")."""


@web.command("add-user")
@click.argument("name")
@click.argument("role", type=click.Choice(["viewer", "operator", "admin"]))
@click.option("--file", "path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="The users file; default: the web_credential_file setting.")  # fmt: skip
@CONFIG_OPTION
@click.pass_context
def web_add_user(
    ctx: click.Context, name: str, role: str, path: Path | None, config: Path | None
) -> None:
    """Add NAME with ROLE to the users file, or replace NAME's line (its role and password).
    The password is read from standard input when that is not a terminal (one line), else
    asked twice. The file is written whole and renamed over the old one, mode 0600."""
    import sys

    with readable_errors(ctx):
        from playguard_async.settings import load_settings
        from playguard_async.web.users import Role, add_user, password_problem

        # The users file and the password rule only: no desired state is read, so none need be
        # named (``command_settings``' rule).
        settings = load_settings(config)
        if path is None:
            path = settings.web_credential_file
        if path is None:
            fail("no --file and no web_credential_file setting: name the users file", 1)
        if sys.stdin.isatty():
            password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
        else:
            password = sys.stdin.readline().removesuffix("\n").removesuffix("\r")
        problem = password_problem(password, settings.web_password_min_length)
        if problem is not None:
            fail(problem, 1)
        role_named = Role.named(role)
        assert role_named is not None  # click.Choice
        echo(add_user(path, name, role_named, password))


STEERING_COMMANDS = (pause, resume, pin_command, unpin_command, rollout, web)
"""What ``cli`` adds to ``playguard``, in this order."""
