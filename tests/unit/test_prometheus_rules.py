"""The alerting and recording rules and the dashboard we ship (``deploy/``) are valid, behave as
their promtool unit tests say, and name only metrics the daemon exports."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.support.metrics import with_every_series

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "playguard.rules.yml"
RULE_TESTS = sorted((DEPLOY / "prometheus" / "tests").glob("*.yml"))
DASHBOARD = DEPLOY / "grafana" / "playguard.json"

METRIC_NAME = re.compile(r"\bplayguard_[a-z0-9_]+")
"""A daemon metric in an expression (recording rules are named ``playguard:...``, so they are
not taken for one)."""
RECORDED = re.compile(r"\bplayguard:[a-z0-9_:]+")
HISTOGRAM_SERIES = re.compile(r"_bucket$")


@pytest.fixture(scope="module")
def promtool(require_binary: Callable[[str, str], str]) -> str:
    return require_binary("promtool", "prometheus")


def run(promtool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_promtool_finds_the_rules_valid(promtool: str) -> None:
    checked = run(promtool, "check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout


def test_the_rules_pass_their_unit_tests(promtool: str) -> None:
    assert RULE_TESTS, "no promtool unit tests in deploy/prometheus/tests/"
    tested = run(promtool, "test", "rules", *map(str, RULE_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_promtool_would_catch_an_alert_that_no_longer_fires(promtool: str, tmp_path: Path) -> None:
    """The unit tests do test something: with one alert's threshold raised out of reach, they
    fail, naming that alert."""
    rules = RULES.read_text(encoding="utf-8")
    broken = rules.replace("\n          ) >= 3\n", "\n          ) >= 1000\n")
    assert broken != rules
    (tmp_path / "tests").mkdir()
    (tmp_path / RULES.name).write_text(broken, encoding="utf-8")
    copies = []
    for test in RULE_TESTS:
        copy = tmp_path / "tests" / test.name
        copy.write_text(test.read_text(encoding="utf-8"), encoding="utf-8")
        copies.append(str(copy))
    tested = run(promtool, "test", "rules", *copies)
    assert tested.returncode != 0
    assert "PlayguardMarqueeNotConverged" in tested.stdout + tested.stderr


def exported_names() -> set[str]:
    """Every metric and sample name a daemon's registry holds (``with_every_series``)."""
    names = set()
    for family in with_every_series().registry.collect():
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    return names


def rule_expressions() -> list[str]:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]


@pytest.mark.parametrize(
    "expressions", [rule_expressions, dashboard_expressions], ids=["rules", "dashboard"]
)
def test_every_metric_used_is_one_the_daemon_exports(
    expressions: Callable[[], list[str]],
) -> None:
    used = {name for expr in expressions() for name in METRIC_NAME.findall(expr)}
    assert used, "no daemon metric found: the pattern or the file changed"
    assert used - exported_names() == set()


def test_every_alert_has_a_runbook_naming_the_metric_it_uses() -> None:
    """Through a recording rule too: the runbook names the daemon's metric behind it."""
    rules = [rule for group in yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
             for rule in group["rules"]]  # fmt: skip
    recorded = {rule["record"]: rule["expr"] for rule in rules if "record" in rule}
    alerts = [rule for rule in rules if "alert" in rule]
    assert len(alerts) >= 8
    # An alert on ``up`` (Prometheus' own: a replica not answering) names that.
    for alert in alerts:
        expr = RECORDED.sub(lambda name: recorded[name.group()], alert["expr"])
        named = {HISTOGRAM_SERIES.sub("", name) for name in METRIC_NAME.findall(expr)} or {"up"}
        runbook = alert["annotations"]["runbook"]
        assert any(f"Metric: {name}" in runbook for name in named), alert["alert"]
        assert alert["annotations"]["summary"], alert["alert"]


ALERTMANAGER = DEPLOY / "alertmanager" / "alertmanager.yml"


@pytest.fixture(scope="module")
def amtool(require_binary: Callable[[str, str], str]) -> str:
    return require_binary("amtool", "prometheus-alertmanager")


def alerts_by_name() -> dict[str, dict[str, object]]:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"] if "alert" in rule}


def test_amtool_finds_the_alertmanager_example_valid(amtool: str) -> None:
    checked = subprocess.run(
        [amtool, "check-config", str(ALERTMANAGER)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout


@pytest.mark.parametrize(
    ("severity", "receiver"),
    [("critical", "playguard-pager"), ("warning", "playguard-chat"), ("info", "playguard-tickets")],
)
def test_each_severity_the_rules_use_is_routed(amtool: str, severity: str, receiver: str) -> None:
    assert severity in {rule["labels"]["severity"] for rule in alerts_by_name().values()}  # type: ignore[index]
    routed = subprocess.run(
        [amtool, "config", "routes", "test", "--config.file", str(ALERTMANAGER),
         f"severity={severity}", "alertname=PlayguardRedisDown"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert routed.stdout.split() == [receiver], routed.stdout + routed.stderr


def test_every_alert_an_inhibition_names_is_a_rule_and_carries_its_equal_labels() -> None:
    """An inhibition naming an alert that does not exist, or comparing a label its source keeps
    and a target drops (or the other way: Alertmanager compares a missing label as empty),
    silences nothing, silently."""
    config = yaml.safe_load(ALERTMANAGER.read_text(encoding="utf-8"))
    alerts = alerts_by_name()
    for inhibition in config["inhibit_rules"]:
        named: list[str] = []
        for matcher in [*inhibition["source_matchers"], *inhibition["target_matchers"]]:
            names = re.fullmatch(r'alertname=~?"([^"]+)"', matcher)
            assert names is not None, matcher
            named.extend(names[1].split("|"))
        for name in named:
            assert name in alerts, f"{name} in {inhibition}"
        for label in inhibition["equal"]:
            kept = {name: carries(str(alerts[name]["expr"]), label) for name in named}
            assert all(kept.values()), f"{label} dropped by some of {kept}: {inhibition}"


def carries(expr: str, label: str) -> bool:
    """Whether the series of ``expr`` keep ``label`` of what they aggregate (a recorded series
    as its recording rule made it)."""
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    recorded = {rule["record"]: rule["expr"] for group in groups for rule in group["rules"]
                if "record" in rule}  # fmt: skip
    for name, recording in recorded.items():
        if re.search(rf"(?<![\w:]){re.escape(name)}(?![\w:])", expr):
            expr = expr.replace(name, f"({recording})")
    if "absent(" in expr:
        return False
    aggregations = re.findall(r"\bby \(([^)]*)\)", expr)
    return all(re.search(rf"\b{label}\b", kept) for kept in aggregations)
