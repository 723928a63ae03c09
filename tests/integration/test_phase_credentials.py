"""refresh_credentials against the lab: real logins through the lab's dockerd, and the
config.json it writes read back from disk (the lab's host is this machine)."""

from __future__ import annotations

import base64
import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from playguard_async.phases.protocol import PartialFailure
from playguard_async.phases.refresh_credentials import refresh_credentials
from playguard_lab import RegistryServer
from tests.support.phase_checks import everything_said, write_wrong_password
from tests.support.world import LabWorld, PhaseRunner

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def other_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    """A second registry server, so two registries have two entries in config.json."""
    with RegistryServer(tmp_path_factory.mktemp("other-registry")) as server:
        yield server


def config_path(world: LabWorld) -> Path:
    return Path(world.marquee().workdir) / ".docker" / "config.json"


def basic_auth(username: str, password: str) -> dict[str, str]:
    return {"auth": base64.b64encode(f"{username}:{password}".encode()).decode()}


def add_registry(world: LabWorld, server: RegistryServer, password_file: Path) -> None:
    """A registry named "other" on ``server``, used by a playground of its own on edge-1."""
    world.data["registries"].append(
        {
            "name": "other",
            "server": server.address,
            "username": server.username,
            "password_file": str(password_file),
        }
    )
    world.data["playspecs"].append(
        {"name": "api", "repo": world.data["playspecs"][0]["repo"], "registry": "other"}
    )
    world.data["playgrounds"].append(
        {"name": "api-main", "playspec": "api", "marquee": "edge-1", "branch": "main"}
    )


async def test_fresh_host_gets_a_login_and_a_0600_config_then_nothing_to_do(
    lab_world: LabWorld, run_phase: PhaseRunner, registry: RegistryServer
) -> None:
    path = config_path(lab_world)

    first = await run_phase(refresh_credentials, lab_world)
    second = await run_phase(refresh_credentials, lab_world)

    assert first.actions == [f"write registry credentials to {path}"]
    assert first.report.findings["registries"] == {
        "lab": {"server": registry.address, "state": "logged_in"}
    }
    assert json.loads(path.read_text()) == {
        "auths": {registry.address: basic_auth(registry.username, registry.password)}
    }
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert second.actions == []
    assert second.report.findings["config"] == {"path": str(path), "state": "unchanged"}


async def test_wrong_password_names_the_registry_writes_nothing_and_leaks_nothing(
    lab_world: LabWorld, run_phase: PhaseRunner
) -> None:
    wrong = write_wrong_password(lab_world.password_file)

    with capture_logs() as logs, pytest.raises(PartialFailure) as failed:
        await run_phase(refresh_credentials, lab_world)

    assert "lab" in failed.value.failed
    assert "registry 'lab' failed:" in str(failed.value)
    assert "401" in str(failed.value), "the registry's refusal is quoted"
    assert failed.value.report.actions == []
    assert failed.value.report.findings["registries"]["lab"]["state"] == "failed"
    assert any(event["event"] == "registry.failed" for event in logs)
    assert not config_path(lab_world).exists()
    assert wrong not in everything_said(failed.value, logs)


async def test_refused_login_keeps_the_entry_that_worked(
    lab_world: LabWorld, run_phase: PhaseRunner
) -> None:
    await run_phase(refresh_credentials, lab_world)
    before = config_path(lab_world).read_text()
    write_wrong_password(lab_world.password_file)

    with pytest.raises(PartialFailure) as failed:
        await run_phase(refresh_credentials, lab_world)

    assert failed.value.report.actions == []
    assert config_path(lab_world).read_text() == before


async def test_one_refused_registry_does_not_stop_the_other(
    lab_world: LabWorld,
    run_phase: PhaseRunner,
    registry: RegistryServer,
    other_registry: RegistryServer,
    tmp_path: Path,
) -> None:
    other_password_file = tmp_path / "other-password"
    wrong = write_wrong_password(other_password_file)
    add_registry(lab_world, other_registry, other_password_file)

    with capture_logs() as logs, pytest.raises(PartialFailure) as failed:
        await run_phase(refresh_credentials, lab_world)

    assert list(failed.value.failed) == ["other"]
    findings = failed.value.report.findings["registries"]
    assert findings["lab"]["state"] == "logged_in"
    assert findings["other"]["state"] == "failed"
    assert json.loads(config_path(lab_world).read_text()) == {
        "auths": {registry.address: basic_auth(registry.username, registry.password)}
    }
    assert wrong not in everything_said(failed.value, logs)

    other_password_file.write_text(other_registry.password)
    fixed = await run_phase(refresh_credentials, lab_world)
    assert set(json.loads(config_path(lab_world).read_text())["auths"]) == {
        registry.address,
        other_registry.address,
    }
    assert len(fixed.actions) == 1


async def test_dry_run_logs_in_but_writes_nothing(
    lab_world: LabWorld, run_phase: PhaseRunner
) -> None:
    path = config_path(lab_world)

    run = await run_phase(refresh_credentials, lab_world, dry_run=True)

    assert run.actions == [f"would write registry credentials to {path}"]
    assert run.report.findings["registries"]["lab"]["state"] == "logged_in"
    assert run.report.findings["config"]["state"] == "would write"
    assert not path.exists()
