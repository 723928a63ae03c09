"""Copies of the fleet's decisions kept on a Marquee's host, so that Redis is never their only copy.

Redis coordinates the fleet's decisions (a rollout's record, a Marquee's pins), but it may lose
them: a FLUSHALL, a restart without persistence, a failover that lost the last writes. Each host
keeps, in its fenced state directory (``remote.guard``), a copy of those that concern it, one
small file each under ``<state_dir>/kept/``: written through the fence guard like every other
write (``RemoteSession.keep_file``: never in a dry run), read back by any replica, so a copy
outlives every replica and Redis alike. What a copy means, and when it wins over Redis, is the
phases' to say (``phases.decision_copies``); this module only reads and writes the lines, with
one rule of its own: a write never takes a copy back to a lower or equal write count (``keep``),
whatever the writer believed the host to hold.

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


HELD = "held "
"""How the write script starts its answer when it left a copy as newer than the write."""

# $1 the copy's path ("~/..." is the SSH user's home), $2 the write count of the copy written
# ("-": any copy there is replaced), $3 the bytes read of the copy there; the new copy on stdin.
# A copy there whose first line carries a write count ("seq":N, at most 18 digits) at or above
# $2 is left as it is: "held <its first line>" is printed. Anything else there (no copy, an
# older one, one without a count it can read) is replaced, through a file moved into place.
_WRITE_SCRIPT = """
f=$1 seq=$2 n=$3
case $f in "~/"*) f=$HOME/${f#"~/"} ;; esac
if [ "$seq" != - ] && [ -f "$f" ]; then
    line=$(head -c "$n" -- "$f" | head -n 1)
    held=$(printf '%s\\n' "$line" | sed -n 's/.*"seq":\\([0-9]\\{1,18\\}\\)[,}].*/\\1/p')
    if [ -n "$held" ] && [ "$held" -ge "$seq" ]; then
        cat >/dev/null
        printf 'held %s\\n' "$line"
        exit 0
    fi
fi
umask 077 && mkdir -p -- "$(dirname -- "$f")" && cat >"$f.tmp" && mv -f -- "$f.tmp" "$f"
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


async def keep(session: RemoteSession, name: str, text: str, seq: int | None) -> str | None:
    """``text`` (one line) as the host's copy ``name``, through the fence guard; nothing in a
    dry run. ``seq`` is the write count ``text`` carries: where the copy there carries the same
    or a higher one, the host leaves it and its first line is returned (decided on the host,
    under its lock, so no write of another replica comes between). None: written (or a dry
    run); ``seq`` None: written whatever is there (a copy the caller cannot read)."""
    argv = ["sh", "-c", _WRITE_SCRIPT, "sh", kept_path(session, name),
            "-" if seq is None else str(seq), str(LINE_MAX)]  # fmt: skip
    said = await session.keep_by(f"{KEEP_A_COPY}{name}", argv, text + "\n")
    return said.removeprefix(HELD).rstrip("\n") if said.startswith(HELD) else None
