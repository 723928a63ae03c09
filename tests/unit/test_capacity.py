"""Cycle slots from open files: the pools first, then 4 files a cycle, within 16 and 1024."""

from __future__ import annotations

import resource

import pytest

from playguard_async.kits.capacity import (
    FILES_PER_CYCLE,
    MAX_SLOTS,
    MIN_HTTP_CONNECTIONS,
    MIN_SLOTS,
    OPEN_FILES_CEILING,
    RESERVED_FILES,
    cycle_slots,
    engine_files,
    http_connection_room,
    raise_open_files_limit,
)
from tests.support.engine import settings_for

SIZING = [
    # open files, ssh pool, redis pool -> slots
    (1024, 1024, 50, MIN_SLOTS),  # systemd's default soft limit: the idle pool takes it all
    (65536, 1024, 50, 50),  # the defaults under the unit's limit: one cycle per Redis connection
    (2048, 1024, 500, (2048 - 1024 - 500 - RESERVED_FILES) // FILES_PER_CYCLE),
    (65536, 1024, 800, 800),
    (1 << 20, 0, 10_000, MAX_SLOTS),
    (512, 0, 100, (512 - 100 - RESERVED_FILES) // FILES_PER_CYCLE),
    (100, 0, 1, MIN_SLOTS),
    (0, 0, 0, MIN_SLOTS),
]


@pytest.mark.parametrize(("open_files", "ssh_pool", "redis_pool", "slots"), SIZING)
def test_slots_are_what_the_pools_leave_of_the_open_files(
    open_files: int, ssh_pool: int, redis_pool: int, slots: int
) -> None:
    got = cycle_slots(ssh_pool_size=ssh_pool, redis_connections=redis_pool, open_files=open_files)
    assert got == slots


def test_a_number_set_by_the_operator_is_used_as_it_is() -> None:
    assert settings_for(max_concurrent_cycles=3).cycle_slots() == 3


def test_auto_reads_the_limit_in_force(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda _: (2048, 2048))
    settings = settings_for(
        max_concurrent_cycles="auto", ssh_pool_size=1000, redis_max_connections=1000
    )
    expected = (2048 - 1000 - 1000 - RESERVED_FILES) // FILES_PER_CYCLE
    assert expected < MIN_SLOTS
    assert settings.cycle_slots() == MIN_SLOTS


@pytest.mark.parametrize(
    ("soft", "hard", "raised"),
    [(1024, 524288, 524288), (1024, 1024, 1024), (4096, resource.RLIM_INFINITY, 1 << 20)],
)
def test_the_soft_limit_is_lifted_to_the_hard_one_within_the_ceiling(
    monkeypatch: pytest.MonkeyPatch, soft: int, hard: int, raised: int
) -> None:
    limits = {"now": (soft, hard)}
    monkeypatch.setattr(resource, "getrlimit", lambda _: limits["now"])
    monkeypatch.setattr(resource, "setrlimit", lambda _, value: limits.update(now=value))
    assert raise_open_files_limit() == raised
    assert limits["now"] == (raised, hard)


def test_a_refused_lift_keeps_the_soft_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda _: (1024, 4096))

    def refuse(*_: object) -> None:
        raise ValueError("not allowed")

    monkeypatch.setattr(resource, "setrlimit", refuse)
    assert raise_open_files_limit() == 1024


ROOM = [
    # open files, wanted -> connections (the engine's files: 16 slots, pools of 16 and 8)
    (65536, 256, 256),  # room to spare: the setting
    (300, 256, 300 - (16 * FILES_PER_CYCLE + 16 + 8 + RESERVED_FILES)),  # lowered to fit
    (150, 256, MIN_HTTP_CONNECTIONS),  # nothing left: still the probes' few
    (300, 4, 4),
]


@pytest.mark.parametrize(("open_files", "wanted", "room"), ROOM)
def test_http_connections_get_what_the_cycles_leave_of_the_open_files(
    open_files: int, wanted: int, room: int
) -> None:
    needs = engine_files(slots=16, ssh_pool_size=16, redis_connections=8)
    assert needs == 16 * FILES_PER_CYCLE + 16 + 8 + RESERVED_FILES
    assert http_connection_room(wanted, open_files=open_files, engine_needs=needs) == room


def test_an_infinite_soft_limit_counts_as_the_ceiling(monkeypatch: pytest.MonkeyPatch) -> None:
    infinite = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    monkeypatch.setattr(resource, "getrlimit", lambda _: infinite)
    assert raise_open_files_limit() == OPEN_FILES_CEILING
