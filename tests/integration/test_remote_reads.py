"""What a converged cycle asks the host, against the lab's real sshd, dockerd, docker-compose and
git: compose only when what its answers depend on changed (``ComposeMemo``), drift still found
however it arises, and one ``ls-remote`` per repo per cycle.

Compose runs through a wrapper that logs each invocation on the host before it execs
docker-compose, so the tests count what really ran there.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiodocker
import pytest

from playguard_async.phases.fetch_branches import fetch_branches
from playguard_async.phases.reconcile_playgrounds import reconcile_playgrounds
from playguard_async.phases.sync_git import sync_git
from playguard_async.remote.compose import CONFIG_HASH_LABEL
from playguard_async.remote.host_state import KEPT_FILE
from playguard_async.remote.memo import KEPT_LIMIT, ComposeMemo
from playguard_async.remote.ssh import RemoteSession
from playguard_lab import GitOrigin
from tests.support.playgrounds import (
    checkout_of,
    compose_yaml,
    override_of,
    project_containers,
    set_playground,
    use_own_branch,
)
from tests.support.world import LAB_OPTIONS, LabWorld, PhaseRun, PhaseRunner

pytestmark = pytest.mark.integration

# $0 is the log; the rest is docker-compose's own command line.
_LOGGING_COMPOSE = 'printf "%s\\n" "$*" >> "$0"; exec docker-compose "$@"'


class ComposeLog:
    """Options whose compose command logs every run on the host, and what the log holds."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.options = dataclasses.replace(
            LAB_OPTIONS, compose_command=("sh", "-c", _LOGGING_COMPOSE, str(path))
        )

    def runs(self) -> list[str]:
        """The runs logged since the last call (of this or ``config_runs``)."""
        runs = self.path.read_text().splitlines() if self.path.exists() else []
        self.path.write_text("")
        return runs

    def config_runs(self) -> list[str]:
        """The ``config`` runs logged since the last call."""
        return [run for run in self.runs() if " config " in f" {run} "]


@pytest.fixture
def compose_log(tmp_path: Path) -> ComposeLog:
    return ComposeLog(tmp_path / "compose.log")


Reconcile = Callable[[], Awaitable[PhaseRun]]


@pytest.fixture
async def converged(
    lab_world: LabWorld,
    run_phase: PhaseRunner,
    git_origin: GitOrigin,
    busybox_image: str,
    lab_docker: aiodocker.Docker,
    compose_log: ComposeLog,
) -> Reconcile:
    """A playground on a branch of its own whose compose file reads SLEEP (from ``.env``),
    brought up and reconciled until compose's answers are remembered; returns a reconcile that
    runs with that same memo."""
    use_own_branch(lab_world, git_origin, busybox_image, sleep="${SLEEP:-86400}")
    memo = ComposeMemo(16)

    async def reconcile() -> PhaseRun:
        run: PhaseRun = await run_phase(
            reconcile_playgrounds, lab_world, options=compose_log.options, compose_memo=memo
        )
        return run

    await run_phase(sync_git, lab_world)
    assert (await reconcile()).actions  # brought up
    assert (await reconcile()).actions == []
    compose_log.config_runs()
    return reconcile


async def test_converged_playground_costs_no_compose_run(
    converged: Reconcile, compose_log: ComposeLog, run_phase: PhaseRunner, lab_world: LabWorld
) -> None:
    again = await converged()

    assert again.actions == []
    assert again.report.findings["playgrounds"]["web-main"]["drift"] == []
    assert compose_log.config_runs() == []
    # Without the memo, compose is asked for both answers every time.
    unremembered = await run_phase(
        reconcile_playgrounds, lab_world, options=compose_log.options, compose_memo=ComposeMemo(0)
    )
    assert unremembered.actions == []
    assert len(compose_log.config_runs()) == 2


def edit_compose_file(world: LabWorld, image: str) -> None:
    (checkout_of(world) / "compose.yaml").write_text(compose_yaml(image, sleep="4000"))


def add_env_file(world: LabWorld, image: str) -> None:
    (checkout_of(world) / ".env").write_text("SLEEP=4000\n")


def edit_override(world: LabWorld, image: str) -> None:
    override = override_of(world)
    override.write_text(override.read_text().replace("true", "yes"))


@pytest.mark.parametrize(
    ("change", "drift", "command"),
    [
        (edit_compose_file, "app: {name} config changed", ["sleep", "4000"]),
        (add_env_file, "app: {name} config changed", ["sleep", "4000"]),
        # Rewritten as it was: the containers' config is what it was, compose keeps them.
        (edit_override, "override changed", ["sleep", "86400"]),
    ],
    ids=["compose file edited in the checkout", ".env added", "override edited on the host"],
)
async def test_changed_input_asks_compose_again_and_finds_the_drift(
    converged: Reconcile,
    compose_log: ComposeLog,
    lab_world: LabWorld,
    lab_docker: aiodocker.Docker,
    busybox_image: str,
    change: Callable[[LabWorld, str], None],
    drift: str,
    command: list[str],
) -> None:
    [before] = await project_containers(lab_docker)
    change(lab_world, busybox_image)

    repaired = await converged()

    name = before["Name"].lstrip("/")
    assert drift.format(name=name) in repaired.report.findings["playgrounds"]["web-main"]["drift"]
    assert compose_log.config_runs()
    [after] = await project_containers(lab_docker)
    assert after["Config"]["Cmd"] == command
    assert (after["Id"] != before["Id"]) == (command != before["Config"]["Cmd"])
    assert (await converged()).actions == []


async def test_new_commit_asks_compose_again(
    converged: Reconcile,
    compose_log: ComposeLog,
    lab_world: LabWorld,
    run_phase: PhaseRunner,
    git_origin: GitOrigin,
    lab_docker: aiodocker.Docker,
    busybox_image: str,
) -> None:
    branch = lab_world.data["playgrounds"][0]["branch"]
    git_origin.commit(branch, {"compose.yaml": compose_yaml(busybox_image, sleep="5000")}, "Move")
    await run_phase(sync_git, lab_world)

    repaired = await converged()

    assert any(action.startswith("compose up") for action in repaired.actions)
    assert compose_log.config_runs()
    [after] = await project_containers(lab_docker)
    assert after["Config"]["Cmd"] == ["sleep", "5000"]


async def test_container_replaced_behind_our_back_is_drift(
    converged: Reconcile, lab_docker: aiodocker.Docker, lab_world: LabWorld, busybox_image: str
) -> None:
    """A container of the project whose config hash is not compose's answer, made by someone
    else (here: by hand, with the project's labels and another hash)."""
    [before] = await project_containers(lab_docker)
    await lab_docker.containers.container(before["Id"]).delete(force=True)
    labels = {**before["Config"]["Labels"], CONFIG_HASH_LABEL: "0" * 64}
    impostor = await lab_docker.containers.run(
        {"Image": busybox_image, "Cmd": ["sleep", "86400"], "Labels": labels,
         "HostConfig": {"NetworkMode": "none"}},
        name=before["Name"].lstrip("/"),
    )  # fmt: skip

    repaired = await converged()

    assert (
        f"app: {before['Name'].lstrip('/')} config changed"
        in (repaired.report.findings["playgrounds"]["web-main"]["drift"])
    )
    [after] = await project_containers(lab_docker)
    assert after["Id"] != impostor.id
    assert (
        after["Config"]["Labels"][CONFIG_HASH_LABEL]
        == before["Config"]["Labels"][CONFIG_HASH_LABEL]
    )


async def test_stopped_container_is_drift_whatever_the_memo_holds(
    converged: Reconcile, lab_docker: aiodocker.Docker
) -> None:
    [before] = await project_containers(lab_docker)
    await lab_docker.containers.container(before["Id"]).kill()

    repaired = await converged()

    assert any(action.startswith("compose up") for action in repaired.actions)
    [after] = await project_containers(lab_docker)
    assert after["State"]["Running"]


async def test_ls_remote_runs_once_per_repo_per_cycle(
    lab_world: LabWorld,
    run_phase: PhaseRunner,
    git_origin: GitOrigin,
    busybox_image: str,
) -> None:
    use_own_branch(lab_world, git_origin, busybox_image)
    set_playground(lab_world, stop_when_branch_gone=True)
    second = {**lab_world.data["playgrounds"][0], "name": "web-second"}
    lab_world.data["playgrounds"].append(second)
    commands: list[str] = []

    def count(session: RemoteSession) -> None:
        create_process = session.connection.create_process

        async def counted(command: str, *args: Any, **kwargs: Any) -> Any:
            commands.append(command)
            return await create_process(command, *args, **kwargs)

        session.connection.create_process = counted  # type: ignore[method-assign,assignment]

    run = await run_phase([sync_git, fetch_branches, reconcile_playgrounds], lab_world, watch=count)

    assert run.report.findings["playgrounds"]["web-main"]["state"] == "running"
    [listing] = [command for command in commands if " ls-remote " in command]
    assert git_origin.url in listing


def kept_file(world: LabWorld) -> Path:
    return Path(world.data["marquees"][0]["state_dir"]) / KEPT_FILE


async def fresh_reconcile(
    run_phase: PhaseRunner, world: LabWorld, compose_log: ComposeLog
) -> PhaseRun:
    """A reconcile as a fresh process runs it: its replica's memo is empty."""
    run: PhaseRun = await run_phase(
        reconcile_playgrounds, world, options=compose_log.options, compose_memo=ComposeMemo(16)
    )
    return run


async def test_a_fresh_process_asks_compose_nothing_on_a_converged_playground(
    converged: Reconcile, compose_log: ComposeLog, run_phase: PhaseRunner, lab_world: LabWorld
) -> None:
    kept = kept_file(lab_world)
    assert kept.stat().st_mode & 0o777 == 0o600
    written = kept.stat().st_mtime_ns
    entries = json.loads(kept.read_text())["projects"]
    assert len(entries) == 1, "one entry per compose project of the Marquee"

    fresh = await fresh_reconcile(run_phase, lab_world, compose_log)

    assert fresh.actions == []
    assert fresh.report.findings["playgrounds"]["web-main"]["drift"] == []
    assert compose_log.config_runs() == []
    assert kept.stat().st_mtime_ns == written, "nothing new learned: nothing written"


def compose_commands(runs: list[str]) -> list[str]:
    """Each logged compose run by what followed its files: ``config --services``, ``up ...``."""
    return [run.split(" -f ")[-1].split(" ", 1)[1] for run in runs]


UP = "up --detach --remove-orphans"


async def fresh_reconcile_runs_no_compose(
    run_phase: PhaseRunner, world: LabWorld, compose_log: ComposeLog
) -> None:
    """A fresh process's reconcile finds nothing to do and runs no compose on the host."""
    fresh = await fresh_reconcile(run_phase, world, compose_log)
    assert fresh.actions == []
    assert fresh.report.findings["playgrounds"]["web-main"]["drift"] == []
    assert compose_log.runs() == []


async def test_a_fresh_process_asks_compose_nothing_after_a_cycle_that_brought_one_up(
    compose_log: ComposeLog,
    run_phase: PhaseRunner,
    lab_world: LabWorld,
    git_origin: GitOrigin,
    busybox_image: str,
    lab_docker: aiodocker.Docker,
) -> None:
    """A new Playground's first cycle asks compose for its services, runs ``up`` (the listing
    already calls for it: no hashes asked before), then asks the hashes for the container ``up``
    left; the next process, on the same host, runs no compose at all."""
    use_own_branch(lab_world, git_origin, busybox_image)
    await run_phase(sync_git, lab_world)
    first = await fresh_reconcile(run_phase, lab_world, compose_log)
    assert any(action.startswith("compose up") for action in first.actions)
    assert compose_commands(compose_log.runs()) == ["config --services", UP, "config --hash=*"]

    await fresh_reconcile_runs_no_compose(run_phase, lab_world, compose_log)


async def test_a_fresh_process_asks_compose_nothing_after_a_cycle_that_recreated_one(
    converged: Reconcile,
    compose_log: ComposeLog,
    run_phase: PhaseRunner,
    lab_world: LabWorld,
    lab_docker: aiodocker.Docker,
    busybox_image: str,
) -> None:
    """The hashes asked before ``up`` (to find the change) are kept for the container ``up``
    left, which carries them: no compose run after ``up``, none in the next process."""
    [before] = await project_containers(lab_docker)
    edit_compose_file(lab_world, busybox_image)
    assert (await converged()).actions
    [after] = await project_containers(lab_docker)
    assert after["Id"] != before["Id"]
    assert compose_commands(compose_log.runs()) == ["config --services", "config --hash=*", UP]

    await fresh_reconcile_runs_no_compose(run_phase, lab_world, compose_log)


async def test_a_real_change_asks_compose_again_whatever_the_host_kept(
    converged: Reconcile,
    compose_log: ComposeLog,
    run_phase: PhaseRunner,
    lab_world: LabWorld,
    lab_docker: aiodocker.Docker,
    busybox_image: str,
) -> None:
    edit_compose_file(lab_world, busybox_image)

    fresh = await fresh_reconcile(run_phase, lab_world, compose_log)

    [after] = await project_containers(lab_docker)
    assert after["Config"]["Cmd"] == ["sleep", "4000"]
    assert any("config changed" in why for why in
               fresh.report.findings["playgrounds"]["web-main"]["drift"])  # fmt: skip
    assert compose_log.config_runs()


def wrong_hashes(text: str) -> str:
    """The kept entry for the right inputs, with every config hash replaced: a forged file."""
    document = json.loads(text)
    for entry in document["projects"].values():
        entry["hashes"] = {service: "f" * 64 for service in entry["hashes"]}
    return json.dumps(document)


HOSTILE_KEPT: list[tuple[str, Callable[[str], str]]] = [
    ("garbage", lambda text: "\x00\xff\x1b[31m not json {"),
    ("another version", lambda text: text.replace('"version":1', '"version":99')),
    ("entry of another form", lambda text: text.replace('"inputs":"', '"inputs":"x')),
    ("many lines", lambda text: "\n" * 5000 + text),
    ("over its limit", lambda text: "x" * (KEPT_LIMIT * 4)),
    ("nested deep", lambda text: "[" * 100_000),
]


@pytest.mark.parametrize(("kind", "forge"), HOSTILE_KEPT, ids=[kind for kind, _ in HOSTILE_KEPT])
async def test_a_kept_file_not_of_its_form_is_no_answer_and_is_written_anew(
    converged: Reconcile,
    compose_log: ComposeLog,
    run_phase: PhaseRunner,
    lab_world: LabWorld,
    kind: str,
    forge: Callable[[str], str],
) -> None:
    kept = kept_file(lab_world)
    good = kept.read_text()
    kept.write_text(forge(good))

    fresh = await fresh_reconcile(run_phase, lab_world, compose_log)

    assert fresh.actions == [], kind
    assert len(compose_log.config_runs()) == 2, "compose asked, as without a kept answer"
    assert json.loads(kept.read_text()) == json.loads(good), "written anew"


async def test_a_forged_hash_for_the_right_inputs_is_drift_never_a_skip(
    converged: Reconcile,
    compose_log: ComposeLog,
    run_phase: PhaseRunner,
    lab_world: LabWorld,
    lab_docker: aiodocker.Docker,
) -> None:
    [before] = await project_containers(lab_docker)
    kept = kept_file(lab_world)
    kept.write_text(wrong_hashes(kept.read_text()))

    fresh = await fresh_reconcile(run_phase, lab_world, compose_log)

    name = before["Name"].lstrip("/")
    assert (
        f"app: {name} config changed" in fresh.report.findings["playgrounds"]["web-main"]["drift"]
    )
    [after] = await project_containers(lab_docker)
    assert after["State"]["Running"]
