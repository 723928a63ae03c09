"""Fleet rollouts against the lab: six Marquees (each its own workdir, fence, journal and
compose projects, on the lab's sshd and dockerd), cycled by two replicas that share nothing but
Redis, a release in waves ``[1, "50%", "100%"]`` with a bake of ``BAKE`` seconds.

Each replica is a loop of real cycles (a lease from Redis, a remote session, sync_git,
pull_images, reconcile_playgrounds) with a compose memo of its own, as the engine runs them (a
cycle without one starts compose 1.29, a Python program, twice per Marquee: most of a tick's
time on a machine of two cores); the hosts' journals say what each
Marquee accepted and when, and the rollout record in Redis what the fleet decided."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import structlog
from redis.asyncio import Redis
from structlog.testing import capture_logs

from playguard_async.coordination.keys import fence_key, marquee_lock_name, rollout_key
from playguard_async.coordination.lock import TokenLock
from playguard_async.desired_state.model import Inventory
from playguard_async.desired_state.rollout_policy import admission_key
from playguard_async.phases.decision_copies import MEMORY
from playguard_async.phases.protocol import PhaseContext, PhaseReport
from playguard_async.phases.pull_images import pull_images
from playguard_async.phases.reconcile_playgrounds import reconcile_playgrounds
from playguard_async.phases.rollout_record import Rollout
from playguard_async.phases.sync_git import sync_git
from playguard_async.remote.git import checkout_dir
from playguard_async.remote.memo import ComposeMemo
from playguard_async.remote.ssh import RemoteSession, open_session
from playguard_lab import DockerDaemon, GitOrigin, RegistryServer, SshServer
from tests.support.cli import LAB_SETTINGS, Playguard
from tests.support.daemon import Daemon, DaemonRunner, wait_for
from tests.support.fencing import host_fence, journal
from tests.support.playgrounds import compose_yaml
from tests.support.world import LAB_OPTIONS, LabWorld, ssh_marquee

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

BAKE = 2.0
"""Seconds each wave must stay healthy before the next starts."""

MARQUEES = [f"wave-{index}" for index in range(6)]
CANARY = "wave-4"
SCOPE_BRANCH_PREFIX = "rollout"
HEALTHY = ["CMD", "true"]
TWO_REPLICAS = [MARQUEES[:3], MARQUEES[3:]]


def replica_memos() -> dict[str, ComposeMemo]:
    """Marquee -> the compose memo of the replica of ``TWO_REPLICAS`` that cycles it."""
    memos: dict[str, ComposeMemo] = {}
    for share in TWO_REPLICAS:
        memos.update(dict.fromkeys(share, ComposeMemo(len(MARQUEES))))
    return memos


@dataclass
class Fleet:
    world: LabWorld
    redis: Redis
    origin: GitOrigin
    branch: str
    image: str
    workdirs: dict[str, Path]
    cycles: dict[str, int] = field(default_factory=dict)
    releases: list[str] = field(default_factory=list)
    first: str = ""
    """The commit of the release every Marquee starts from."""
    memos: dict[str, ComposeMemo] = field(default_factory=replica_memos)

    @property
    def scope(self) -> str:
        return f"web@{self.branch}"

    def release(self, *, healthy: bool, message: str) -> str:
        """A commit on the fleet's branch whose service passes (or fails) its healthcheck."""
        check = HEALTHY if healthy else ["CMD", "false"]
        sleep = str(86400 + len(self.releases))
        self.releases.append(message)
        compose = compose_yaml(self.image, healthcheck=check, sleep=sleep)
        return self.origin.commit(self.branch, {"compose.yaml": compose}, message)

    def journal(self, marquee: str) -> list[tuple[float, str]]:
        """What the Marquee's host accepted: (time, action) per line of its journal, but the
        copies of the rollout's record it keeps (``remote.kept``), which change nothing that
        runs."""
        state = self.workdirs[marquee].with_name(f"{marquee}-state")
        return [
            (entry.time, entry.action)
            for entry in journal(state)
            if not entry.action.startswith("keep a copy of ")
        ]

    def copies(self, marquee: str) -> int:
        """How many copies of decisions the Marquee's host was given."""
        state = self.workdirs[marquee].with_name(f"{marquee}-state")
        return sum(entry.action.startswith("keep a copy of ") for entry in journal(state))

    def updates(self, marquee: str) -> list[float]:
        """When the Marquee's checkout was moved to a new head (the release reaching it)."""
        return [
            at for at, action in self.journal(marquee) if action.startswith("update playground")
        ]

    def checkout_commit(self, marquee: str) -> str:
        """The commit the Marquee's checkout of its Playground is at."""
        target = Inventory.model_validate(self.world.data).marquee(marquee)
        checkout = checkout_dir(target, f"web-{marquee}")
        return subprocess.run(["git", "-C", checkout, "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()  # fmt: skip

    async def fences_caught_up(self) -> None:
        """Redis's fence counters lifted to what each host accepted, as the engine's
        ``catch_up_fence`` does after the first write a host refused once Redis forgot."""
        for name in MARQUEES:
            held = host_fence(self.workdirs[name].with_name(f"{name}-state"))
            await self.redis.set(fence_key(marquee_lock_name(name)), held or 0)

    async def record(self) -> Rollout | None:
        raw = await self.redis.get(rollout_key(self.scope))
        return None if raw is None else Rollout.parse(self.scope, raw)

    async def cycle(self, marquee: str) -> PhaseReport:
        """One cycle of ``marquee`` as a replica's engine runs it."""
        inventory = Inventory.model_validate(self.world.data)
        target = inventory.marquee(marquee)
        lease = await TokenLock(self.redis, marquee_lock_name(marquee), ttl=120.0).acquire()
        assert lease is not None
        try:
            async with open_session(
                target, LAB_OPTIONS, lease=lease, compose_memo=self.memos[marquee]
            ) as session:

                async def remote() -> RemoteSession:
                    return session

                report = PhaseReport()
                for phase in (sync_git, pull_images, reconcile_playgrounds):
                    ctx = PhaseContext(
                        marquee=target, inventory=inventory,
                        log=structlog.get_logger("test").bind(phase=phase.name),
                        dry_run=False, lease=lease, remote=remote,
                    )  # fmt: skip
                    report = await phase(ctx) or PhaseReport()
                self.cycles[marquee] = self.cycles.get(marquee, 0) + 1
                return report
        finally:
            await lease.release()

    async def tick(self, replicas: list[list[str]]) -> None:
        """Each replica cycles its share once, its cycles side by side as an engine runs them."""
        await asyncio.gather(*(self.cycle(marquee) for share in replicas for marquee in share))

    async def until(self, done: Any, replicas: list[list[str]], *, ticks: int) -> None:
        for _ in range(ticks):
            if await done():
                return
            await self.tick(replicas)
            await asyncio.sleep(0.5)
        raise AssertionError(f"not reached within {ticks} ticks: {await self.record()}")


@pytest.fixture
def fleet(
    lab_world: LabWorld,
    redis: Redis,
    ssh_server: SshServer,
    docker_daemon: DockerDaemon,
    registry: RegistryServer,
    git_origin: GitOrigin,
    busybox_image: str,
    tmp_path: Path,
) -> Fleet:
    branch = f"{SCOPE_BRANCH_PREFIX}-{uuid.uuid4().hex[:8]}"
    workdirs = {name: tmp_path / name for name in MARQUEES}
    data = lab_world.data
    data["marquees"] = [
        {**ssh_marquee(ssh_server, name, workdir), "docker_socket": str(docker_daemon.socket),
         "canary": name == CANARY}
        for name, workdir in workdirs.items()
    ]  # fmt: skip
    data["playspecs"][0].update(
        rollback="auto", health_timeout=10,
        rollout={"waves": [1, "50%", "100%"], "bake": BAKE, "max_failures": 0,
                 "wave_timeout": 300},
    )  # fmt: skip
    data["playgrounds"] = [
        {"name": f"web-{name}", "playspec": "web", "marquee": name, "branch": branch}
        for name in MARQUEES
    ]
    data["agent_chats"] = []
    made = Fleet(lab_world, redis, git_origin, branch, busybox_image, workdirs)
    made.first = made.release(healthy=True, message="the first release")
    return made


async def converged_first(fleet: Fleet) -> None:
    """The first release everywhere (no Marquee has a last good revision: nothing to hold), then
    the rollout record of it done."""
    await fleet.tick(TWO_REPLICAS)


def wave_starts(rollout: Rollout) -> list[float]:
    return [event.at for event in rollout.events if event.what.startswith("wave ")]


async def test_a_good_release_converges_wave_by_wave_each_baked_before_the_next(
    fleet: Fleet,
) -> None:
    await converged_first(fleet)
    head = fleet.release(healthy=True, message="a good release")

    async def done() -> bool:
        record = await fleet.record()
        return record is not None and record.commit == head and record.status == "done"

    await fleet.until(done, TWO_REPLICAS, ticks=40)

    rollout = await fleet.record()
    assert rollout is not None
    assert [wave.size for wave in rollout.waves] == [1, 2, 3]
    first = {name: fleet.updates(name)[-1] for name in MARQUEES}
    order = sorted(MARQUEES, key=first.__getitem__)
    assert order[0] == CANARY
    # Wave 2 reached no host before wave 1 had been healthy BAKE s: its update followed the
    # canary's by at least the bake (the canary's health gate passed after its update).
    wave_two = sorted(first.values())[1]
    assert wave_two - first[CANARY] >= BAKE
    assert sorted(first.values())[3] - sorted(first.values())[2] >= BAKE
    assert all(len(fleet.updates(name)) == 1 for name in MARQUEES)  # cloned first, moved once
    assert len(wave_starts(rollout)) == 2
    assert rollout.failures == ()


async def test_a_bad_release_changes_one_marquee_halts_and_rolls_it_back(fleet: Fleet) -> None:
    await converged_first(fleet)
    before = {name: fleet.journal(name) for name in MARQUEES}
    fleet.release(healthy=False, message="a bad release")

    async def halted() -> bool:
        record = await fleet.record()
        return record is not None and record.status == "halted"

    await fleet.until(halted, TWO_REPLICAS, ticks=10)
    await fleet.tick(TWO_REPLICAS)

    rollout = await fleet.record()
    assert rollout is not None
    assert [failure.marquee for failure in rollout.failures] == [CANARY]
    assert "max_failures 0" in rollout.why
    changed = [name for name in MARQUEES if fleet.journal(name) != before[name]]
    assert changed == [CANARY]
    actions = [action for _, action in fleet.journal(CANARY)[len(before[CANARY]) :]]
    assert any("roll back to its last good revision" in action for action in actions)
    settled = fleet.journal(CANARY)
    report = await fleet.cycle(CANARY)
    finding = report.findings["playgrounds"][f"web-{CANARY}"]
    assert finding["rollback"].startswith("rolled back to ")
    assert finding.get("health") != "unhealthy"
    assert fleet.journal(CANARY) == settled  # back and held there: nothing more to do
    after = await fleet.record()
    assert after is not None
    assert (after.status, after.wave) == ("halted", 0)


@pytest.mark.parametrize("replicas", ["running", "restarted"])
async def test_a_halted_release_stays_refused_when_redis_forgets_everything(
    fleet: Fleet, replicas: str
) -> None:
    """FLUSHALL after a halt: with the replicas running (their memory) or restarted with it
    (the hosts' copies), the halt is written back, and no Marquee takes the bad release."""
    await converged_first(fleet)
    before = {name: fleet.journal(name) for name in MARQUEES}
    fleet.release(healthy=False, message="a bad release")

    async def halted() -> bool:
        record = await fleet.record()
        return record is not None and record.status == "halted"

    await fleet.until(halted, TWO_REPLICAS, ticks=10)
    await fleet.tick(TWO_REPLICAS)  # every Marquee reads the halt; its host keeps a copy
    decided = await fleet.record()
    assert decided is not None
    assert all(fleet.copies(name) for name in MARQUEES)
    await fleet.redis.flushall()
    await fleet.fences_caught_up()
    if replicas == "restarted":
        MEMORY.forget()

    with capture_logs() as logs:
        for _ in range(3):
            await fleet.tick(TWO_REPLICAS)

    record = await fleet.record()
    assert record is not None
    assert (record.id, record.target, record.status, record.wave) == (
        decided.id, decided.target, "halted", 0)  # fmt: skip
    assert [name for name in MARQUEES if fleet.journal(name) != before[name]] == [CANARY]
    assert {name: fleet.checkout_commit(name) for name in MARQUEES} == dict.fromkeys(
        MARQUEES, fleet.first
    )
    rebuilt = [(e["kind"], e["scope"]) for e in logs if e["event"] == "decisions.rebuilt"]
    assert rebuilt == [("rollout", fleet.scope)]


async def test_the_halt_a_failure_report_writes_is_on_its_host_in_the_same_cycle(
    fleet: Fleet,
) -> None:
    """The canary's cycle that fails the release halts the rollout and writes the halted record
    to the canary's host at once: Redis forgetting everything right after that cycle, with the
    replicas restarted, loses no halt (its host's copy had the running record before)."""
    await converged_first(fleet)
    fleet.release(healthy=False, message="a bad release")

    async def halted() -> bool:
        record = await fleet.record()
        return record is not None and record.status == "halted"

    await fleet.until(halted, [[CANARY]], ticks=10)
    decided = await fleet.record()
    assert decided is not None
    state = fleet.workdirs[CANARY].with_name(f"{CANARY}-state")
    copy = Rollout.parse(fleet.scope, (state / "kept" / f"rollout-web-{CANARY}.json").read_text())
    assert copy == decided
    await fleet.redis.flushall()
    await fleet.fences_caught_up()
    MEMORY.forget()

    await fleet.cycle(CANARY)
    record = await fleet.record()
    assert record is not None
    assert (record.id, record.status, record.seq) == (decided.id, "halted", decided.seq + 1)


LEASE = {"tick_interval": 2.0, "lock_ttl": 20.0, "remote_command_timeout": 9.0,
         "docker_api_timeout": 9.0}  # fmt: skip
"""Short leases: a killed replica's lapse within ``lock_ttl``, and the survivor has every
Marquee then."""


def wave_three_started(daemons: DaemonRunner) -> Daemon | None:
    """The replica whose cycle started the last wave, once one has."""
    for daemon in daemons.started:
        if daemon.events("rollout.step", step="wave 3 started"):
            return daemon
    return None


def test_a_replica_killed_after_it_started_the_last_wave_leaves_the_rest_to_the_other(
    fleet: Fleet, daemons: DaemonRunner
) -> None:
    """Two ``playguard run`` processes split the six Marquees; the one that started the last
    wave is SIGKILLed then, mid-bake: the other takes its Marquees over and finishes."""
    daemons.inventory.write_text(json.dumps(fleet.world.data), encoding="utf-8")
    for replica in ("r1", "r2"):
        values = daemons.settings(replica, **{**LAB_SETTINGS, **LEASE})
        daemons.start(replica, config=daemons.write_settings(replica, values))
    wait_for(lambda: all(fleet.journal(name) for name in MARQUEES), timeout=90,
             what="the first release on every Marquee")  # fmt: skip
    head = fleet.release(healthy=True, message="a release one replica will not see through")

    starter = wait_for(lambda: wave_three_started(daemons), timeout=120, what="wave 3")
    starter.send(signal.SIGKILL)
    [survivor] = [daemon for daemon in daemons.started if daemon is not starter]

    def done() -> bool:
        record = asyncio.run(_record(daemons, fleet.scope))
        return record is not None and record.commit == head and record.status == "done"

    wait_for(done, timeout=120, what="the rollout done by the survivor", interval=0.5)
    record = asyncio.run(_record(daemons, fleet.scope))
    assert record is not None
    assert [event.what for event in record.events] == [
        "opened",
        "wave 2 started",
        "wave 3 started",
        "done",
    ]
    assert survivor.events("rollout.step", step="done")
    assert all(len(fleet.updates(name)) == 1 for name in MARQUEES)  # admitted once each


async def _record(daemons: DaemonRunner, scope: str) -> Rollout | None:
    """The rollout record, read with a client of this call's own (the test's loop is not
    running here: the replicas are processes)."""
    client = Redis.from_url(daemons.redis_url)
    try:
        raw = await client.get(rollout_key(scope))
    finally:
        await client.aclose()
    return None if raw is None else Rollout.parse(scope, raw)


async def test_garbage_in_the_record_halts_nothing_and_is_replaced_by_the_next_release(
    fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    await converged_first(fleet)
    for garbage in [
        b"\xff" * 10,
        b"[]",
        json.dumps({"scope": fleet.scope}).encode(),
        b"x" * 100_000,
    ]:
        await fleet.redis.set(rollout_key(fleet.scope), garbage)
        await fleet.cycle(MARQUEES[0])
    head = fleet.release(healthy=True, message="after garbage")

    async def opened() -> bool:
        record = await fleet.record()
        return record is not None and record.commit == head

    await fleet.until(opened, TWO_REPLICAS, ticks=3)


def members(rollout: Rollout, wave: int) -> list[str]:
    """The Marquees of ``wave`` (0-based) of ``rollout``, by their admission keys."""
    return [
        name
        for name in MARQUEES
        if rollout.wave_of(admission_key(rollout.scope, name, canary=name == CANARY)) == wave
    ]


def rollout_events(playguard: Playguard, marquee: str) -> list[str]:
    """The rollout events ``playguard why`` shows for ``marquee``."""
    why = playguard("why", marquee, "--json")
    assert why.returncode == 0, why.stderr
    return [e["text"] for e in json.loads(why.stdout)["events"] if e["kind"] == "rollout"]


async def assert_another_rollout_refused(fleet: Fleet, playguard: Playguard) -> str:
    """An action naming a rollout that is not the scope's: exit 1 naming both, nothing stored.
    Returns the id of the scope's rollout."""
    current = await fleet.record()
    assert current is not None
    assert f"[rollout {current.id}]" in playguard("rollout", "show", fleet.scope).stdout
    other = "0" * 16
    stale = playguard("rollout", "pause", fleet.scope, "--rollout", other, "--reason", "old")
    assert stale.returncode == 1
    assert other in stale.stderr
    assert f"it is {current.id} now" in stale.stderr
    assert await fleet.record() == current, "refused: nothing stored"
    return current.id


async def assert_held_by_the_rollout(fleet: Fleet, waiting: str) -> None:
    """A Marquee of wave 2 that the rollout holds: its finding names the rollout and its wave
    (what ``status``, ``describe`` and the web view show), and calls it no pin."""
    held = (await fleet.cycle(waiting)).findings["playgrounds"][f"web-{waiting}"]
    assert held["held_by"].startswith(f"held by rollout {fleet.scope}, wave 2 of 3 ")
    assert "pinned" not in held, "a rollout's hold is no pin"


async def test_operators_pause_promote_and_abort_from_the_command_line(
    fleet: Fleet, playguard: Playguard
) -> None:
    fleet.world.data["playspecs"][0]["rollout"]["bake"] = 3600  # only an operator moves it on
    playguard.configure(fleet.world.data)
    await converged_first(fleet)
    head = fleet.release(healthy=True, message="a release operators steer")

    async def canary_baking() -> bool:
        record = await fleet.record()
        return record is not None and record.commit == head and record.healthy_at is not None

    await fleet.until(canary_baking, TWO_REPLICAS, ticks=10)
    meant = ("--rollout", await assert_another_rollout_refused(fleet, playguard))
    paused = playguard("rollout", "pause", fleet.scope, *meant, "--reason", "watching the graphs")
    again = playguard("rollout", "pause", fleet.scope, *meant, "--reason", "twice")
    await fleet.tick(TWO_REPLICAS)

    assert paused.returncode == 0, paused.stderr
    assert f"{fleet.scope}: paused, wave 1 of 3" in paused.stdout
    assert again.returncode == 1
    assert "is paused: pause applies to a rollout that is running" in again.stderr
    record = await fleet.record()
    assert record is not None
    assert (record.status, record.wave) == ("paused", 0)
    status = playguard("status", "--json")
    described = playguard("describe", CANARY)
    assert status.returncode == 0, status.stderr
    [shown] = json.loads(status.stdout)["rollouts"]
    assert (shown["scope"], shown["status"], shown["wave"]) == (fleet.scope, "paused", 1)
    assert "pause by " in shown["why"]
    await assert_held_by_the_rollout(fleet, members(record, 1)[0])
    assert f"rollout {fleet.scope}: paused, wave 1 of 3" in described.stdout
    assert "this Marquee in wave 1" in described.stdout
    assert f"{fleet.scope}: pause: watching the graphs" in rollout_events(playguard, CANARY)

    promoted = playguard("rollout", "promote", fleet.scope, *meant, "--reason", "looks fine")
    assert promoted.returncode == 0, promoted.stderr
    second = members(record, 1)

    async def second_wave_moved() -> bool:
        return all(fleet.updates(name) for name in second)

    await fleet.until(second_wave_moved, TWO_REPLICAS, ticks=10)
    aborted = playguard("rollout", "abort", fleet.scope, *meant, "--reason", "bad graphs")
    await fleet.tick(TWO_REPLICAS)
    await fleet.tick(TWO_REPLICAS)

    assert aborted.returncode == 0, aborted.stderr
    assert all(fleet.updates(name) == [] for name in members(record, 2))
    admitted = members(record, 0) + second
    assert {name: fleet.checkout_commit(name) for name in admitted} == dict.fromkeys(
        admitted, fleet.first
    )
    shown = playguard("rollout", "show", fleet.scope)
    listed = playguard("rollout", "list")
    unknown = playguard("rollout", "show", "nothing@main")
    assert shown.returncode == 0, shown.stderr
    assert "abort by " in shown.stdout
    assert "bad graphs" in shown.stdout
    assert "promote by " in shown.stdout
    assert f"{fleet.scope}: aborted, wave 2 of 3" in listed.stdout
    assert unknown.returncode == 1
    assert "no rollout 'nothing@main'" in unknown.stderr
