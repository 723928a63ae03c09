"""A commit, digest or pin value of the wrong shape, wherever it is read back from (the host's
health record, a pin in Redis, a cycle record's findings), reads as absent with one log line:
never a traceback, and never anything that could reach a command line."""

from __future__ import annotations

import json
from typing import Any

import pytest
from structlog.testing import capture_logs

from playguard_async.coordination.pins import Pin
from playguard_async.cycle_record import playground_findings
from playguard_async.remote.last_good import HealthRecord
from playguard_async.remote.revision import commit_of

COMMIT = "a" * 40
IMAGE = "registry.example/app@sha256:" + "b" * 64
GOOD_REVISION: dict[str, Any] = {
    "commit": COMMIT,
    "images": {"app": IMAGE},
    "env": "c" * 64,
    "override": "d" * 64,
}

HOSTILE_COMMITS: dict[str, object] = {
    "option": "--upload-pack=touch /tmp/owned",
    "ref": "HEAD",
    "ref-expression": "main~1",
    "abbreviated": "a" * 12,
    "upper-case": "A" * 40,
    "one-too-long": "a" * 41,
    "newline": "a" * 39 + "\n",
    "shell": "$(reboot)" + "a" * 31,
    "control-characters": "\x1b[31m" + "a" * 35,
    "not-utf8-escaped": "\udcff" * 40,
    "a-number": 1234,
    "a-list": [COMMIT],
    "huge": "a" * 1_000_000,
}

HOSTILE_FIELDS: dict[str, tuple[str, object]] = {
    **{f"commit-{case}": ("commit", value) for case, value in HOSTILE_COMMITS.items()},
    "image-by-tag": ("images", {"app": "registry.example/app:latest"}),
    "image-option": ("images", {"app": "--privileged@sha256:" + "b" * 64}),
    "image-short-digest": ("images", {"app": "registry.example/app@sha256:abc"}),
    "images-a-list": ("images", [IMAGE]),
    "service-not-a-string": ("images", {"1": 2}),
    "env-a-path": ("env", "../../etc/shadow"),
    "env-short": ("env", "c" * 12),
    "override-a-number": ("override", 7),
    "override-missing": ("override", None),
}


def record_text(**revision: object) -> str:
    return json.dumps({"last_good": {"inputs": "i", "compose": "c", **revision}, "failed": None})


@pytest.mark.parametrize("case", sorted(HOSTILE_FIELDS))
def test_a_host_record_revision_of_the_wrong_shape_reads_as_no_last_good_with_one_line(
    case: str,
) -> None:
    field, value = HOSTILE_FIELDS[case]
    with capture_logs() as logs:
        record = HealthRecord.parse(record_text(**{**GOOD_REVISION, field: value}))

    assert record.last_good is None
    assert [entry["event"] for entry in logs] == ["revision.unreadable"]
    assert len(logs[0]["value"]) <= 80


def test_the_same_record_of_the_right_shape_reads_back() -> None:
    record = HealthRecord.parse(record_text(**GOOD_REVISION))
    assert record.last_good is not None
    assert record.last_good.revision.to_json() == GOOD_REVISION


@pytest.mark.parametrize("case", sorted(HOSTILE_COMMITS))
def test_a_failed_release_commit_of_the_wrong_shape_reads_as_unknown_with_one_line(
    case: str,
) -> None:
    failed = {"inputs": "i", "reason": "r", "commit": HOSTILE_COMMITS[case], "tags": "-x"}
    with capture_logs() as logs:
        record = HealthRecord.parse(json.dumps({"last_good": None, "failed": failed}))

    assert record.failed is not None
    assert (record.failed.commit, record.failed.tags) == (None, None)
    assert not record.failed.is_release(None, "-x")  # an unknown release is never held
    assert [entry["event"] for entry in logs] == ["revision.commit_unreadable"]


def test_a_commit_of_the_right_shape_passes_silently() -> None:
    with capture_logs() as logs:
        assert commit_of(COMMIT, source="test") == COMMIT
        assert commit_of("e" * 64, source="test") == "e" * 64
    assert logs == []


def pin_value(**fields: object) -> str:
    written = {"revision": "last-good", "user": "ann", "host": "desk", "reason": "demo",
               "since": 1.0}  # fmt: skip
    return json.dumps({**written, **fields})


HOSTILE_PINS: dict[str, bytes | str] = {
    **{f"revision-{case}": pin_value(revision=value) for case, value in HOSTILE_COMMITS.items()},
    "not-json": b"{{{",
    "not-utf8": b"\xff\xfe\x00",
    "a-list": "[]",
    "deep": "[" * 100_000 + "]" * 100_000,
    "since-a-bool": pin_value(since=True),
    "since-a-string": pin_value(since="yesterday"),
    "reason-missing": pin_value(reason=None),
    "user-a-number": pin_value(user=3),
    "images-a-tag": pin_value(revision=COMMIT, images={"app": "shop:latest"}),
    "images-an-option": pin_value(revision=COMMIT, images={"app": "--privileged"}),
    "images-a-list": pin_value(revision=COMMIT, images=["shop@sha256:" + "a" * 64]),
    "images-a-number": pin_value(revision=COMMIT, images={"app": 3}),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_PINS))
def test_a_pin_value_of_the_wrong_shape_reads_as_no_pin_with_one_line(case: str) -> None:
    with capture_logs() as logs:
        assert Pin.parse("web-main", HOSTILE_PINS[case]) is None
    assert [entry["event"] for entry in logs] == ["pin.unreadable"]


@pytest.mark.parametrize("revision", ["last-good", COMMIT, "f" * 64])
def test_a_pin_value_as_written_reads_back(revision: str) -> None:
    pin = Pin.parse("web-main", pin_value(revision=revision))
    assert pin is not None
    assert Pin.parse("web-main", pin.encode()) == pin


def test_a_commit_pin_holding_images_reads_back_with_them() -> None:
    images = {"app": "127.0.0.1:5000/shop@sha256:" + "a" * 64, "db": "sha256:" + "b" * 64}
    pin = Pin.parse("web-main", pin_value(revision=COMMIT, images=images))
    assert pin is not None
    assert pin.images == images
    assert Pin.parse("web-main", pin.encode()) == pin


@pytest.mark.parametrize("case", sorted(HOSTILE_FIELDS))
def test_a_revision_of_the_wrong_shape_in_a_cycle_record_reads_as_absent(case: str) -> None:
    field, value = HOSTILE_FIELDS[case]
    finding = {"state": "running", "drift": [], "actions": [],
               "revision": {**GOOD_REVISION, field: value},
               "last_good_revision": GOOD_REVISION}  # fmt: skip
    decoded = playground_findings({"reconcile_playgrounds": {"playgrounds": {"web": finding}}})

    assert decoded["web"].revision is None
    assert decoded["web"].last_good_revision == GOOD_REVISION
