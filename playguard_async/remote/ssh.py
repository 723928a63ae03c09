"""One remote session per cycle: remote commands, the Docker API through it, and the write funnel.

The session's SSH connection is its own or lent by the replica's pool (``remote.pool``) across
cycles of the same Marquee; the session itself, its lease, its tunnel and its reads are the
cycle's alone.

asyncssh's habits: one connection, many channels; ``async with`` for everything that must close;
timeouts are arguments. Host keys are always checked against the Marquee's known_hosts file, and
there is deliberately no switch to turn that off.

Every change to a host goes through ``RemoteSession.change``: compose up/down, git, container
create/start/remove, image pulls, file writes. That one door is where dry-run stops writes, where
actions are recorded for the operator, and where each write is wrapped in the host-side fence
guard (``remote.guard``) with the lease's fence. The Docker API reached through the tunnel is
read-only: the session's HTTP client refuses any request that would change the engine, so a write
cannot reach dockerd except as a fenced command.

Every remote command is bounded on the host too: it runs under the host's ``timeout`` with a
budget that ends before the lease's deadline, and a command we abandon (timeout, cancellation)
has its process group killed on the host, so no remote work outlives the lease that started it.
"""

from __future__ import annotations

import asyncio
import functools
import shlex
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import aiodocker
import aiohttp
import asyncssh
import structlog
from asyncssh.saslprep import SASLPrepError, saslprep

from playguard_async.coordination.fence import FencedLease, FenceRefused
from playguard_async.desired_state.model import Marquee
from playguard_async.kits.aio import bounded, in_thread
from playguard_async.kits.files import FileRefused, read_limited, read_text_limited
from playguard_async.kits.last_written import LastWritten
from playguard_async.remote import guard
from playguard_async.remote.errors import (
    AuthRefused,
    DockerApiError,
    HostKeyMismatch,
    HostUnreachable,
    MarqueeMisconfigured,
    RemoteCommandFailed,
    RemoteCommandTimeout,
    UnfencedWrite,
)
from playguard_async.remote.memo import ComposeMemo

log = structlog.get_logger("playguard.remote")

_T = TypeVar("_T")

# sshd's MaxSessions (10 by default) caps channels per connection, and kept at 10 in flight it
# refuses some opens: a slot frees a moment after the client sees a channel close (bench/README.md,
# "Facts the code relies on").
# Commands, Docker API connections and a kill together stay well below it; a refused open is
# retried.
COMMAND_CHANNELS = 5
DOCKER_CHANNELS = 3
_OPEN_RETRIES = 4

KILL_AFTER = 1.0
"""Seconds the host's ``timeout`` waits after TERM before it sends KILL."""

MIN_BUDGET = 0.5
"""The least host-side budget a command is sent with, however little of the lease is left."""

_KILL_BOUND = 3.0
_TIMED_OUT = 124  # the host's `timeout` ended the command

# Prints the shell's PID (the process group `timeout` makes, as it keeps that PID by exec), then
# runs the command under the budget. $1 budget, then the command's argv.
_BOUNDED = f'b=$1; shift; echo "$$"; exec timeout --kill-after={KILL_AFTER:g} "$b" "$@"'

# Ends an abandoned command's process group on the host; returns at once and finishes there.
_KILL_GROUP = '(kill -TERM "-$1"; sleep 1; kill -KILL "-$1") >/dev/null 2>&1 </dev/null &'

# The Engine API calls that change nothing on the host: reads, and a login check (POST /auth
# stores nothing).
_READ_METHODS = frozenset({"GET", "HEAD"})


@dataclass(frozen=True)
class RemoteOptions:
    """How the remote layer behaves; built from settings."""

    connect_timeout: float = 10.0
    keepalive_interval: float = 15.0
    keepalive_count_max: int = 3
    command_timeout: float = 120.0
    output_limit: int = 1 << 20
    docker_timeout: float = 120.0
    compose_command: tuple[str, ...] = ("docker", "compose")
    stuck_after: float = 300.0
    health_grace: float = 5.0
    orphan_grace: float = 600.0
    agent_chat_network: str = "none"


@dataclass(frozen=True)
class CommandResult:
    argv: list[str]
    exit_status: int | None
    stdout: str
    stderr: str
    truncated: bool = False


@dataclass
class RemoteSession:
    """What phases use to see and change one Marquee during one cycle.

    ``lease`` is the cycle's lease: its fence goes with every write, and its deadline bounds
    every command on the host. A session without one (operators' ``check``) only reads.
    """

    marquee: Marquee
    connection: asyncssh.SSHClientConnection
    docker: aiodocker.Docker
    options: RemoteOptions
    lease: FencedLease | None = None
    dry_run: bool = False
    cycle_id: str | None = None
    """The cycle this session writes for: the host's journal names it with each write."""
    read_through: int | None = None
    """The change-log id up to which that cycle read every entry (``cycle_record.read_through``;
    None: a YAML file, or no cycle): the journal names it with each write."""
    actions: list[str] = field(default_factory=list)
    host_fence: int | None = None
    """The highest fence the host was last seen to hold: ours after an accepted write, the
    host's own after a refusal; None while this session wrote nothing."""
    compose_memo: ComposeMemo = field(default_factory=lambda: ComposeMemo(0))
    """What compose answered in earlier cycles (the replica's, shared by its sessions)."""
    seen_memo: LastWritten = field(default_factory=lambda: LastWritten(0.0))
    """The container listings the replica last kept in Redis (``phases.containers_listed``),
    shared by its sessions: an unchanged one is not written again (this default, a
    session's own, writes each)."""
    writes: int = 0
    """Writes this session attempted: a read of the host made before the last one is stale."""
    pulled: set[str] = field(default_factory=set)
    """Image references pulled in this cycle, or in a dry run that would be, each spelt the
    one way (``registry.was_pulled``): a later phase that needs one takes it as there, as it
    is in the cycle that pulls it (a plan that did not listed the same pull twice)."""
    planned_commits: dict[str, str] = field(default_factory=dict)
    """In a dry run, Playground -> the commit its checkout would be moved to (an update to its
    branch head, a hold's checkout): a later phase reads its files as they would be then
    (``remote.planned``), as the cycle that moves it does."""
    _reads: dict[Hashable, tuple[int | None, Any]] = field(default_factory=dict)
    _channels: asyncio.Semaphore = field(
        default_factory=lambda: asyncio.Semaphore(COMMAND_CHANNELS)
    )
    _kills: set[asyncio.Task[None]] = field(default_factory=set)

    async def read_once(
        self, key: Hashable, read: Callable[[], Awaitable[_T]], *, of_host: bool = True
    ) -> _T:
        """``read()``'s answer, made once per cycle and shared by the phases that need it.

        A read ``of_host`` is made again after any write this session attempts (the write may
        have changed what it read); one of something else (a git origin) stands for the cycle.
        """
        stamp = self.writes if of_host else None
        cached = self._reads.get(key)
        if cached is not None and cached[0] == stamp:
            return cast(_T, cached[1])
        value = await read()
        self._reads[key] = (stamp, value)
        return value

    def actions_since(self, mark: int) -> list[str]:
        """The actions recorded after ``mark`` (an earlier ``len(session.actions)``)."""
        return self.actions[mark:]

    @property
    def fence(self) -> int:
        """The lease's fence, for the labels of what a write makes (``UnfencedWrite`` without
        a lease: such a session cannot write)."""
        if self.lease is None:
            raise UnfencedWrite(self.host, "no lease")
        return self.lease.fence

    @property
    def host(self) -> str:
        return f"{self.marquee.name} ({self.marquee.host}:{self.marquee.port})"

    def _budget(self, timeout: float) -> float:
        """The host-side budget: ``timeout``, cut so that the command (and the KILL its
        ``timeout`` sends after TERM) ends before the lease's deadline."""
        if self.lease is None:
            return timeout
        return max(MIN_BUDGET, min(timeout, self.lease.remaining() - KILL_AFTER))

    async def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        check: bool = True,
    ) -> CommandResult:
        """Run a command that only reads; each argument is quoted, output is capped.

        Raises ``RemoteCommandFailed`` on a non-zero exit (unless ``check`` is False) and
        ``RemoteCommandTimeout`` when it runs past its budget (``timeout``, or less when the
        lease ends sooner).
        """
        budget = self._budget(self.options.command_timeout if timeout is None else timeout)
        command = shlex.join(["sh", "-c", _BOUNDED, "sh", f"{budget:.3f}", *argv])
        try:
            async with asyncio.timeout(budget), self._channels:
                result = await self._execute(list(argv), command, stdin)
        except TimeoutError:
            raise RemoteCommandTimeout(self.host, argv, budget) from None
        except (OSError, asyncssh.Error) as exc:
            raise HostUnreachable(
                self.host,
                f"connection failed during {argv[0]}: {exc}",
                reason=f"connection lost ({address_of(self.marquee)})",
            ) from exc
        if result.exit_status == _TIMED_OUT:
            raise RemoteCommandTimeout(self.host, argv, budget)
        if check and result.exit_status != 0:
            raise RemoteCommandFailed(self.host, argv, result.exit_status, result.stderr)
        return result

    async def _execute(self, argv: list[str], command: str, stdin: str | None) -> CommandResult:
        for attempt in range(_OPEN_RETRIES):
            try:
                process = await self.connection.create_process(
                    command, encoding="utf-8", errors="replace"
                )
                break
            except asyncssh.ChannelOpenError:
                if attempt == _OPEN_RETRIES - 1:
                    raise
                await asyncio.sleep(0.05 * (attempt + 1))
        group = ""
        try:
            try:
                if stdin is not None:
                    process.stdin.write(stdin)
                process.stdin.write_eof()
            except BrokenPipeError:
                # The command ended before we sent it all (a read as fast as `test`, a guard
                # refusing before it reads): the host already closed the channel, and the
                # command's output and exit status, still to be read, say how it went.
                pass
            group = (await process.stdout.readline()).strip()
            limit = self.options.output_limit
            (stdout, out_cut), (stderr, err_cut) = await asyncio.gather(
                _read_capped(process.stdout, limit), _read_capped(process.stderr, limit)
            )
            completed = await process.wait()
        except BaseException:
            # Abandoned (timeout, cancellation, lost connection): drop the channel without waiting
            # and end the command's process group on the host; its `timeout` is the backstop.
            process.channel.abort()
            self._kill_group(group)
            raise
        finally:
            process.close()
        return CommandResult(argv, completed.exit_status, stdout, stderr, out_cut or err_cut)

    def _kill_group(self, group: str) -> None:
        """Kill an abandoned command's process group on the host, in the background; the
        session waits for it (bounded) before it closes."""
        if not group.isdigit() or self.connection.is_closed():
            return
        task = asyncio.ensure_future(self._send_kill(group))
        self._kills.add(task)
        task.add_done_callback(self._kills.discard)

    async def _send_kill(self, group: str) -> None:
        command = shlex.join(["sh", "-c", _KILL_GROUP, "sh", group])
        try:
            async with asyncio.timeout(_KILL_BOUND):
                await self.connection.run(command, check=False)
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            log.warning("remote.kill_failed", process_group=group, error=str(exc))

    async def settle(self) -> None:
        """Wait (bounded) for the kills of abandoned commands to reach the host."""
        if self._kills:
            await asyncio.wait(set(self._kills), timeout=_KILL_BOUND)

    async def change(
        self, action: str, argv: Sequence[str], *, stdin: str | None = None,
        timeout: float | None = None,
    ) -> CommandResult | None:  # fmt: skip
        """The one door for every change to the host: ``argv`` run inside the fence guard.

        Records ``action`` for the cycle's report; in dry-run, records it as what would be done
        and returns None without running anything. Raises ``FenceRefused`` when the host refuses
        the lease's fence, ``UnfencedWrite`` when the session holds no lease.
        """
        if self.dry_run:
            self.actions.append(f"would {action}")
            log.info("remote.would_change", action=action)
            return None
        self.writes += 1
        result = await self._guarded(action, argv, stdin=stdin, timeout=timeout)
        self.actions.append(action)
        return result

    async def write_file(self, action: str, path: str, content: str) -> None:
        """Write ``content`` to ``path`` on the host, mode 0600, from stdin (never argv);
        ``~/path`` is under the SSH user's home, as a state directory may be."""
        await self.change(action, self._file_writer(path), stdin=content)

    async def keep_file(self, action: str, path: str, content: str) -> None:
        """Write playguard's own bookkeeping (``write_file``'s way, through the fence guard), a
        file no read of this cycle depends on: not a change of the host's desired state, so no
        action of the cycle's report, and nothing at all in dry-run (a plan changes nothing)."""
        await self.keep_by(action, self._file_writer(path), content)

    async def keep_by(self, action: str, argv: Sequence[str], stdin: str) -> str:
        """Bookkeeping as ``keep_file`` writes it, by a command of the caller's (``stdin`` its
        input) that may decline the write (``remote.kept``: a newer copy is there); what it
        printed, "" in dry-run."""
        if self.dry_run:
            return ""
        return (await self._guarded(action, argv, stdin=stdin, timeout=None)).stdout

    @staticmethod
    def _file_writer(path: str) -> list[str]:
        script = (
            'f=$1; case $f in "~/"*) f=$HOME/${f#"~/"} ;; esac; '
            'umask 077 && mkdir -p -- "$(dirname -- "$f")" '
            '&& cat > "$f.tmp" && mv -f -- "$f.tmp" "$f"'
        )
        return ["sh", "-c", script, "sh", path]

    async def _guarded(
        self, action: str, argv: Sequence[str], *, stdin: str | None, timeout: float | None
    ) -> CommandResult:
        """``argv`` run inside the fence guard under this session's lease."""
        fence = self.fence
        assert self.lease is not None  # self.fence refused a session without one
        log.info("remote.change", action=action, fence=fence)
        result = await self.run(
            guard.guarded(
                self.lease,
                self.marquee,
                action,
                argv,
                cycle_id=self.cycle_id,
                read_through=self.read_through,
            ),
            stdin=stdin,
            timeout=timeout,
            check=False,
        )
        refused = guard.refusal(result.exit_status, result.stderr)
        if refused is not None:
            self.host_fence, why = refused
            log.error("remote.fenced", action=action, fence=fence, host_fence=self.host_fence)
            raise FenceRefused(self.host, fence, self.host_fence, why)
        self.host_fence = fence
        if result.exit_status != 0:
            raise RemoteCommandFailed(
                self.host, argv, result.exit_status, result.stderr, what=action
            )
        return CommandResult(list(argv), result.exit_status, result.stdout, result.stderr,
                             result.truncated)  # fmt: skip

    async def api(self, call: Awaitable[_T]) -> _T:
        """Await a Docker API read, turning its failures into ``DockerApiError``."""
        try:
            async with asyncio.timeout(self.options.docker_timeout):
                return await call
        except aiodocker.DockerError as exc:
            raise DockerApiError(self.host, exc.status, str(exc.message)) from exc
        except TimeoutError:
            raise DockerApiError(self.host, 504, "no answer in time") from None
        except (aiohttp.ClientError, OSError) as exc:
            raise HostUnreachable(
                self.host,
                f"Docker API unreachable: {exc}",
                reason=f"Docker API unreachable through SSH ({address_of(self.marquee)})",
            ) from exc


def _read_only(host: str) -> Any:
    """An aiohttp client middleware that lets only reads (and the login check) reach the engine:
    a write sent through the tunnel would bypass the host's fence check."""

    async def middleware(
        request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        if request.method not in _READ_METHODS and not (
            request.method == "POST" and request.url.path.rstrip("/").endswith("/auth")
        ):
            raise UnfencedWrite(host, f"{request.method} {request.url.path}")
        return await handler(request)

    return middleware


async def _read_capped(stream: asyncssh.SSHReader[str], limit: int) -> tuple[str, bool]:
    """Read a stream to its end but keep only its last ``limit`` characters."""
    kept = ""
    truncated = False
    while chunk := await stream.read(65536):
        kept += chunk
        if len(kept) > limit:
            kept, truncated = kept[-limit:], True
    return kept, truncated


CLIENT_FILE_LIMIT = 1 << 20
"""Bytes an identity or known_hosts file may have; both are a few kilobytes in practice."""


def _client_files(marquee: Marquee, host: str) -> tuple[asyncssh.SSHKey, asyncssh.SSHKnownHosts]:
    """The Marquee's key and known hosts, read and checked here so that a file that is not what
    it should be (not a key, not UTF-8, a FIFO, huge) or a user name SASLprep refuses is named,
    field and file, instead of surfacing as whatever asyncssh raises deep inside ``connect``."""
    try:
        saslprep(marquee.user)
    except SASLPrepError as exc:
        raise MarqueeMisconfigured(
            host, f"user {marquee.user!r}: not a usable SSH user name ({exc})", marquee=marquee.name
        ) from None
    try:
        key = asyncssh.import_private_key(
            read_limited(marquee.identity_file, CLIENT_FILE_LIMIT).data
        )
    except FileRefused as exc:
        raise MarqueeMisconfigured(host, f"identity_file {exc}", marquee=marquee.name) from None
    except (asyncssh.KeyImportError, ValueError) as exc:
        raise MarqueeMisconfigured(
            host,
            f"identity_file {marquee.identity_file}: not a usable private key ({exc})",
            marquee=marquee.name,
        ) from None
    try:
        known_hosts = asyncssh.import_known_hosts(
            read_text_limited(marquee.known_hosts, CLIENT_FILE_LIMIT)
        )
    except FileRefused as exc:
        raise MarqueeMisconfigured(host, f"known_hosts {exc}", marquee=marquee.name) from None
    except ValueError as exc:
        raise MarqueeMisconfigured(
            host,
            f"known_hosts {marquee.known_hosts}: not a known_hosts file ({exc})",
            marquee=marquee.name,
        ) from None
    return key, known_hosts


async def connect(marquee: Marquee, options: RemoteOptions) -> asyncssh.SSHClientConnection:
    host = f"{marquee.name} ({marquee.host}:{marquee.port})"
    try:
        key, known_hosts = await in_thread(
            functools.partial(_client_files, marquee, host),
            options.connect_timeout,
            name="ssh-client-files",
        )
    except TimeoutError:
        raise MarqueeMisconfigured(
            host,
            f"identity_file or known_hosts not read within {options.connect_timeout:g} s",
            marquee=marquee.name,
        ) from None
    try:
        return await asyncssh.connect(
            marquee.host,
            port=marquee.port,
            username=marquee.user,
            client_keys=[key],
            known_hosts=known_hosts,
            config=None,
            agent_path=None,
            password=None,
            connect_timeout=options.connect_timeout,
            keepalive_interval=options.keepalive_interval,
            keepalive_count_max=options.keepalive_count_max,
        )
    except asyncssh.HostKeyNotVerifiable:
        raise HostKeyMismatch(
            host,
            await _fingerprint(marquee, options),
            str(marquee.known_hosts),
            address=address_of(marquee),
        ) from None
    except asyncssh.PermissionDenied as exc:
        raise AuthRefused(
            host,
            f"key {marquee.identity_file} refused for user {marquee.user!r}: {exc.reason}",
            address=f"{marquee.user}@{address_of(marquee)}",
        ) from exc
    except (OSError, TimeoutError, asyncssh.Error) as exc:
        words = connect_failure(exc, options.connect_timeout)
        raise HostUnreachable(
            host,
            f"cannot connect over SSH: {words}",
            reason=f"{words} ({address_of(marquee)})",
        ) from exc


def address_of(marquee: Marquee) -> str:
    """``HOST:PORT`` as an operator would type it (``[::1]:22`` for IPv6)."""
    host = f"[{marquee.host}]" if ":" in marquee.host else marquee.host
    return f"{host}:{marquee.port}"


def connect_failure(exc: BaseException, timeout: float) -> str:
    """Why an SSH connect failed, in a few words and never a repr: ``connection refused``,
    ``timeout (no answer within 5 s)``, ``host name not resolved``, ``connection lost``..."""
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, TimeoutError):
        return f"timeout (no answer within {timeout:g} s)"
    if isinstance(exc, socket.gaierror):
        return f"host name not resolved ({exc.strerror or exc})"
    if isinstance(exc, ConnectionError | asyncssh.ConnectionLost):
        return "connection lost"
    if isinstance(exc, asyncssh.Error):
        reason = " ".join(exc.reason.split())
        return f"SSH: {reason}" if reason else type(exc).__name__
    words = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return " ".join(words.split()).lower() or type(exc).__name__


async def _fingerprint(marquee: Marquee, options: RemoteOptions) -> str | None:
    """The key the host shows, for the error message only; never trusted for anything."""
    try:
        key = await bounded(
            options.connect_timeout,
            asyncssh.get_server_host_key(marquee.host, marquee.port, config=None),
        )
    except (OSError, TimeoutError, asyncssh.Error):
        return None
    return key.get_fingerprint("sha256") if key is not None else None


@asynccontextmanager
async def open_session(
    marquee: Marquee,
    options: RemoteOptions,
    *,
    lease: FencedLease | None = None,
    dry_run: bool = False,
    cycle_id: str | None = None,
    read_through: int | None = None,
    connections: ConnectionSource | None = None,
    compose_memo: ComposeMemo | None = None,
    seen_memo: LastWritten | None = None,
) -> AsyncIterator[RemoteSession]:
    """Connect, forward the remote Docker socket into a private directory, and close it all after.

    The forwarded socket lives in a fresh 0700 directory, so no other local user can reach the
    remote engine through it; the HTTP client on it is read-only (writes are fenced commands).
    ``connections`` lends the SSH connection (``remote.pool``); without it the session makes its
    own and closes it. Either way the session, its lease and its tunnel are this cycle's own.
    """
    lent = (connections or _own_connection(options))(marquee)
    connection = await lent.__aenter__()
    private_dir = Path(tempfile.mkdtemp(prefix="playguard-docker-"))
    try:
        local_socket = private_dir / "docker.sock"
        listener = await connection.forward_local_path(str(local_socket), marquee.docker_socket)
        connector = aiohttp.UnixConnector(path=str(local_socket), limit=DOCKER_CHANNELS)
        http = aiohttp.ClientSession(
            connector=connector, middlewares=(_read_only(f"{marquee.name}"),)
        )
        docker = aiodocker.Docker(url="unix://localhost", session=http)
        session = RemoteSession(
            marquee, connection, docker, options, lease, dry_run=dry_run, cycle_id=cycle_id,
            read_through=read_through,
        )  # fmt: skip
        if compose_memo is not None:
            session.compose_memo = compose_memo
        if seen_memo is not None:
            session.seen_memo = seen_memo
        try:
            yield session
        finally:
            await session.settle()
            await docker.close()
            await http.close()
            await connector.close()
            listener.close()
            await listener.wait_closed()
    finally:
        shutil.rmtree(private_dir, ignore_errors=True)
        await lent.__aexit__(None, None, None)


ConnectionSource = Callable[[Marquee], AbstractAsyncContextManager[asyncssh.SSHClientConnection]]
"""Lends an SSH connection to a Marquee for one session (``ConnectionPool.connection``)."""


def _own_connection(options: RemoteOptions) -> ConnectionSource:
    """A connection made for one session and closed after it."""

    @asynccontextmanager
    async def own(marquee: Marquee) -> AsyncIterator[asyncssh.SSHClientConnection]:
        connection = await connect(marquee, options)
        try:
            yield connection
        finally:
            connection.close()
            await connection.wait_closed()

    return own
