"""Issue 49's generated test: two replicas' cycles, releases arriving, operator actions, FLUSHALL
and a failover that lost the last writes, in any order, against the lab's real redis-server.

What runs is the project's own: the rollout desk (``RolloutDesk.verdict`` then ``tell``, as the
gate calls them), each replica's ``DecisionMemory`` with ``kept_rollouts``/``keep_rollouts``, and
the operator's ``show`` and ``act`` naming the rollout id. Only the hosts are modelled: a
Marquee's host is the copies it keeps (``Host``) and the release it runs.

After every step: no Marquee is admitted to a release known aborted, nor newly admitted (not
already at it) to one known halted; a Marquee never runs a release known aborted after a cycle
of it; the Marquees admitted to a release never outnumber the waves its rollouts started. "Known"
is the README's promise: read by a cycle of either replica, or written by one (a halt a failure
report made). An operator's action is on every host before it reports (``rollout_hosts``'s
``put_on_host`` on each modelled host), so one lost with Redis before any cycle read it is
learnt from the first host a replica reads again; a failover is seen by each replica at its
next tick (Redis's identity changed), which then reads the hosts' copies again. One it does not
see (``failover_unseen``) is caught at the hosts: they refuse a copy no newer than theirs, and
the replica learns theirs.

Time is Redis's clock, every replica's; "time passes" shifts what the desk and the operator read
of it (``Clock``), so a bake or a wave_timeout passes without waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar, ParamSpec, TypeVar, cast

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    precondition,
    rule,
    run_state_machine_as_test,
)
from redis.asyncio import Redis

from playguard_async.coordination import rollouts as redis_rollouts
from playguard_async.coordination.client import connect_redis
from playguard_async.coordination.keys import (
    ROLLOUTS_KEY,
    rollout_counts_key,
    rollout_key,
    rollout_marks_key,
)
from playguard_async.desired_state.model import Marquee
from playguard_async.operator import rollout as operator_rollout
from playguard_async.operator.fleet import OperateError
from playguard_async.operator.rollout_hosts import put_on_host
from playguard_async.phases import rollout_desk
from playguard_async.phases.decision_copies import DecisionMemory, keep_rollouts, kept_rollouts
from playguard_async.phases.rollout_desk import Standing
from playguard_async.phases.rollout_record import Rollout
from playguard_async.remote.kept import HELD
from playguard_async.remote.ssh import CommandResult, RemoteSession
from playguard_lab import RedisServer
from tests.integration.test_rollout_desk import (
    HEAD,
    NAMES,
    OLD,
    desk,
    inventory,
    key_of,
    stored,
)
from tests.support.engine import settings_for

pytestmark = pytest.mark.integration

P = ParamSpec("P")
T = TypeVar("T")

SCOPE = "web@main"
RELEASES = tuple(digit * 64 for digit in "1234")
"""R1, R2, ...: the releases that arrive, in order (OLD runs everywhere at first)."""

BAKE, WAVE_TIMEOUT = 300.0, 900.0
WORLD = inventory(bake=BAKE, wave_timeout=WAVE_TIMEOUT, max_failures=1)
POLICY = WORLD.playspecs[0].rollout
REPLICAS = ("A", "B")
ACTIONS = ("abort", "pause", "resume", "promote")
SNAPSHOT_KEYS = (
    rollout_key(SCOPE),
    rollout_marks_key(SCOPE),
    rollout_counts_key(SCOPE),
    ROLLOUTS_KEY,
)
"""What a failover takes back: the scope's record, its marks and counts, the index."""

CYCLE = st.tuples(st.sampled_from(NAMES), st.booleans())
"""One cycle of a Marquee: which, and whether its Playground comes out healthy."""

EXAMPLES = 100 if os.environ.get("CI") == "true" else 200
"""Interleavings tried, derandomized (the same ones every run): fewer under CI, whose run of
the whole suite is at its time limit. At this seed every rule and every argument value already
runs by 50 examples (each rule 38 times or more); 300 came within reach of pytest's 120 s timeout
on a loaded machine."""
STEPS = 50


@dataclass
class Clock:
    """How far the simulated clock is ahead of Redis's."""

    offset: float = 0.0

    def shifted(
        self, read: Callable[P, Awaitable[redis_rollouts.RolloutRead]]
    ) -> Callable[P, Awaitable[redis_rollouts.RolloutRead]]:
        async def at_offset(*args: P.args, **kwargs: P.kwargs) -> redis_rollouts.RolloutRead:
            found = await read(*args, **kwargs)
            return replace(found, now=found.now + self.offset)

        return at_offset


@dataclass
class Host:
    """A Marquee's host as ``kept_rollouts``/``keep_rollouts`` meet it: the copies it keeps
    (name -> its one line), answered as ``remote.kept``'s read script prints them."""

    marquee: Marquee
    copies: dict[str, str] = field(default_factory=dict)
    dry_run: bool = False

    async def run(self, argv: Sequence[str], **_: object) -> CommandResult:
        names = argv[6:]  # sh -c SCRIPT sh STATE_DIR LINE_MAX NAME...
        found = "".join(f"{name} {self.copies[name]}\n" for name in names if name in self.copies)
        return CommandResult(list(argv), 0, found, "")

    async def keep_by(self, action: str, argv: Sequence[str], stdin: str) -> str:
        """As ``remote.kept``'s write script: a copy of the same or a higher write count is
        left, and said (sh -c SCRIPT sh PATH SEQ LINE_MAX)."""
        name, seq = argv[4].rpartition("/")[2], argv[5]
        there = self.copies.get(name)
        if seq != "-" and there is not None and json.loads(there)["seq"] >= int(seq):
            return f"{HELD}{there}\n"
        self.copies[name] = stdin.splitlines()[0]
        return ""


@dataclass
class Known:
    """The releases a replica knows aborted or halted: since its process started, it read a
    record that says so (from Redis, or a host's copy), or wrote one (a failure report that
    halted the rollout)."""

    aborted: set[str] = field(default_factory=set)
    halted: set[str] = field(default_factory=set)


def cutoff(rollout: Rollout, wave: int) -> int:
    """How many Marquees waves 1 .. ``wave`` + 1 of ``rollout`` take."""
    return sum(each.size for each in rollout.waves[: wave + 1])


class Interleavings(RuleBasedStateMachine):
    """One fleet of six Marquees on OLD, a release R1 desired, two replicas, a real Redis."""

    url: ClassVar[str] = ""
    clock: ClassVar[Clock] = Clock()

    def __init__(self) -> None:
        super().__init__()
        self.clock.offset = 0.0
        self.loop = asyncio.Runner()
        self.redis = self.run(self._connect())
        self.settings = settings_for(redis_url=self.url, redis_socket_timeout=2.0)
        self.arrived = 1
        self.memories = {replica: DecisionMemory() for replica in REPLICAS}
        self.hosts = {name: Host(WORLD.marquee(name)) for name in NAMES}
        self.good: dict[str, str] = dict.fromkeys(NAMES, OLD)
        self.previous: dict[str, str | None] = dict.fromkeys(NAMES)
        self.running: dict[str, str | None] = dict.fromkeys(NAMES, OLD)
        self.snapshot: dict[str, bytes | None] = {}
        self.knows = {replica: Known() for replica in REPLICAS}
        self.furthest: dict[str, int] = {}
        self.admitted: dict[str, set[str]] = {}
        self.ids: list[str] = []

    async def _connect(self) -> Redis:
        redis = connect_redis(self.url, socket_timeout=2, connect_timeout=2)
        assert isinstance(redis, Redis)
        await redis.flushall()
        return redis

    def run(self, work: Awaitable[T]) -> T:
        async def awaited() -> T:
            return await work

        return self.loop.run(awaited())

    def teardown(self) -> None:
        self.run(self.redis.aclose())
        self.loop.close()

    @property
    def release(self) -> str:
        return RELEASES[self.arrived - 1]

    # -- what Redis holds before a step, so a failover can take the step's writes back ---------

    def before_step(self) -> None:
        self.snapshot = self.run(self._dump())

    async def _dump(self) -> dict[str, bytes | None]:
        return {key: await self.redis.dump(key) for key in SNAPSHOT_KEYS}

    async def _restore(self) -> None:
        for key, dumped in self.snapshot.items():
            await self.redis.delete(key)
            if dumped is not None:
                await self.redis.restore(key, 0, dumped, replace=True)

    # -- the truth: what cycles and operators decided, as this test saw it ---------------------

    def learn(self, replica: str, rollout: Rollout) -> None:
        known = self.knows[replica]
        known.aborted |= rollout.aborted
        if rollout.status == "halted":
            known.halted.add(rollout.target)
        self.reached(rollout)

    def reached(self, rollout: Rollout) -> None:
        wave = len(rollout.waves) - 1 if rollout.status == "done" else rollout.wave
        self.furthest[rollout.target] = max(self.furthest.get(rollout.target, 0), wave)
        if rollout.id not in self.ids:
            self.ids.append(rollout.id)

    def admit(self, replica: str, marquee: str, rollout: Rollout, *, at_target: bool) -> None:
        release, known = rollout.target, self.knows[replica]
        assert release not in known.aborted, f"{marquee} admitted to aborted {release[:12]}"
        if at_target:
            return
        assert release not in known.halted, f"{marquee} newly admitted to halted {release[:12]}"
        admitted = self.admitted.setdefault(release, set())
        admitted.add(marquee)
        most = cutoff(rollout, self.furthest.get(release, 0))
        assert len(admitted) <= most, (
            f"{sorted(admitted)} admitted to {release[:12]}, its waves started take {most}"
        )

    # -- the steps ------------------------------------------------------------------------------

    @precondition(lambda self: self.arrived < len(RELEASES))
    @rule()
    def release_arrives(self) -> None:
        self.before_step()
        self.arrived += 1

    @rule(replica=st.sampled_from(REPLICAS), cycles=st.lists(CYCLE, min_size=1, max_size=6))
    def tick(self, replica: str, cycles: list[tuple[str, bool]]) -> None:
        """Replica ``replica``'s cycles of the Marquees named, one after the other: each a
        verdict, then the Playground comes out healthy or not at the release it was admitted
        to."""
        self.before_step()
        for marquee, healthy in cycles:
            self.run(self._cycle(replica, marquee, healthy))

    async def _cycle(self, replica: str, marquee: str, healthy: bool) -> None:
        memory = self.memories[replica]
        host = cast(RemoteSession, self.hosts[marquee])
        playground = WORLD.playgrounds_on(marquee)[0]
        assert POLICY is not None
        its_desk = desk(self.redis, WORLD, marquee)
        recorded = await its_desk.recorded([SCOPE])
        kept = await kept_rollouts(host, {playground.name: SCOPE}, recorded, memory)
        release, good = self.release, self.good[marquee]
        before = self.previous[marquee]
        standing = Standing(has_good=True, good_release=good, has_previous=before is not None,
                            rolls_back=True, previous_release=before,
                            kept=kept.get(SCOPE))  # fmt: skip
        seen = await its_desk.verdict(playground, POLICY, release, HEAD, standing)
        if seen.rollout is not None:
            await keep_rollouts(host, {playground.name: seen.rollout}, memory)
            self.learn(replica, seen.rollout)
        if seen.admitted and seen.rollout is not None:
            self.admit(replica, marquee, seen.rollout, at_target=good == release)
            told = await desk(self.redis, WORLD, marquee).tell(seen, healthy, "unhealthy: web")
            if told is not None:
                # as ``tell_rollout`` does: on the host in the cycle that changed it
                await keep_rollouts(host, {playground.name: told.rollout}, memory)
                self.learn(replica, told.rollout)
            if healthy and good != release:
                self.previous[marquee], self.good[marquee] = good, release
            # Its health gate's rollback: to its last good revision, unless that is a release
            # the scope's rollout knows aborted (then it is stopped: ``RunningPlayground``).
            rolled_back = None if good in seen.aborted else good
            self.running[marquee] = release if healthy else rolled_back
        elif seen.admitted:
            self.running[marquee] = release  # no rollout: at its release already
        elif seen.stop:
            self.running[marquee] = None
        elif seen.back:
            self.running[marquee] = self.previous[marquee]
        else:
            self.running[marquee] = good
        runs = self.running[marquee]
        known = self.knows[replica].aborted
        assert runs not in known, f"{marquee} still runs aborted {str(runs)[:12]}"

    @rule(action=st.sampled_from(ACTIONS))
    def operator_acts(self, action: str) -> None:
        """An operator's ``action`` naming the rollout ``rollout show`` prints now."""
        self.before_step()
        self.run(self._operate(action, late=False))

    @precondition(lambda self: len(self.ids) > 1)
    @rule(action=st.sampled_from(ACTIONS))
    def operator_acts_late(self, action: str) -> None:
        """An operator's ``action`` naming the rollout before the one ``rollout show`` prints
        now (meant for it, typed after a new release opened): refused."""
        self.before_step()
        self.run(self._operate(action, late=True))

    async def _operate(self, action: str, *, late: bool) -> None:
        try:
            shown, _ = await operator_rollout.show(self.settings, SCOPE)
        except OperateError:
            return  # no record to act on
        named = shown.id
        if late:
            before = [ident for ident in self.ids if ident != shown.id]
            if not before:
                return
            named = before[-1]
        try:
            changed = await operator_rollout.act(self.settings, SCOPE, named, action, "test")
        except OperateError:
            return
        assert not late, f"{action} of rollout {named} landed on {changed.id}"
        assert changed.id == shown.id
        for name, host in self.hosts.items():  # as ``rollout_hosts.act_on_hosts`` does
            playground = WORLD.playgrounds_on(name)[0].name
            await put_on_host(cast(RemoteSession, host), [playground], changed)
        if action == "promote":
            for known in self.knows.values():
                known.halted.discard(changed.target)
        self.reached(changed)

    @rule()
    def flushall(self) -> None:
        self.before_step()
        self.run(self.redis.flushall())

    @rule()
    def failover(self) -> None:
        """Redis goes back to before the last step: a replica promoted that missed its writes.
        Each replica sees Redis changed at its next tick (``coordination.identity``) and reads
        the hosts' copies again at its next cycles (``DecisionMemory.forget_hosts``)."""
        self.run(self._restore())
        for memory in self.memories.values():
            memory.forget_hosts()

    @rule()
    def failover_unseen(self) -> None:
        """The same, but between two reads of Redis's identity that failed (or two failovers
        that came back to the same server and history): the replicas go on as in sync. A
        step they then take counts the write number of what Redis lost, and the hosts keep
        what they have (``remote.kept``): the next cycle learns it."""
        self.run(self._restore())

    @rule(seconds=st.sampled_from((BAKE, WAVE_TIMEOUT)))
    def time_passes(self, seconds: float) -> None:
        self.before_step()
        self.clock.offset += seconds

    @rule(replica=st.sampled_from(REPLICAS))
    def replica_restarts(self, replica: str) -> None:
        """A process that starts knows no decision: it reads the hosts' copies again, each at
        its first cycle of that Marquee."""
        self.before_step()
        self.memories[replica].forget()
        self.knows[replica] = Known()


@pytest.fixture
def clocked(live_redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Interleavings`` on the lab's Redis, the desk and the operator on its clock."""
    clock = Clock()
    for module, name in ((rollout_desk, "read_rollout"), (rollout_desk, "mark_healthy"),
                         (operator_rollout, "read_rollout")):  # fmt: skip
        monkeypatch.setattr(module, name, clock.shifted(getattr(module, name)))
    monkeypatch.setattr(Interleavings, "url", live_redis_server.url)
    monkeypatch.setattr(Interleavings, "clock", clock)


@pytest.mark.usefixtures("clocked")
def test_no_interleaving_admits_a_halted_or_aborted_release_or_one_beyond_its_wave() -> None:
    run_state_machine_as_test(
        Interleavings,
        settings=settings(
            max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
            derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow],
        ),
    )  # fmt: skip


@contextlib.contextmanager
def fleet() -> Iterator[Interleavings]:
    """The machine's fleet, driven step by step: a shrunk interleaving as a plain test."""
    machine = Interleavings()
    try:
        yield machine
    finally:
        machine.teardown()


def waves(machine: Interleavings) -> dict[str, int]:
    """Each Marquee's wave in the scope's rollout as Redis holds it."""
    record = machine.run(stored(machine.redis))
    return {name: record.wave_of(key_of(name)) for name in NAMES}


def in_wave(machine: Interleavings, wave: int) -> list[str]:
    return [name for name, its in waves(machine).items() if its == wave]


ALL_HEALTHY = [(name, True) for name in NAMES]


@pytest.mark.usefixtures("clocked")
def test_an_abort_one_replica_read_is_not_undone_by_the_other_replicas_older_copy() -> None:
    """Shrunk from the machine. Replica B remembers R1's rollout running, A reads its abort,
    Redis forgets, and B's cycle writes its older copy back, one write later: as many writes
    as A's copy of the abort, which A then took for no newer and never wrote back, and R1 went
    on (``Rollout.with_decisions_of`` now puts the abort back at A's next cycle). The held
    Marquee's host was away when the operator aborted, so its copy is the older one."""
    with fleet() as machine:
        machine.tick("B", ALL_HEALTHY)
        [canary] = in_wave(machine, 0)
        held = in_wave(machine, 2)[0]
        away = dict(machine.hosts[held].copies)
        machine.operator_acts("abort")
        machine.hosts[held].copies = away
        machine.tick("A", [(canary, True)])
        machine.flushall()
        machine.tick("B", [(held, True)])
        assert machine.run(stored(machine.redis)).status == "running", "B's older copy"

        machine.tick("A", [(held, True)])
        record = machine.run(stored(machine.redis))
        assert (record.status, record.events[-1].what) == ("aborted", "rebuilt")
        machine.tick("B", ALL_HEALTHY)  # the machine's checks: B now knows it, admits no one
        assert machine.running[canary] == OLD, "taken back"


@pytest.mark.usefixtures("clocked")
def test_a_halt_one_replica_read_is_not_undone_by_the_other_replicas_older_copy() -> None:
    """As above with a halt: wave 2's two Marquees fail (more than max_failures 1); only A
    reads the halted record before Redis forgets; B's older copy (running) is written back,
    and A's next cycle halts it again, as no promote lifted it."""
    with fleet() as machine:
        machine.tick("B", ALL_HEALTHY)
        machine.time_passes(BAKE)
        machine.tick("B", ALL_HEALTHY)  # wave 2 starts and its Marquees are verified
        second, held = in_wave(machine, 1), in_wave(machine, 2)
        machine.tick("A", [(name, False) for name in second])
        assert machine.run(stored(machine.redis)).status == "halted"
        machine.flushall()
        machine.tick("B", [(held[0], True)])
        assert machine.run(stored(machine.redis)).status == "running", "B's older copy"

        machine.tick("A", [(held[0], True)])
        record = machine.run(stored(machine.redis))
        assert (record.status, record.events[-1].what) == ("halted", "rebuilt")
        machine.tick("B", ALL_HEALTHY)
        assert all(machine.running[name] == OLD for name in held)


@pytest.mark.usefixtures("clocked")
def test_a_marquee_whose_revision_before_an_aborted_one_was_aborted_too_is_stopped() -> None:
    """Shrunk from the machine: the canary verified R1, R1 aborted, the canary verified R2,
    R2 aborted. Taken back one revision it ran R1 again, an aborted release; it is stopped and
    says so, as one with no revision before the aborted one is."""
    with fleet() as machine:
        machine.tick("A", ALL_HEALTHY)
        [canary] = in_wave(machine, 0)
        machine.operator_acts("abort")
        machine.release_arrives()
        machine.tick("A", [(canary, True)])
        assert (machine.good[canary], machine.previous[canary]) == RELEASES[1::-1]
        machine.operator_acts("abort")
        machine.tick("A", [(canary, True)])  # the machine's check: it runs no aborted release
        assert machine.running[canary] is None


@pytest.mark.usefixtures("clocked")
def test_a_replica_that_never_read_an_abort_keeps_no_marquee_on_it_after_flushall() -> None:
    """Shrunk from the machine. B remembers R1 running, A reads its abort and writes it to the
    canary's host, Redis forgets. B's cycle of the canary finds Redis without the record its
    memory holds, so it reads the canary's host copy again before its verdict: the abort, put
    back in Redis, and the canary stays taken back (B's copy read once per process put R1's
    running record back instead and the canary ran R1 again)."""
    with fleet() as machine:
        machine.tick("B", ALL_HEALTHY)
        [canary] = in_wave(machine, 0)
        machine.operator_acts("abort")
        machine.tick("A", [(canary, True)])
        assert machine.running[canary] == OLD, "A took it back"
        machine.flushall()
        machine.tick("B", [(canary, True)])
        assert machine.running[canary] == OLD, "B put it on the aborted release again"


@pytest.mark.usefixtures("clocked")
def test_a_marquee_failing_on_the_next_release_does_not_roll_back_onto_an_aborted_one() -> None:
    """Shrunk from the machine: the canary verified R1, R1 aborted and the canary taken back,
    R2 admitted it and it failed. Its last good revision is R1, aborted: the health gate does
    not roll back onto it (it stops the Playground), and the next verdict takes it back."""
    with fleet() as machine:
        machine.tick("A", ALL_HEALTHY)
        [canary] = in_wave(machine, 0)
        machine.operator_acts("abort")
        machine.tick("A", [(canary, True)])
        machine.release_arrives()
        machine.tick("A", [(canary, False)])
        assert machine.running[canary] is None, "stopped, not rolled back onto R1"
        machine.tick("A", [(canary, False)])
        assert machine.running[canary] == OLD, "taken back to the revision before R1"


@pytest.mark.usefixtures("clocked")
def test_an_abort_no_replica_read_is_on_the_hosts_and_outlives_flushall() -> None:
    """B remembers R1 running; the operator aborts and Redis forgets before any cycle read it.
    The abort is on every host (the command put it there), so B's next cycle of any Marquee
    reads it there and takes the canary back (before, the abort was lost and R1 went on)."""
    with fleet() as machine:
        machine.tick("B", ALL_HEALTHY)
        [canary] = in_wave(machine, 0)
        assert machine.running[canary] == RELEASES[0]
        machine.operator_acts("abort")
        machine.flushall()
        machine.tick("B", [(canary, True)])
        record = machine.run(stored(machine.redis))
        assert (record.status, record.events[-1].what) == ("aborted", "rebuilt")
        assert machine.running[canary] == OLD, "taken back"


def copies_say(machine: Interleavings) -> set[str]:
    """The status each host's copy of the scope's record says."""
    said: set[str] = set()
    for name, host in machine.hosts.items():
        [line] = host.copies.values()
        record = Rollout.parse(SCOPE, line)
        assert record is not None, name
        said.add(record.status)
    return said


@pytest.mark.usefixtures("clocked")
@pytest.mark.parametrize("seen", [True, False], ids=["failover seen", "failover unseen"])
def test_a_failover_back_to_a_record_a_replica_knows_loses_no_abort(seen: bool) -> None:
    """B knows R1's rollout at its canary's bake; the operator aborts (on every host); a failover
    takes Redis back to the record B knows, so B's cycles are in sync with Redis. Seen (Redis's
    identity changed at B's tick), B's next cycles read the hosts' copies first: no wave starts,
    the canary is taken back, Redis gets the abort back. Unseen, the first of B's cycles starts
    wave 2 (the write number of the abort), but no host takes it (``remote.kept``): B learns
    the abort there and its next cycles take back whom that cycle admitted."""
    with fleet() as machine:
        machine.tick("B", ALL_HEALTHY)
        [canary] = in_wave(machine, 0)
        knew = machine.run(stored(machine.redis))
        machine.operator_acts("abort")
        if seen:
            machine.failover()
        else:
            machine.failover_unseen()
        assert machine.run(stored(machine.redis)) == knew, "the abort lost"
        machine.time_passes(BAKE)
        machine.tick("B", ALL_HEALTHY)
        if not seen:
            machine.tick("B", ALL_HEALTHY)
        record = machine.run(stored(machine.redis))
        assert record.status == "aborted"
        assert record.events[-1].what == "rebuilt"
        if seen:
            assert record.wave == 0, "no wave started"
        assert RELEASES[0] not in machine.running.values(), machine.running
        assert machine.running[canary] == OLD, "taken back"
        assert copies_say(machine) == {"aborted"}
