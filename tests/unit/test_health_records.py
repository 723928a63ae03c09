"""What the health gate shows and keeps: host output made one bounded clean line, the record on
the host read back whatever it holds, the override that pins a rollback, and the rollback metric."""

from __future__ import annotations

import pytest
import yaml

from playguard_async.cycle_record import NoticeKind
from playguard_async.desired_state.model import Inventory, Playground, Playspec
from playguard_async.engine.results import CycleResult, Outcome
from playguard_async.kits.textclean import LINE_LIMIT, host_line
from playguard_async.remote.compose import override_content
from playguard_async.remote.last_good import Failed, HealthRecord, LastGood, input_digest
from playguard_async.remote.revision import Revision
from playguard_async.service.daemon import rolled_back_playspecs
from playguard_async.service.metrics import Metrics
from tests.support.engine import inventory_of

SECRET = "s3cr3t-pass"

HOST_OUTPUT = {
    "plain": ("connection refused\n", "connection refused"),
    "last-non-blank-line": ("first\nsecond\n\n  \n", "second"),
    "csi-colours": ("\x1b[1;31mred\x1b[0m text", "red text"),
    "osc-title-bel": ("\x1b]0;owned\x07visible", "visible"),
    "osc-hyperlink-st": ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"),
    "c1-csi": ("\x9b31mred", "red"),
    "cursor-moves": ("\x1b[2J\x1b[Hcleared", "cleared"),
    "control-characters": ("a\x00b\x07c\x7fd", "a\\x00b\\x07c\\x7fd"),
    "carriage-return-overwrite": ("good\rEVIL", "EVIL"),
    "invalid-utf8-decoded": (
        b"bad\xff\xfe bytes".decode("utf-8", "replace"),
        "bad\ufffd\ufffd bytes",
    ),
    "secret": (f"login with {SECRET} failed", "login with *** failed"),
    "whitespace-runs": ("a \t\t  b", "a b"),
    "empty": ("", ""),
}


@pytest.mark.parametrize("case", sorted(HOST_OUTPUT))
def test_host_output_becomes_one_clean_line(case: str) -> None:
    raw, shown = HOST_OUTPUT[case]
    assert host_line(raw, secrets=[SECRET]) == shown


@pytest.mark.parametrize(
    "raw",
    [
        "x" * (1 << 20),
        "\x1b[31m" * (1 << 17),
        ("\x1b[31mred" + "\x00" * 1000) * 1000,
        "line\n" * 200_000,
    ],
    ids=["megabyte-line", "megabyte-of-escapes", "escapes-and-controls", "many-lines"],
)
def test_huge_host_output_is_bounded(raw: str) -> None:
    shown = host_line(raw, secrets=[SECRET])
    assert len(shown) <= LINE_LIMIT
    assert "\x1b" not in shown
    assert "\x00" not in shown


GOOD = LastGood(
    inputs="i" * 64,
    compose="c" * 64,
    revision=Revision("a" * 40, {"app": "r@sha256:" + "1" * 64}, env="e" * 64, override="0" * 64),
)

RECORD_FILES = {
    "not-json": "{{{",
    "a-list": "[]",
    "a-number": "42",
    "last-good-not-an-object": '{"last_good": 1}',
    "inputs-missing": '{"last_good": {"compose": "c", "override": "' + "0" * 64 + '", '
    '"images": {}}}',
    "field-missing": '{"failed": {"inputs": "i"}}',
    "reason-not-a-string": '{"failed": {"inputs": "i", "reason": null}}',
}


@pytest.mark.parametrize("case", sorted(RECORD_FILES))
def test_record_file_not_of_the_written_form_is_refused(case: str) -> None:
    with pytest.raises((ValueError, TypeError, KeyError, AttributeError)):
        HealthRecord.parse(RECORD_FILES[case])


@pytest.mark.parametrize(
    "record",
    [
        HealthRecord(),
        HealthRecord(last_good=GOOD),
        HealthRecord(GOOD, Failed("f" * 64, "app: x")),
        HealthRecord(GOOD, Failed("f" * 64, "app: x", commit="b" * 40, tags="d" * 64)),
    ],
    ids=["empty", "last-good", "last-good-and-failed", "failed-release"],
)
def test_record_reads_back_as_written(record: HealthRecord) -> None:
    assert HealthRecord.parse(record.to_json()) == record
    assert "\n" not in record.to_json()  # one line each, as the read script expects


def test_input_digest_changes_with_each_input_and_nothing_else() -> None:
    files, images = {"compose": "a", "env": "-"}, {"repo:1": "sha256:1"}
    base = input_digest(files, "override", images)
    assert input_digest(dict(reversed(files.items())), "override", images) == base
    assert input_digest({**files, "compose": "b"}, "override", images) != base
    assert input_digest(files, "override2", images) != base
    assert input_digest(files, "override", {"repo:1": "sha256:2"}) != base


def test_rollback_override_pins_each_service_by_digest_and_keeps_our_labels() -> None:
    plain = yaml.safe_load(override_content("edge-1", "web", ["app", "db"]))
    pinned = yaml.safe_load(
        override_content("edge-1", "web", ["app", "db"], {"app": "r@sha256:1", "gone": "x"})
    )
    assert pinned["services"]["app"] == {**plain["services"]["app"], "image": "r@sha256:1"}
    assert pinned["services"]["db"] == plain["services"]["db"]
    assert "gone" not in pinned["services"]


def test_each_rollback_counts_once_under_its_playspec() -> None:
    inventory = Inventory(
        marquees=inventory_of("m1").marquees,
        playspecs=[Playspec(name="web", repo="https://example.invalid/web.git")],
        playgrounds=[Playground(name="web-main", playspec="web", marquee="m1", branch="main")],
    )
    result = CycleResult(marquee="m1", cycle_id="c", outcome=Outcome.UNHEALTHY)
    result.notices["reconcile_playgrounds"] = [
        {"kind": NoticeKind.ROLLED_BACK.value, "subject": "web-main", "detail": "x"},
        {"kind": NoticeKind.UNHEALTHY.value, "subject": "web-main", "detail": "x"},
        {"kind": NoticeKind.ROLLED_BACK.value, "subject": "deleted-since", "detail": "x"},
    ]
    metrics = Metrics(
        outcomes=[outcome.value for outcome in Outcome], lock_ttl=10.0, marquees_shown=100
    )

    for playspec in rolled_back_playspecs(result, inventory):
        metrics.rolled_back(playspec)

    sample = metrics.registry.get_sample_value
    assert sample("playguard_rollbacks_total", {"playspec": "web"}) == 1
    assert sample("playguard_rollbacks_total", {"playspec": "-"}) == 1
    assert rolled_back_playspecs(CycleResult(marquee="m1", cycle_id="d"), inventory) == []
