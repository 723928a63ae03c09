"""Copies of the fleet's decisions kept on a Marquee's host, so that Redis is never their only copy.

Redis coordinates the fleet's decisions (a rollout's record, a Marquee's pins), but it may lose
them: a FLUSHALL, a restart without persistence, a failover that lost the last writes. Each host
keeps, in its fenced state directory (``remote.guard``), a copy of those that concern it, one
small file each under ``<state_dir>/kept/``: written through the fence guard like every other
write (``RemoteSession.keep_file``: never in a dry run), read back by any replica, so a copy
outlives every replica and Redis alike. What a copy means, and when it wins over Redis, is the
phases' to say (``phases.decision_copies``); this module only reads and writes the lines.

A copy is host output like any other: at most ``LINE_MAX`` bytes of it are read, and the reader
parses it as outside input.
"""

from __future__ import annotations

from collections.abc import Sequence

from playguard_async.kits.vocabulary import KEEP_A_COPY
from playguard_async.remote.guard import state_dir
from playguard_async.remote.ssh import RemoteSession

LINE_MAX = 64 << 10
"""Bytes of a copy that are read (a rollout record is at most 64 KiB, ``RECORD_MAX``)."""

# $1 state directory ("~/..." is the SSH user's home), $2 the bytes read of each copy, then the
# copies' names. One line per copy that exists: "<name> <its first line>". Shell builtins and
# one head per copy that exists: the names are few (a Marquee's Playgrounds in a staged scope).
_READ_SCRIPT = """
d=$1 n=$2; shift 2
case $d in "~/"*) d=$HOME/${d#"~/"} ;; esac
for c; do
    f="$d/kept/$c"
    [ -f "$f" ] && line=$(head -c "$n" -- "$f" | head -n 1) && printf '%s %s\\n' "$c" "$line"
done
exit 0
"""


def kept_path(session: RemoteSession, name: str) -> str:
    return f"{state_dir(session.marquee)}/kept/{name}"


async def read_kept(session: RemoteSession, names: Sequence[str]) -> dict[str, str]:
    """Name -> the copy the host keeps under it (its first line), for those of ``names`` it
    keeps, in one command."""
    if not names:
        return {}
    argv = ["sh", "-c", _READ_SCRIPT, "sh", state_dir(session.marquee), str(LINE_MAX), *names]
    found: dict[str, str] = {}
    for line in (await session.run(argv)).stdout.splitlines():
        name, _, text = line.partition(" ")
        if name in names:
            found[name] = text
    return found


async def keep(session: RemoteSession, name: str, text: str) -> None:
    """``text`` (one line) as the host's copy ``name``, through the fence guard; nothing in a
    dry run."""
    await session.keep_file(f"{KEEP_A_COPY}{name}", kept_path(session, name), text + "\n")
