"""The host-side fence check: a small POSIX shell guard that every write to a Marquee runs inside.

One invocation takes the host lock (``flock`` on ``<state_dir>/lock``), compares the write's fence
with the highest fence the host accepted (``<state_dir>/fence``), records a higher one atomically
(temp file + rename), appends the write to ``<state_dir>/journal`` and only then runs the write,
still holding the lock. So, with respect to every other playguard writer on that host:

- a write from an older fence than one already accepted is refused by the host itself, however
  sure the stale process is of its lease;
- the check and the write are atomic: a newer holder's write waits for the lock, and a stale
  write cannot slip in between a check and the write it allowed.

The write itself runs with the lock's descriptor closed (``9>&-``), so a child that outlives the
write (a container process, a daemonised helper) can never keep the Marquee locked. The caller
bounds the whole invocation with the host's ``timeout`` (see ``RemoteSession``), so neither the
wait for the lock nor a write whose writer died can hold it longer than one command budget.

Nothing here does I/O: these are argument lists and the parsing of the guard's refusal.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from playguard_async.coordination.fence import FencedLease
from playguard_async.desired_state.model import Marquee
from playguard_async.remote.journal import ABSENT, STARTED, journal_text

REFUSED_STATUS = 75
"""The guard's exit status when it refuses (EX_TEMPFAIL); its stderr then says why."""

JOURNAL_LIMIT = 256 * 1024
"""Bytes past which the journal is cut to its last ``JOURNAL_KEEP`` lines, when a new lease
first writes (so it stays bounded however many writes one lease makes, within one lease's)."""

JOURNAL_KEEP = 1000

# $1 state directory ("~/..." is the SSH user's home), $2 the write's fence, $3 its lease's id,
# $4 a one-line description for the journal; the write's argv follows. The fence file holds
# "<fence> <lease id>": a fence equal to the recorded one passes only for the same lease, so two
# leases that got the same number from a Redis whose counter went back are told apart. Exit 75
# with one "playguard-guard: refused held=<fence|unknown>: <why>" line on stderr when refused;
# otherwise the write's own exit status. A state directory is created whole (fence 0) and moved
# into place, so a directory without its fence file is never a fresh host: a missing or corrupt
# fence file refuses.
GUARD_SCRIPT = f"""
set -u
dir=$1 fence=$2 lease=$3 action=$4
shift 4
case $dir in "~/"*) dir=$HOME/${{dir#"~/"}} ;; esac
refuse() {{
    printf 'playguard-guard: refused held=%s: %s\\n' "$1" "$2" >&2
    exit {REFUSED_STATUS}
}}
umask 077
if [ ! -e "$dir" ]; then
    mkdir -p -- "$(dirname -- "$dir")" 2>/dev/null \\
        || refuse unknown "cannot create the parent directory of the state directory $dir"
    new=$(mktemp -d "$dir.new.XXXXXX" 2>/dev/null) \\
        || refuse unknown "cannot create the state directory $dir"
    if printf '0 -\\n' >"$new/fence" \\
        && printf '{STARTED}%s\\n' "$(date +%s.%N)" >"$new/journal"; then
        mv -T -- "$new" "$dir" 2>/dev/null || rm -rf -- "$new"
    else
        rm -rf -- "$new"
        refuse unknown "cannot initialise the state directory $dir"
    fi
fi
[ -d "$dir" ] || refuse unknown "the state directory $dir is not a directory"
true 2>/dev/null >>"$dir/lock" || refuse unknown "the state directory $dir is not writable"
exec 9>>"$dir/lock"
flock 9 || refuse unknown "cannot take the host lock $dir/lock"
[ -f "$dir/fence" ] || refuse unknown "the fence file $dir/fence is missing: restore it with \\
the highest fence this host accepted (see $dir/journal), or remove $dir to start over"
recorded=
{{ IFS= read -r recorded <"$dir/fence"; }} 2>/dev/null || [ -n "$recorded" ] \\
    || refuse unknown "the fence file $dir/fence is unreadable or empty"
held=${{recorded%% *}} holder=${{recorded#* }}
case $held/$holder in
    /*|*/|*[!0-9]*/*|*/*[!0-9a-f-]*|??????????????????*/*) refuse unknown "the fence file \\
$dir/fence is corrupt: restore it with the highest fence this host accepted (see $dir/journal)" ;;
esac
if [ "$fence" -lt "$held" ]; then
    refuse "$held" "fence $fence is below $held, the highest fence this host accepted"
fi
if [ "$fence" -eq "$held" ] && [ "$lease" != "$holder" ]; then
    refuse "$held" "fence $fence was already taken by another lease on this host (the fence \\
counter in Redis went back)"
fi
if [ "$fence" -gt "$held" ]; then
    {{ printf '%s %s\\n' "$fence" "$lease" >"$dir/fence.new" && sync -- "$dir/fence.new" \\
        && mv -f -- "$dir/fence.new" "$dir/fence"; }} 2>/dev/null \\
        || refuse "$held" "cannot record fence $fence in $dir/fence"
    # Once per lease, not per write: keep the journal bounded.
    if [ "$(wc -c <"$dir/journal")" -gt {JOURNAL_LIMIT} ]; then
        tail -n {JOURNAL_KEEP} -- "$dir/journal" >"$dir/journal.new" \\
            && mv -f -- "$dir/journal.new" "$dir/journal"
    fi
fi
printf '%s %s %s\\n' "$fence" "$(date +%s.%N)" "$action" >>"$dir/journal"
"$@" 9>&-
"""

_REFUSAL = re.compile(r"^playguard-guard: refused held=(?P<held>\d+|unknown): (?P<why>.*)$")

_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def state_dir(marquee: Marquee) -> str:
    """Where the host keeps this Marquee's fence, host lock and journal of accepted writes."""
    return marquee.state_dir or f"~/.local/state/playguard/{marquee.name}"


def lease_id(token: str) -> str:
    """What the host records of a lease: a digest of its token, which itself never leaves Redis
    (the host's process list shows a write's arguments)."""
    return hashlib.sha256(token.encode()).hexdigest()[:16]


def guarded(
    lease: FencedLease,
    marquee: Marquee,
    action: str,
    argv: Sequence[str],
    *,
    cycle_id: str | None = None,
    read_through: int | None = None,
) -> list[str]:
    """``argv`` as a write the host runs only if the lease's fence passes its check; its
    journal line names ``cycle_id``, the cycle that makes it, and ``read_through``, how far
    that cycle read the change log (``remote.journal``)."""
    line = journal_text(_CONTROL.sub(" ", action), cycle_id, read_through)
    return ["sh", "-c", GUARD_SCRIPT, "playguard-guard", state_dir(marquee), str(lease.fence),
            lease_id(lease.token), line, *argv]  # fmt: skip


def read_fence(marquee: Marquee) -> list[str]:
    """Prints the highest fence the host accepted and its lease's id; prints nothing where no
    write was fenced yet."""
    script = (
        'd=$1; case $d in "~/"*) d=$HOME/${d#"~/"} ;; esac; test ! -e "$d" || cat -- "$d/fence"'
    )
    return ["sh", "-c", script, "sh", state_dir(marquee)]


def read_journal(marquee: Marquee, limit: int) -> list[str]:
    """Prints the last ``limit`` bytes of the journal, whole lines only (when the journal is
    longer, the first line of that tail, which may be cut, is dropped); prints ``ABSENT`` where
    no write was journalled yet (``journal.journal_started``)."""
    script = (
        'd=$1; case $d in "~/"*) d=$HOME/${d#"~/"} ;; esac; f=$d/journal; '
        f'test -f "$f" || {{ echo "{ABSENT}"; exit 0; }}; '
        'if [ "$(wc -c <"$f")" -gt "$2" ]; then tail -c "$2" -- "$f" | tail -n +2; '
        'else cat -- "$f"; fi'
    )
    return ["sh", "-c", script, "sh", state_dir(marquee), str(limit)]


def refusal(exit_status: int | None, stderr: str) -> tuple[int | None, str] | None:
    """The host's fence and its words when the guard refused, else None (the write ran).

    Only the guard's own line counts: it refuses before the write starts, so a refusal's stderr is
    that line alone, and a write that happens to exit 75 is not mistaken for one.
    """
    if exit_status != REFUSED_STATUS:
        return None
    match = _REFUSAL.match(stderr.strip())
    if match is None:
        return None
    held = match["held"]
    return (None if held == "unknown" else int(held)), match["why"]
