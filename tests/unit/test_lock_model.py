"""Pure parts of the lock: key layout, holder records, argument checks."""

from __future__ import annotations

import os
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.crc import key_slot

from playguard_async.coordination.keys import fence_key, lock_key, once_key
from playguard_async.coordination.lock import TokenLock
from playguard_async.coordination.lock_record import Holder, new_record


def test_keys_of_one_name_share_a_cluster_slot() -> None:
    for name in ("edge-1", "marquee:edge-7", "a"):
        slots = {
            key_slot(key.encode()) for key in (lock_key(name), fence_key(name), once_key(name))
        }
        assert len(slots) == 1, name


def test_keys_of_different_names_are_different() -> None:
    assert lock_key("edge-1") != lock_key("edge-2")
    assert lock_key("edge-1") != fence_key("edge-1")


def test_holder_record_round_trips_exactly() -> None:
    holder = Holder(token="t", replica="r", host="h", pid=7, acquired_at="2026-12-03T00:00:00Z")
    assert Holder.parse(holder.encode()) == holder
    assert Holder.parse(holder.encode().encode()) == holder


@pytest.mark.parametrize(
    "replica",
    [
        "host:123",
        'quote"d',
        "back\\slash",
        "tab\tnew\nline",
        "\x00\x1f\x7f",
        "ünï ☃ 𝄞",
        "{}",
        "x" * 300,
    ],
)
def test_a_new_record_is_exactly_what_its_holder_encodes(replica: str) -> None:
    """The record is built around a cached middle, not by json.dumps per acquisition: it must
    still be Holder.encode's text, for any replica name a setting can hold."""
    token, record = new_record(replica)
    holder = Holder.parse(record)
    assert holder is not None, record
    assert (holder.token, holder.replica, holder.pid) == (token, replica, os.getpid())
    assert record == holder.encode()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"ttl": 0}, "ttl"),
        ({"ttl": -1.0}, "ttl"),
        ({"timeout": 0}, "timeout"),
        ({"drift_factor": 0.6}, "drift_factor"),
    ],
)
def test_bad_lock_arguments_name_the_field_and_value(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        TokenLock(Redis(), "edge-1", **kwargs)


def test_deadline_leaves_a_drift_margin() -> None:
    lock = TokenLock(Redis(), "edge-1", ttl=900.0)
    assert lock.deadline_from(100.0) == pytest.approx(100.0 + 900.0 - 9.002)
