"""How long a dead link may stay open is a setting, turned into the socket options and keepalive
counts the clients are given: table-driven over the settings' edges."""

from __future__ import annotations

import socket

import pytest

from playguard_async.coordination.client import KEEPALIVE_PROBES, keepalive_options
from playguard_async.service.wiring import remote_options
from playguard_async.settings import SettingsError, load_settings


@pytest.mark.parametrize(
    ("seconds", "idle", "interval", "user_timeout_ms"),
    [(15.0, 7, 2, 15_000), (60.0, 30, 10, 60_000), (3.0, 1, 1, 3_000), (0.5, 1, 1, 500)],
)
def test_redis_keepalive_ends_a_dead_connection_within_its_seconds(
    seconds: float, idle: int, interval: int, user_timeout_ms: int
) -> None:
    options = keepalive_options(seconds)
    assert options["socket_keepalive"] is True
    assert options["socket_keepalive_options"] == {
        socket.TCP_KEEPIDLE: idle,
        socket.TCP_KEEPINTVL: interval,
        socket.TCP_KEEPCNT: KEEPALIVE_PROBES,
        socket.TCP_USER_TIMEOUT: user_timeout_ms,
    }
    # Seconds are whole for the kernel: probes never take longer than asked, but at least 1 s.
    assert idle + interval * KEEPALIVE_PROBES <= max(seconds, 1 + KEEPALIVE_PROBES)


def test_redis_keepalive_zero_leaves_the_kernels_defaults() -> None:
    assert keepalive_options(0.0) == {"socket_keepalive": False, "socket_keepalive_options": None}


@pytest.mark.parametrize("count", [1, 3, 100])
def test_ssh_keepalive_count_max_reaches_the_remote_options(count: int) -> None:
    options = remote_options(load_settings(None, ssh_keepalive_count_max=count))
    assert options.keepalive_count_max == count


@pytest.mark.parametrize("count", [0, -1, 101, "three", 2.5])
def test_ssh_keepalive_count_max_out_of_range_names_the_field(count: object) -> None:
    with pytest.raises(SettingsError, match="ssh_keepalive_count_max"):
        load_settings(None, ssh_keepalive_count_max=count)
