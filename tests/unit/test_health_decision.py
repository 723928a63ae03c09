"""The health gate's decision from what Docker's inspects say: a service's state from one
container, the wait's verdict over a sequence of them (a crash loop whose ``StartedAt`` resets at
every restart included), where the timeout counts from, and inspects of the wrong shape."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from playguard_async.remote.compose import SERVICE_LABEL
from playguard_async.remote.health import (
    POLL_INTERVAL,
    Inspected,
    PlaygroundHealth,
    ServiceHealth,
    playground_health,
    service_health,
    verdict,
    waited,
)

CREATED = datetime(2026, 12, 6, 10, 0, 0, tzinfo=UTC)
GRACE = 5.0


def stamp(moment: datetime) -> str:
    """A timestamp as Docker writes it: nanoseconds, ``Z``."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"


def inspect(
    status: str = "running",
    *,
    started: float | None = 0.0,
    restarts: int = 0,
    exit_code: int = 0,
    check: str | None = None,
    output: str = "",
) -> dict[str, Any]:
    """A container of service ``app`` as ``GET /containers/{id}/json`` answers, created at
    CREATED and (last) started ``started`` seconds later (None: never)."""
    state: dict[str, Any] = {
        "Status": status,
        "ExitCode": exit_code,
        "Error": "",
        "StartedAt": "0001-01-01T00:00:00Z"
        if started is None
        else stamp(CREATED + timedelta(seconds=started)),
    }
    if check is not None:
        state["Health"] = {"Status": check, "FailingStreak": 0, "Log": [{"Output": output}]}
    return {
        "Id": "c1",
        "Created": stamp(CREATED),
        "Image": "sha256:1",
        "RestartCount": restarts,
        "State": state,
        "Config": {"Labels": {SERVICE_LABEL: "app"}},
    }


def at(seconds: float) -> datetime:
    return CREATED + timedelta(seconds=seconds)


SERVICE_CASES: dict[str, tuple[dict[str, Any], float, ServiceHealth]] = {
    # case: (inspect, seconds after creation, what the gate reads of it)
    "never-started": (inspect("created", started=None), 30, ServiceHealth("starting", "created")),
    "running-in-grace": (inspect(), 2, ServiceHealth("starting", "running 2s of 5s")),
    "running-past-grace": (inspect(), 6, ServiceHealth("healthy", "")),
    "check-starting": (inspect(check="starting"), 60, ServiceHealth("starting", "")),
    "check-unhealthy": (
        inspect(check="unhealthy", output="refused\n"), 9,
        ServiceHealth("unhealthy", "refused"),
    ),
    "check-healthy": (inspect(check="healthy"), 1, ServiceHealth("healthy", "")),
    "exited": (inspect("exited", exit_code=3), 2, ServiceHealth("exited", "status 3")),
    "dead": (inspect("dead", exit_code=137), 2, ServiceHealth("exited", "status 137")),
    "restarting-once": (
        inspect("restarting", restarts=1, exit_code=3), 12,
        ServiceHealth("starting", "restarting after status 3; restarted 1 time"),
    ),
    "running-after-two-restarts-in-grace": (
        inspect(started=22, restarts=2), 24,
        ServiceHealth("starting", "running 2s of 5s; restarted 2 times"),
    ),
    "unhealthy-after-one-restart": (
        inspect(started=11, restarts=1, check="unhealthy", output="refused"), 14,
        ServiceHealth("unhealthy", "refused; restarted 1 time"),
    ),
    "healthy-after-one-restart": (
        inspect(started=11, restarts=1, check="healthy"), 14, ServiceHealth("healthy", ""),
    ),
    "healthy-now-after-many-restarts": (
        inspect(started=40, restarts=5, check="healthy"), 42, ServiceHealth("healthy", ""),
    ),
    "restarting-the-third-time": (
        inspect("restarting", restarts=3, exit_code=3), 34,
        ServiceHealth("restarted", "3 times; starting: restarting after status 3"),
    ),
    "running-after-the-third-restart": (
        inspect(started=33, restarts=3, check="starting"), 34,
        ServiceHealth("restarted", "3 times; starting"),
    ),
    "unhealthy-after-four-restarts": (
        inspect(started=44, restarts=4, check="unhealthy", output="refused"), 46,
        ServiceHealth("restarted", "4 times; unhealthy: refused"),
    ),
    "no-check-past-grace-after-three-restarts": (
        inspect(started=33, restarts=3), 40, ServiceHealth("healthy", ""),
    ),
    "exited-after-its-policy-gave-up": (
        inspect("exited", restarts=2, exit_code=1), 30,
        ServiceHealth("exited", "status 1; restarted 2 times"),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(SERVICE_CASES))
def test_service_state_from_one_inspect(case: str) -> None:
    details, seconds, expected = SERVICE_CASES[case]
    health = service_health(Inspected.parse(details), at(seconds), grace=GRACE)
    assert (health.state, health.detail) == (expected.state, expected.detail)
    assert health.image == "sha256:1"
    assert health.final is (expected.state in ("restarted", "exited", "missing"))


def slow_crash_loop(seconds: float, *, life: float = 11.0, backoff: float = 0.1) -> dict[str, Any]:
    """The issue's service at ``seconds`` after its container was created: ``restart: always``,
    dies ``life`` seconds after each start (past Docker's 10 s backoff reset), back ``backoff``
    seconds later; a healthcheck that never passes (its first check never came)."""
    period = life + backoff
    restarts, into = divmod(seconds, period)
    if into >= life:
        return inspect("restarting", started=restarts * period, restarts=int(restarts) + 1,
                       exit_code=1, check="starting")  # fmt: skip
    return inspect(started=restarts * period, restarts=int(restarts), check="starting")


def decide(
    sequence: list[tuple[float, dict[str, Any]]], *, timeout: float, changed: float | None
) -> tuple[float, str, PlaygroundHealth]:
    """The wait's first decision over ``sequence`` (seconds after creation, inspect; the
    monotonic clock reads the same seconds) as ``wait_healthy`` makes it at each poll."""
    for seconds, details in sequence:
        health = playground_health([details], ["app"], at(seconds), grace=GRACE)
        left = timeout - waited(health, changed=changed, began=sequence[0][0], now=seconds)
        decided = verdict(health, left)
        if decided is not None:
            return seconds, decided, health
    raise AssertionError("the wait never ended")


def polls(
    until: float, make: Callable[[float], dict[str, Any]] = slow_crash_loop
) -> list[tuple[float, dict[str, Any]]]:
    count = int(until / POLL_INTERVAL)
    return [(1 + n * POLL_INTERVAL, make(1 + n * POLL_INTERVAL)) for n in range(count)]


def test_a_slow_crash_loop_fails_at_its_third_restart_though_started_at_keeps_resetting() -> None:
    sequence = polls(3600)

    seconds, decided, health = decide(sequence, timeout=60, changed=0.0)

    assert decided == "failed"
    assert health.problems() == {"app": "restarted: 3 times; starting"}
    assert 3 * 11 < seconds < 60  # the restarts decided it, before the timeout
    running_for = [
        (at(s) - datetime.fromisoformat(d["State"]["StartedAt"])).total_seconds()
        for s, d in sequence
        if s <= seconds
    ]
    assert max(running_for) < 11.2  # what the old gate counted the timeout by


@pytest.mark.parametrize("changed", [-2.0, None], ids=["change-this-cycle", "wait-taken-up"])
def test_a_slow_crash_loop_runs_out_of_time_counted_from_its_creation(
    changed: float | None,
) -> None:
    """A timeout shorter than three lives: counted from the container's creation, never from its
    last start, which is 9 s old then; nor from the change 2 s before (compose's own time), or
    from the wait that a cycle which changed nothing takes up."""
    seconds, decided, health = decide(polls(3600), timeout=20, changed=changed)

    assert (seconds, decided) == (20, "failed")
    assert health.problems() == {"app": "starting: restarted 1 time"}


def test_healthy_after_one_restart_passes() -> None:
    def recovers(seconds: float) -> dict[str, Any]:
        if seconds < 11:
            return inspect(started=0, check="starting")
        if seconds < 11.5:
            return inspect("restarting", started=0, restarts=1, exit_code=1, check="starting")
        return inspect(started=11.5, restarts=1, check="starting" if seconds < 14 else "healthy")

    seconds, decided, health = decide(polls(60, recovers), timeout=60, changed=0.0)

    assert (seconds, decided, health.healthy) == (14, "healthy", True)


@pytest.mark.parametrize(
    ("changed", "age", "expected"),
    [
        (100.0, 5.0, 5.0),
        (100.0, 300.0, 30.0),
        (100.0, None, 30.0),
        (None, 300.0, 300.0),
        (None, None, 10.0),
    ],
    ids=[
        "up-created-the-container",
        "up-only-started-an-old-container",
        "change-and-no-created",
        "wait-taken-up",
        "nothing-known",
    ],
)
def test_the_wait_counts_from_the_newest_creation_but_not_from_before_the_change(
    changed: float | None, age: float | None, expected: float
) -> None:
    health = PlaygroundHealth({"app": ServiceHealth("starting", "")}, age)
    assert waited(health, changed=changed, began=120.0, now=130.0) == expected


def test_the_newest_container_sets_the_age_and_other_projects_containers_do_not_count() -> None:
    older = inspect() | {"Id": "c0", "Created": stamp(CREATED - timedelta(seconds=100))}
    other = inspect() | {"Id": "c2", "Config": {"Labels": {SERVICE_LABEL: "db"}}}
    newest = inspect() | {"Config": {"Labels": {SERVICE_LABEL: "web"}}}

    health = playground_health([older, other, newest], ["app", "web"], at(7), grace=GRACE)

    assert health.age == pytest.approx(7.0)
    assert set(health.services) == {"app", "web"}
    assert set(health.labels) == {"c0", "c1", "c2"}


def test_a_service_without_a_container_is_missing_and_final() -> None:
    health = playground_health([], ["app"], at(1), grace=GRACE)
    assert (health.services["app"].state, health.failed, health.age) == ("missing", True, None)
    assert verdict(health, 60) == "failed"


def with_field(path: str, value: Any) -> dict[str, Any]:
    """A restarting, crash-looped container with one field (``State.Health.Log``) replaced."""
    details = inspect("restarting", started=1, restarts=4, exit_code=3, check="unhealthy",
                      output="refused")  # fmt: skip
    *parents, last = path.split(".")
    node: Any = details
    for key in parents:
        node = node[key]
    node[last] = value
    return details


HOSTILE_INSPECTS: dict[str, tuple[Any, Any]] = {
    # case: (inspect answer, what the gate reads of service app)
    "not-an-object": (["Id", "c1"], None),
    "null": (None, None),
    "state-a-list": (with_field("State", ["running"]), ("restarted", "4 times; starting")),
    "labels-a-list": (with_field("Config.Labels", [SERVICE_LABEL]), None),
    "config-a-string": (with_field("Config", "x"), None),
    "label-not-a-string": (with_field("Config.Labels", {SERVICE_LABEL: 7}), None),
    "status-a-number": (with_field("State.Status", 1), ("restarted", "4 times; starting")),
    "restart-count-a-string": (with_field("RestartCount", "4"),
                               ("starting", "restarting after status 3")),
    "restart-count-a-bool": (with_field("RestartCount", True),
                             ("starting", "restarting after status 3")),
    "restart-count-a-float": (with_field("RestartCount", 4.0),
                              ("starting", "restarting after status 3")),
    "restart-count-negative": (with_field("RestartCount", -4),
                               ("starting", "restarting after status 3")),
    "exit-code-a-string": (with_field("State.ExitCode", "3"),
                           ("restarted", "4 times; starting: restarting after status ?")),
    "error-an-object": (with_field("State.Error", {"a": 1}),
                        ("restarted", "4 times; starting: restarting after status 3")),
    "started-garbage": (with_field("State.StartedAt", "yesterday"), "restarted"),
    "started-a-number": (with_field("State.StartedAt", 1700000000), "restarted"),
    "created-garbage": (with_field("Created", "\x1b[31mnow"), "restarted"),
    "created-naive": (with_field("Created", "2026-12-06T10:00:00"), "restarted"),
    "health-a-string": (with_field("State.Health", "healthy"), "restarted"),
    "health-status-a-list": (with_field("State.Health.Status", ["healthy"]), "restarted"),
    "health-log-an-object": (with_field("State.Health.Log", {"Output": "x"}), "restarted"),
    "health-log-entry-a-string": (with_field("State.Health.Log", ["x"]), "restarted"),
    "health-output-a-number": (with_field("State.Health.Log", [{"Output": 5}]), "restarted"),
    "image-a-number": (with_field("Image", 5), "restarted"),
    "id-a-number": (with_field("Id", 5), "restarted"),
}  # fmt: skip
"""Container inspects of the wrong type or shape: each field reads as absent, nothing raises.
Without labels the container is no service's (``app`` is missing)."""


@pytest.mark.parametrize("case", sorted(HOSTILE_INSPECTS))
def test_an_inspect_field_of_the_wrong_shape_reads_as_absent(case: str) -> None:
    details, expected = HOSTILE_INSPECTS[case]

    health = playground_health([details], ["app"], at(10), grace=GRACE)

    app = health.services["app"]
    if expected is None:
        assert (app.state, app.detail) == ("missing", "")
    elif isinstance(expected, str):
        assert app.state == expected
    else:
        assert (app.state, app.detail) == expected
    assert verdict(health, 60) in ("failed", None)


def test_a_running_container_with_an_unreadable_start_is_not_healthy_by_grace() -> None:
    details = inspect() | {"State": {"Status": "running", "StartedAt": "soon"}}
    health = service_health(Inspected.parse(details), at(3600), grace=GRACE)
    assert (health.state, health.detail) == ("starting", "running 0s of 5s")


def test_docker_timestamps_with_nanoseconds_parse() -> None:
    parsed = Inspected.parse(inspect(started=1.5))
    assert parsed.created == CREATED
    assert parsed.started == CREATED + timedelta(seconds=1.5)
