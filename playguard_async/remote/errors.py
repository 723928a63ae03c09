"""Typed failures of the remote layer: each names the host and what a person needs to act."""

from __future__ import annotations

from collections.abc import Sequence

from playguard_async.remote.reach import Unreachable


def command_name(argv: Sequence[str]) -> str:
    """The program and its first word, past any ``env NAME=value`` prefix: "git clone"."""
    words = list(argv)
    if words and words[0] == "env":
        words = [word for word in words[1:] if "=" not in word]
    return " ".join(words[:2])


class RemoteError(Exception):
    """Something on or on the way to one Marquee failed; other Marquees are unaffected."""

    def __init__(self, host: str, message: str) -> None:
        super().__init__(f"{host}: {message}")
        self.host = host


class HostUnreachable(RemoteError, Unreachable):
    """No SSH connection could be made or kept (refused, timed out, lost). ``reason`` is what
    happened and to which address, in words: ``connection refused (127.0.0.1:22)``."""

    def __init__(self, host: str, message: str, *, reason: str) -> None:
        super().__init__(host, message)
        self.reason = reason


class MarqueeMisconfigured(RemoteError, Unreachable):
    """The Marquee's own entry cannot be used (its identity file, known_hosts file or user name);
    nothing was sent to the host. The message names the field and the file; ``reason`` names
    them and the Marquee."""

    def __init__(self, host: str, message: str, *, marquee: str) -> None:
        super().__init__(host, message)
        self.reason = f"{message} (marquee {marquee})"


class AuthRefused(RemoteError, Unreachable):
    """The host refused our key."""

    def __init__(self, host: str, message: str, *, address: str) -> None:
        super().__init__(host, message)
        self.reason = f"auth refused ({address}): {message}"


class HostKeyMismatch(RemoteError, Unreachable):
    """The host's key is not the one known_hosts holds for it (unknown or changed)."""

    def __init__(
        self, host: str, fingerprint: str | None, known_hosts: str, *, address: str
    ) -> None:
        shown = fingerprint or "unknown (the host did not show its key again)"
        trusted = f"host key {shown} is not trusted by {known_hosts}"
        super().__init__(
            host, f"{trusted}; if the host was really re-keyed, replace its line there"
        )
        self.fingerprint = fingerprint
        self.reason = f"host key mismatch ({address}): {trusted}"


class RemoteCommandFailed(RemoteError):
    """A remote command exited non-zero; carries its exit status and the tail of its stderr."""

    def __init__(
        self,
        host: str,
        argv: Sequence[str],
        exit_status: int | None,
        stderr: str,
        *,
        what: str | None = None,
    ) -> None:
        tail = stderr.strip()[-500:]
        what = what or command_name(argv)
        super().__init__(host, f"{what} exited {exit_status}: {tail}")
        self.what = what
        self.argv = list(argv)
        self.exit_status = exit_status
        self.stderr_tail = tail


class RemoteCommandTimeout(RemoteError):
    """A remote command ran past its timeout and was abandoned."""

    def __init__(self, host: str, argv: Sequence[str], timeout: float) -> None:
        super().__init__(host, f"{command_name(argv)} did not finish within {timeout:g}s")
        self.argv = list(argv)
        self.timeout = timeout


class UnfencedWrite(RemoteError):
    """A write tried to reach the host outside the fence guard: through the Docker API tunnel,
    or from a session that holds no lease. A bug, never sent."""

    def __init__(self, host: str, what: str) -> None:
        super().__init__(host, f"refused to send an unfenced write ({what}): writes go through "
                         "RemoteSession.change with a lease")  # fmt: skip


class DockerApiError(RemoteError):
    """The Docker Engine API answered with an error; ``status`` is its HTTP status."""

    def __init__(self, host: str, status: int, message: str) -> None:
        super().__init__(host, f"Docker API {status}: {message}")
        self.status = status
