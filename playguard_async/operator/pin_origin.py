"""Whether a Playspec's origin has a commit, before a pin at it is stored (``pin``): a pin at a
commit the origin does not have could never be applied.

The origin is asked from the Playground's Marquee (``remote.git.commit_on_origin``), over a
session that cannot write: that is where a cycle reaches it, with the Marquee's credentials for
it (git's credential helper, an SSH deploy key), which this machine need not have. The repo URL
shown in a refusal carries no credentials: the inventory refuses one that does
(``desired_state.git_url``).
"""

from __future__ import annotations

import asyncio

from playguard_async.desired_state.model import Inventory, Playground
from playguard_async.operator.fleet import OperateError
from playguard_async.remote import git
from playguard_async.remote.errors import RemoteCommandTimeout, RemoteError
from playguard_async.remote.reach import Unreachable
from playguard_async.remote.ssh import CommandResult, open_session
from playguard_async.service.wiring import remote_options
from playguard_async.settings import Settings


async def check_on_origin(
    settings: Settings, inventory: Inventory, playground: Playground, commit: str
) -> None:
    """``OperateError`` naming the Playground, the commit and the origin unless the origin
    of the Playground's Playspec has ``commit``, asked from its Marquee over a session that
    cannot write; bounded as a cycle's command is (connect, then the remote command timeout)."""
    marquee, repo = playground.marquee, inventory.playspec_of(playground).repo
    options = remote_options(settings)
    subject = f"{marquee}/{playground.name}: commit {commit}"
    try:
        async with (
            asyncio.timeout(options.connect_timeout + options.command_timeout),
            open_session(inventory.marquee(marquee), options, dry_run=True) as session,
        ):
            result = await session.run(git.commit_on_origin(repo, commit), check=False)
    except (RemoteCommandTimeout, TimeoutError):
        raise OperateError(
            f"{subject}: cannot tell whether origin {repo} has it: no answer within "
            f"{options.connect_timeout + options.command_timeout:g} s, asked from marquee {marquee}"
        ) from None
    except RemoteError as exc:
        reason = exc.reason if isinstance(exc, Unreachable) else str(exc)
        raise OperateError(
            f"{subject}: cannot tell whether origin {repo} has it: marquee {marquee}, which "
            f"asks the origin, cannot be used: {reason}"
        ) from None
    problem = origin_problem(result, repo, marquee)
    if problem is not None:
        raise OperateError(f"{subject}: {problem}")


def origin_problem(result: CommandResult, repo: str, marquee: str) -> str | None:
    """What ``commit_on_origin``'s answer says is wrong, in words (None: the origin has it),
    with the last line git said, which names the cause (an origin that refuses to give a
    commit by name says so there)."""
    status = result.exit_status
    if status == 0:
        return None
    said = _last_line(result.stderr)
    if status == git.ORIGIN_LACKS:
        return f"not on origin {repo} (pin refused; asked from marquee {marquee}: {said})"
    if status == git.NOT_A_COMMIT:
        return f"origin {repo} has an object of that name, but not a commit (pin refused)"
    if status == git.ORIGIN_AWAY:
        return f"cannot tell: origin {repo} does not answer from marquee {marquee}: {said}"
    return (
        f"cannot tell whether origin {repo} has it: the check on marquee {marquee} exited "
        f"{status}: {said}"
    )


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no message"
