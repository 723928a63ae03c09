"""A lease as the remote layer sees it (a fence and a deadline), for tests of that layer alone,
readers of what a host's fence guard keeps in its state directory, and an engine whose phases
make fenced writes on a real lab Marquee."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from redis.asyncio import Redis

from playguard_async.desired_state.model import Inventory, Marquee
from playguard_async.engine.cycle import Cycle
from playguard_async.engine.results import CycleListener, CycleResult, Outcome
from playguard_async.engine.scheduler import Engine
from playguard_async.engine.services import CycleServices
from playguard_async.phases.protocol import PhaseContext, PhaseReport
from playguard_async.remote.journal import JournalEntry, journal_started, parse_journal
from playguard_async.remote.ssh import RemoteSession, open_session
from playguard_async.service.metrics import Metrics
from tests.support.engine import settings_for
from tests.support.state import StaticState
from tests.support.world import LAB_OPTIONS


@dataclass
class StaticLease:
    """A fence that holds for ``seconds`` from its making: what ``RemoteSession`` needs of a
    lease, without Redis (the tests that prove the lock use real ones)."""

    fence: int
    seconds: float = 60.0
    token: str = field(default_factory=lambda: str(uuid.uuid4()))
    deadline: float = field(init=False)

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.seconds

    def remaining(self) -> float:
        return self.deadline - time.monotonic()


def journal(state_dir: Path) -> list[JournalEntry]:
    """The writes the host's guard accepted, in the order it accepted them (after the guard's
    start mark, when the guard made the journal)."""
    path = state_dir / "journal"
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    entries = parse_journal(text)
    marks = 0 if journal_started(text) is None else 1
    assert len(entries) + marks == len(text.splitlines()), (
        f"a line of {path} is not of the written shape"
    )
    return entries


def host_fence(state_dir: Path) -> int | None:
    path = state_dir / "fence"
    return int(path.read_text().split()[0]) if path.exists() else None


async def eventually(probe: Callable[[], object], *, timeout: float, what: str) -> None:
    """Poll ``probe`` without blocking the event loop until it is truthy; AssertionError after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() >= deadline:
            raise AssertionError(f"no {what} within {timeout:g} s")
        await asyncio.sleep(0.02)


def host_records(record_dir: Path) -> list[tuple[str, int, int]]:
    """(Marquee, fence, pid) of every write that ran on the host, in the order it ran."""
    return [
        (path.name, int(fence), int(pid))
        for path in sorted(record_dir.iterdir())
        for fence, pid in (line.split() for line in path.read_text().splitlines())
    ]


def stale_writes(record_dir: Path) -> list[tuple[str, int, int]]:
    """Writes that ran after a write with a higher fence had run on the same Marquee."""
    stale: list[tuple[str, int, int]] = []
    highest: dict[str, int] = {}
    for marquee, fence, pid in host_records(record_dir):
        if fence < highest.get(marquee, 0):
            stale.append((marquee, fence, pid))
        highest[marquee] = max(fence, highest.get(marquee, 0))
    return stale


class AppendPhase:
    """Appends its fence to a file on the host, as a fenced write."""

    def __init__(self, name: str, record: Path) -> None:
        self.name = name
        self.record = record
        self.entered = 0

    async def __call__(self, ctx: PhaseContext[RemoteSession]) -> PhaseReport:
        self.entered += 1
        session = await ctx.remote()
        await session.change(
            f"{self.name} appends fence {ctx.lease.fence}",
            ["sh", "-c", 'echo "$2" >> "$1"', "sh", str(self.record), str(ctx.lease.fence)],
        )
        return PhaseReport()


class Fleet:
    """One lab Marquee, an engine whose sessions are real, and the metrics it feeds."""

    def __init__(
        self,
        redis: Redis,
        marquee: Marquee,
        tmp_path: Path,
        replica_id: str = "fencing",
        listeners: Sequence[CycleListener] = (),
    ) -> None:
        self.marquee = marquee
        self.record = tmp_path / "record"
        self.first = AppendPhase("first", self.record)
        self.second = AppendPhase("second", self.record)
        settings = settings_for(replica_id=replica_id, lock_ttl=30.0, redis_socket_timeout=2.0)
        self.metrics = Metrics(
            outcomes=[outcome.value for outcome in Outcome], lock_ttl=30.0, marquees_shown=100
        )
        services = CycleServices.build(
            settings,
            redis,
            [self.first, self.second],
            open_session=lambda marquee, lease, dry_run, cycle_id, read_through: open_session(
                marquee,
                LAB_OPTIONS,
                lease=lease,
                dry_run=dry_run,
                cycle_id=cycle_id,
                read_through=read_through,
            ),
            observer=self.metrics,
            listeners=listeners,
        )
        self.engine = Engine(services, StaticState(Inventory(marquees=[marquee])))

    async def cycle(self) -> CycleResult:
        inventory = await self.engine.load_inventory()
        return await Cycle(self.engine.services, self.marquee, inventory).run()

    def fenced_losses(self) -> float:
        value = self.metrics.registry.get_sample_value(
            "playguard_lock_lost_total", {"reason": "fenced"}
        )
        assert value is not None, "the fenced reason is exported from the start"
        return value
