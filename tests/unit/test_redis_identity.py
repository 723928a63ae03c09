"""Redis's identity compared tick to tick (``coordination.identity``): a change (a failover, a
restart) tells the listeners once; the same identity, a failed read and a process's first read
tell nothing, and a failed read is not recorded, so the next read compares with the last known.
The answers are ``INFO`` as redis-py parses it; what a real failover answers is the integration
tests' (``test_rollout_failover.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from redis.exceptions import ConnectionError as RedisConnectionError
from structlog.testing import capture_logs

from playguard_async.coordination.client import RedisClient
from playguard_async.coordination.identity import RedisIdentity, identity_of
from playguard_async.engine.services import CycleServices
from tests.support.engine import settings_for


def info(run_id: str, replid: str) -> dict[str, Any]:
    return {"redis_version": "7.0.15", "run_id": run_id, "master_replid": replid, "role": "master"}


class Answers:
    """Answers ``INFO`` with each of ``answers`` in turn (an exception is raised)."""

    def __init__(self, *answers: Mapping[str, Any] | Exception) -> None:
        self.answers = list(answers)

    async def info(self) -> Mapping[str, Any]:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


async def changes(*answers: Mapping[str, Any] | Exception) -> tuple[list[bool], int, list[str]]:
    """Whether each read said changed, how often the listener was told, the log events."""
    told: list[None] = []
    identity = RedisIdentity(cast(RedisClient, Answers(*answers)), 1.0, [lambda: told.append(None)])
    with capture_logs() as logs:
        said = [await identity.changed() for _ in answers]
    return said, len(told), [entry["event"] for entry in logs]


async def test_the_first_read_only_records() -> None:
    assert await changes(info("a", "r1")) == ([False], 0, [])


async def test_the_same_identity_is_no_change() -> None:
    assert await changes(info("a", "r1"), info("a", "r1")) == ([False, False], 0, [])


async def test_a_new_process_or_a_new_replication_history_is_a_change_told_once() -> None:
    restarted = await changes(info("a", "r1"), info("b", "r2"), info("b", "r2"))
    assert restarted == ([False, True, False], 1, ["redis.identity_changed"])
    promoted_back = await changes(info("a", "r1"), info("a", "r3"))  # same process, new history
    assert promoted_back == ([False, True], 1, ["redis.identity_changed"])


async def test_a_failed_read_tells_nothing_and_the_next_compares_with_the_last_known() -> None:
    down = RedisConnectionError("gone")
    assert await changes(info("a", "r1"), down, info("a", "r1")) == ([False] * 3, 0, [])
    changed = await changes(info("a", "r1"), down, info("b", "r2"))
    assert changed[:2] == ([False, False, True], 1)
    assert await changes(down, info("a", "r1"), info("a", "r1")) == ([False] * 3, 0, [])
    unreadable = await changes(info("a", "r1"), {"redis_version": "7"}, info("a", "r1"))
    assert unreadable == ([False] * 3, 0, [])


def test_a_clusters_identity_is_each_primarys_in_any_order() -> None:
    one = identity_of({"n1": info("a", "r1"), "n2": info("b", "r2")})
    assert one == identity_of({"n2": info("b", "r2"), "n1": info("a", "r1")})
    assert one != identity_of({"n1": info("a", "r1"), "n2": info("c", "r3")})


async def test_a_change_makes_each_marquees_next_cycle_read_its_hosts_pause_copies_again() -> None:
    """A pause no cycle of this replica met may be among the writes Redis lost: the pauses'
    memory of which hosts it read is forgotten with the decisions' (``forget_hosts``)."""
    told: list[None] = []
    services = CycleServices.build(
        settings_for(),
        cast(RedisClient, Answers(info("a", "r1"), info("a", "r1"), info("b", "r2"))),
        [],
        on_redis_changed=[lambda: told.append(None)],
    )
    services.pauses.host_read("m1")
    assert [await services.redis_identity.changed() for _ in range(2)] == [False, False]
    assert not services.pauses.host_read_due("m1")
    assert await services.redis_identity.changed()
    assert services.pauses.host_read_due("m1")
    assert len(told) == 1
