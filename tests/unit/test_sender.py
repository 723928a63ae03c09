"""The one place coordination chooses how to reach Redis: by client and bounds, made once."""

from __future__ import annotations

from redis.asyncio import Redis

from playguard_async.coordination.channel import ChannelledRedis
from playguard_async.coordination.client import (
    AcknowledgedSender,
    ChannelSender,
    PoolSender,
    sender_for,
)


def test_a_single_server_sends_on_its_channel_with_one_sender_per_bound() -> None:
    redis = ChannelledRedis()
    sender = sender_for(redis, timeout=1.0)
    assert isinstance(sender, ChannelSender)
    assert sender.channel is redis.channel
    assert sender_for(redis, timeout=1.0) is sender, "made once, not per lock"
    assert sender_for(redis, timeout=2.0) is not sender


def test_a_client_without_a_channel_sends_on_its_pool() -> None:
    assert type(sender_for(Redis(), timeout=1.0)) is PoolSender


def test_min_replicas_sends_on_the_pool_and_waits_for_them() -> None:
    sender = sender_for(ChannelledRedis(), timeout=1.0, min_replicas=2, replica_timeout=0.25)
    assert isinstance(sender, AcknowledgedSender)
    assert (sender.replicas, sender.wait_ms) == (2, 250)
