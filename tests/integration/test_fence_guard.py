"""The host-side fence guard, run by the lab's real sshd: what the host accepts, refuses and keeps.

Each write here goes through ``RemoteSession.change`` exactly as a phase's would; the lease is a
``StaticLease`` (a fence and a deadline), since the remote layer needs nothing else of one, and
what the host did is read back from the files the writes and the guard leave behind.
"""

from __future__ import annotations

import asyncio
import os
import random
import stat
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import aiodocker
import pytest

from playguard_async.coordination.fence import FenceRefused
from playguard_async.desired_state.model import Marquee
from playguard_async.remote.docker import FENCE, our_labels, remove_container, run_container
from playguard_async.remote.errors import RemoteCommandTimeout, UnfencedWrite
from playguard_async.remote.journal import journal_started
from playguard_async.remote.ssh import RemoteOptions, RemoteSession, open_session
from playguard_lab import DockerDaemon, SshServer
from tests.support.fencing import StaticLease, eventually, host_fence, journal
from tests.support.world import lab_marquee_fields

pytestmark = pytest.mark.integration

OPTIONS = RemoteOptions(connect_timeout=5.0, command_timeout=60.0, docker_timeout=10.0)

Opener = Callable[..., AbstractAsyncContextManager[RemoteSession]]


@pytest.fixture
def marquee(ssh_server: SshServer, docker_daemon: DockerDaemon, tmp_path: Path) -> Marquee:
    return Marquee.model_validate(lab_marquee_fields(ssh_server, docker_daemon, tmp_path / "w"))


@pytest.fixture
def state(marquee: Marquee) -> Path:
    assert marquee.state_dir is not None
    return Path(marquee.state_dir)


@pytest.fixture
def session_for(marquee: Marquee) -> Opener:
    """``async with session_for(fence, seconds=60) as session``: a session on the lab Marquee
    under a lease of that fence; sessions given the same fence share one lease (token)."""
    tokens: dict[int, str] = {}

    def opener(
        fence: int, *, seconds: float = 60.0, options: RemoteOptions = OPTIONS
    ) -> AbstractAsyncContextManager[RemoteSession]:
        token = tokens.setdefault(fence, str(uuid.uuid4()))
        return open_session(marquee, options, lease=StaticLease(fence, seconds, token))

    return opener


def append(record: Path, text: str) -> list[str]:
    """A write whose effect is a line appended to ``record``."""
    return ["sh", "-c", 'printf "%s\\n" "$2" >> "$1"', "sh", str(record), text]


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


KILLED_WITHIN = 10.0
"""Seconds a test waits for a cut or abandoned command to be gone from the host: far less than
the 200 s it would sleep (so it was killed, not done), far more than the 3 s the session allows
the kill (README, "What it survives"), so a loaded machine does not fail it."""


def unique_seconds() -> str:
    """A ``sleep`` argument no other process on the machine has: its command line marks it."""
    return f"{random.randint(200, 299)}.{random.randrange(10**9):09d}"


def processes_with(marker: str) -> dict[int, str]:
    """PID -> command line of the processes on this machine (the lab host) naming ``marker``."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline and "pytest" not in cmdline:
            found[int(entry.name)] = cmdline
    return found


async def test_first_write_makes_a_private_state_directory_and_records_its_fence(
    session_for: Opener, state: Path, tmp_path: Path
) -> None:
    record = tmp_path / "record"
    async with session_for(7) as session:
        await session.change("first write", append(record, "one"))
    assert lines(record) == ["one"]
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert host_fence(state) == 7
    assert [(entry.fence, entry.action) for entry in journal(state)] == [(7, "first write")]
    started = journal_started((state / "journal").read_text(encoding="utf-8"))
    assert started is not None, "the journal says when it began"
    assert 0 < started <= time.time()
    assert session.host_fence == 7
    assert not list(state.parent.glob(f"{state.name}.new.*")), "no half-made directory is left"


@pytest.mark.parametrize(
    ("accepted", "then", "lands"),
    [(5, 5, True), (5, 6, True), (5, 4, False), (5, 0, False), (9, 10**15, True), (10, 9, False)],
)
async def test_host_accepts_a_fence_only_at_or_above_the_highest_it_accepted(
    session_for: Opener, state: Path, tmp_path: Path, accepted: int, then: int, lands: bool
) -> None:
    record = tmp_path / "record"
    async with session_for(accepted) as session:
        await session.change("earlier", append(record, "earlier"))
    async with session_for(then) as session:
        if lands:
            await session.change("later", append(record, "later"))
        else:
            with pytest.raises(FenceRefused) as refused:
                await session.change("later", append(record, "later"))
            assert (refused.value.fence, refused.value.host_fence) == (then, accepted)
            assert f"fence {then} is below {accepted}" in str(refused.value)
            assert session.actions == [], "a refused write is not reported as done"
    assert lines(record) == (["earlier", "later"] if lands else ["earlier"])
    assert host_fence(state) == max(accepted, then)


async def test_an_equal_fence_from_another_lease_is_refused(
    marquee: Marquee, state: Path, tmp_path: Path
) -> None:
    """A Redis whose counter went back can hand out a fence the host already accepted: only the
    lease that holds it may write with it."""
    record = tmp_path / "record"
    async with open_session(marquee, OPTIONS, lease=StaticLease(6)) as first:
        await first.change("first", append(record, "first"))
    async with open_session(marquee, OPTIONS, lease=StaticLease(6)) as second:
        with pytest.raises(FenceRefused) as refused:
            await second.change("second", append(record, "second"))
    assert refused.value.host_fence == 6
    assert "already taken by another lease" in refused.value.why
    assert lines(record) == ["first"]


async def test_concurrent_writers_land_in_fence_order_and_stale_ones_are_refused(
    session_for: Opener, state: Path, tmp_path: Path
) -> None:
    """Writers race with shuffled fences; each write takes a moment under the host lock. Whatever
    the order they reach the host in, what lands is never below what landed before it."""
    record = tmp_path / "record"
    # Eight connections at once: sshd's MaxStartups drops unauthenticated ones past ten.
    fences = [fence for fence in range(1, 5) for _ in range(2)]
    random.Random(8).shuffle(fences)
    slow_append = ["sh", "-c", 'sleep 0.05; printf "%s\\n" "$2" >> "$1"', "sh", str(record)]

    async def write(fence: int) -> str:
        async with session_for(fence) as session:
            try:
                await session.change(f"write {fence}", [*slow_append, str(fence)])
            except FenceRefused as refused:
                return f"refused {fence} below {refused.host_fence}"
            return f"landed {fence}"

    outcomes = await asyncio.gather(*(write(fence) for fence in fences))
    landed = [int(line) for line in lines(record)]
    assert landed == sorted(landed), landed
    assert [entry.fence for entry in journal(state)] == landed
    assert len(landed) == sum(outcome.startswith("landed") for outcome in outcomes)
    for outcome in outcomes:
        if outcome.startswith("refused"):
            fence, held = (int(word) for word in outcome.split()[1::2])
            assert fence < held
    assert host_fence(state) == max(landed) == 4


@pytest.mark.parametrize(
    ("content", "what"),
    [
        (None, "is missing"),
        ("", "is unreadable or empty"),
        ("seven\n", "is corrupt"),
        ("-3\n", "is corrupt"),
        ("12 x y\n", "is corrupt"),
        (" 12\n", "is corrupt"),
        ("12 \n", "is corrupt"),
        ("9" * 19 + "\n", "is corrupt"),
        ("\x00\xff\n", "is corrupt"),
    ],
)
async def test_missing_or_corrupt_fence_file_refuses_rather_than_reading_zero(
    session_for: Opener, state: Path, tmp_path: Path, content: str | None, what: str
) -> None:
    record = tmp_path / "record"
    async with session_for(3) as session:
        await session.change("first", append(record, "first"))
    fence_file = state / "fence"
    if content is None:
        fence_file.unlink()
    else:
        fence_file.write_bytes(content.encode("latin-1"))
    async with session_for(4) as session:
        with pytest.raises(FenceRefused) as refused:
            await session.change("second", append(record, "second"))
    assert refused.value.host_fence is None
    assert f"the fence file {fence_file} {what}" in refused.value.why
    assert lines(record) == ["first"]


@pytest.mark.parametrize("kind", ["parent is a file", "state dir is a file"])
async def test_unusable_state_directory_refuses_with_its_path(
    ssh_server: SshServer, docker_daemon: DockerDaemon, tmp_path: Path, kind: str
) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory\n")
    state_dir = blocker / "state" if kind == "parent is a file" else blocker
    fields = lab_marquee_fields(ssh_server, docker_daemon, tmp_path / "w")
    marquee = Marquee.model_validate({**fields, "state_dir": str(state_dir)})
    record = tmp_path / "record"
    async with open_session(marquee, OPTIONS, lease=StaticLease(1)) as session:
        with pytest.raises(FenceRefused) as refused:
            await session.change("write", append(record, "x"))
    assert str(state_dir) in refused.value.why
    assert not record.exists()


async def test_home_relative_state_directory_is_expanded_on_the_host(
    ssh_server: SshServer, docker_daemon: DockerDaemon, tmp_path: Path
) -> None:
    """``~/`` is the SSH user's home there, not ours; the lab's user is this machine's."""
    relative = f".local/state/playguard-test/{tmp_path.name}"
    fields = lab_marquee_fields(ssh_server, docker_daemon, tmp_path / "w")
    marquee = Marquee.model_validate({**fields, "state_dir": f"~/{relative}"})
    state_dir = Path.home() / relative
    try:
        async with open_session(marquee, OPTIONS, lease=StaticLease(2)) as session:
            await session.change("write", ["true"])
        assert host_fence(state_dir) == 2
    finally:
        for leftover in (state_dir / name for name in ("fence", "journal", "lock")):
            leftover.unlink(missing_ok=True)
        state_dir.rmdir()


async def test_a_child_left_running_by_a_write_does_not_hold_the_host_lock(
    session_for: Opener, tmp_path: Path
) -> None:
    marker = unique_seconds()
    started = time.monotonic()
    async with session_for(1) as session:
        await session.change("leave a child", ["sh", "-c", f"sleep {marker} >/dev/null 2>&1 &"])
        await session.change("next write", ["true"])
    try:
        assert time.monotonic() - started < 10, "the second write waited for the first's child"
        assert processes_with(marker), "the child really was left running"
    finally:
        for pid in processes_with(marker):
            os.kill(pid, 9)


async def test_a_writer_killed_while_holding_the_host_lock_frees_it_at_once(
    session_for: Opener, tmp_path: Path
) -> None:
    """The first writer hangs under the lock and is abandoned (its cycle cancelled); the host
    kills what it left, so the next writer goes ahead without waiting out any budget."""
    marker = unique_seconds()
    record = tmp_path / "record"
    async with session_for(1) as stale:
        hung = asyncio.create_task(stale.change("hang", ["sleep", marker]))
        await eventually(
            lambda: processes_with(marker), timeout=10, what="the hung write on the host"
        )
        hung.cancel()
        with pytest.raises(asyncio.CancelledError):
            await hung
    started = time.monotonic()
    async with session_for(2) as session:
        await session.change("after", append(record, "after"))
    assert time.monotonic() - started < 5
    assert lines(record) == ["after"]
    await eventually(lambda: not processes_with(marker), timeout=3, what="the hung write ending")


async def test_waiting_for_and_holding_the_host_lock_end_with_the_lease(
    session_for: Opener, tmp_path: Path
) -> None:
    """A holder whose writer vanished without a trace is ended by the host's own ``timeout``,
    which a lease of 3 s sets to under 3 s, whatever the command budget says."""
    marker = unique_seconds()
    record = tmp_path / "record"
    started = time.monotonic()
    async with session_for(1, seconds=3.0) as stale:
        with pytest.raises(RemoteCommandTimeout):
            await stale.change("wedge", ["sleep", marker])
    assert time.monotonic() - started < 3.5
    async with session_for(2) as session:
        await session.change("after", append(record, "after"))
    assert lines(record) == ["after"]
    await eventually(lambda: not processes_with(marker), timeout=2, what="the wedged write ending")


async def test_a_read_cut_at_the_lease_deadline_leaves_nothing_running_on_the_host(
    session_for: Opener, tmp_path: Path
) -> None:
    marker = unique_seconds()
    started = time.monotonic()
    async with session_for(1, seconds=2.5) as session:
        with pytest.raises(RemoteCommandTimeout) as cut:
            await session.run(["sleep", marker], timeout=300)
    assert cut.value.timeout < 2.5
    assert time.monotonic() - started < 3.0
    await eventually(
        lambda: not processes_with(marker), timeout=KILLED_WITHIN, what="the cut read ending"
    )


async def test_an_abandoned_read_is_killed_on_the_host(session_for: Opener, tmp_path: Path) -> None:
    marker = unique_seconds()
    async with session_for(1) as session:
        read = asyncio.create_task(session.run(["sleep", marker]))
        await eventually(lambda: processes_with(marker), timeout=10, what="the read on the host")
        read.cancel()
        with pytest.raises(asyncio.CancelledError):
            await read
    await eventually(
        lambda: not processes_with(marker), timeout=KILLED_WITHIN, what="the abandoned read ending"
    )


@pytest.fixture
async def lab_client(docker_daemon: DockerDaemon) -> AsyncIterator[aiodocker.Docker]:
    client = aiodocker.Docker(url=docker_daemon.url)
    try:
        yield client
    finally:
        await client.close()


async def test_a_write_through_the_docker_tunnel_never_reaches_dockerd(
    session_for: Opener, lab_client: aiodocker.Docker, busybox_image: str, tmp_path: Path
) -> None:
    name = f"unfenced-{tmp_path.name}"[:60]
    async with session_for(1) as session:
        for write in (
            session.docker.containers.create({"Image": busybox_image}, name=name),
            session.docker.images.pull(busybox_image),
            session.docker.containers.container(name).delete(force=True),
        ):
            with pytest.raises(UnfencedWrite):
                await session.api(write)
        assert (await session.api(session.docker.version()))["ApiVersion"]
    with pytest.raises(aiodocker.DockerError) as absent:
        await lab_client.containers.container(name).show()
    assert absent.value.status == 404


async def test_a_session_without_a_lease_cannot_write(
    marquee: Marquee, state: Path, tmp_path: Path
) -> None:
    record = tmp_path / "record"
    async with open_session(marquee, OPTIONS) as session:
        with pytest.raises(UnfencedWrite):
            await session.change("write", append(record, "x"))
    assert not record.exists()
    assert not state.exists()


async def test_containers_a_write_makes_carry_its_fence(
    session_for: Opener, lab_client: aiodocker.Docker, busybox_image: str, tmp_path: Path
) -> None:
    name = f"fenced-{tmp_path.name}"[:60]
    async with session_for(41) as session:
        labels = {**our_labels(session.marquee.name), FENCE: str(session.fence)}
        argv = run_container(
            session.marquee, name, image=busybox_image, command=["sleep", "60"], labels=labels,
            network="none",
        )  # fmt: skip
        await session.change("run", argv)
        try:
            shown = await lab_client.containers.container(name).show()
            assert shown["Config"]["Labels"][FENCE] == "41"
        finally:
            await session.change("remove", remove_container(session.marquee, name))
            await session.change("remove again", remove_container(session.marquee, name))
