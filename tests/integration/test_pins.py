"""Pinning a Playground, end to end with the installed ``playguard`` against the lab: the pin is
kept in Redis beside the pause, a moved branch head leaves the pinned checkout where it is,
``plan`` says held and exits 0, and ``unpin`` lets the next cycle apply the head."""

from __future__ import annotations

import json
import subprocess

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis
from structlog.testing import capture_logs

from playguard_async.coordination.keys import pins_key
from playguard_async.coordination.pins import Pin, read_pins, take_pin
from playguard_lab import GitOrigin
from tests.support.cli import Playguard
from tests.support.playgrounds import checkout_head
from tests.support.world import LabWorld


def cycle(playguard: Playguard) -> subprocess.CompletedProcess[str]:
    done = playguard("cycle", "edge-1", timeout=180.0)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.mark.parametrize("by", ["last-good", "commit"])
def test_a_pinned_playground_stays_while_its_head_moves_and_unpin_applies_the_head(
    playguard: Playguard, lab: LabWorld, git_origin: GitOrigin, store: SyncRedis, by: str
) -> None:
    branch = lab.data["playgrounds"][0]["branch"]
    cycle(playguard)
    pinned_at = checkout_head(git_origin, lab)
    revision = "last-good" if by == "last-good" else pinned_at

    pinned = playguard(
        "pin", "edge-1", "web-main", "--revision", revision, "--reason", "holding for the demo"
    )
    new_head = git_origin.commit(branch, {"NOTES": "a new head\n"}, "Move the head")
    held = cycle(playguard)
    plan = playguard("plan", "edge-1", timeout=180.0)
    plan_json = json.loads(playguard("plan", "edge-1", "--json", timeout=180.0).stdout)

    assert pinned.returncode == 0, pinned.stderr
    assert f"pinned at {revision} by " in pinned.stdout
    assert json.loads(store.hget(pins_key("edge-1"), "web-main") or "{}")["revision"] == revision
    assert checkout_head(git_origin, lab) == pinned_at
    assert "update playground" not in held.stdout
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert f"held: web-main: pinned at {revision} by " in plan.stdout
    assert "edge-1: in sync; 1 held" in plan.stdout
    assert plan_json["verdict"] == "in_sync"

    unpinned = playguard("unpin", "edge-1", "web-main")
    cycle(playguard)

    assert unpinned.stdout.strip() == "edge-1/web-main: unpinned"
    assert store.hlen(pins_key("edge-1")) == 0
    assert checkout_head(git_origin, lab) == new_head != pinned_at


def test_pin_refuses_a_revision_or_playground_it_cannot_hold_and_stores_nothing(
    playguard: Playguard, lab: LabWorld, store: SyncRedis
) -> None:
    short = playguard("pin", "edge-1", "web-main", "--revision", "abc123", "--reason", "x")
    option = playguard(
        "pin", "edge-1", "web-main", "--revision", "--upload-pack=x", "--reason", "x"
    )
    unknown = playguard("pin", "edge-1", "nope", "--reason", "x")

    assert short.returncode == 1
    assert "give last-good or a full commit name" in short.stderr
    assert option.returncode != 0
    assert unknown.returncode == 1
    assert "no playground named 'nope' on marquee 'edge-1'" in unknown.stderr
    assert "Traceback" not in short.stderr + option.stderr + unknown.stderr
    assert store.exists(pins_key("edge-1")) == 0


async def test_pins_redis_holds_of_the_wrong_shape_read_as_none_with_one_line_each(
    redis: Redis,
) -> None:
    """Written by hand with redis-cli: a pin whose revision is an option, one that is not JSON,
    a field name that is not UTF-8, and, on another Marquee, a key of another type."""
    good = Pin.taken_now("web-main", "a" * 40, "demo")
    await take_pin(redis, "edge-1", good, 2.0)
    await redis.hset(pins_key("edge-1"), "evil", '{"revision": "--upload-pack=x"}')
    await redis.hset(pins_key("edge-1"), "garbage", b"\xff{{")
    await redis.hset(pins_key("edge-1"), b"\xff\xfe", good.encode())
    await redis.rpush(pins_key("edge-2"), "a list")

    with capture_logs() as logs:
        pins = await read_pins(redis, "edge-1", 2.0)
        other = await read_pins(redis, "edge-2", 2.0)

    assert set(pins) == {"web-main", "\ufffd\ufffd"}
    assert pins["web-main"] == good
    assert other == {}
    assert sorted(entry["event"] for entry in logs) == ["pin.unreadable"] * 3
