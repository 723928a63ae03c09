"""The alerting rules we ship, on the real servers: Debian's Prometheus scrapes a daemon and
evaluates ``deploy/prometheus/playguard.rules.yml`` (its ``for:`` shortened, as
``playguard_lab.monitoring.shortened_rules`` documents), Debian's Alertmanager tells a webhook.
A Marquee's sshd black-holed fires PlayguardMarqueeNotConverged there; lifted, resolves it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from playguard_lab import SshServer
from playguard_lab.monitoring import (
    AlertmanagerServer,
    PrometheusServer,
    WebhookReceiver,
    shortened_rules,
)
from tests.support.daemon import DaemonRunner, wait_for
from tests.support.fault_proxy import ThreadedProxy
from tests.support.probes import start_serving
from tests.support.world import ssh_marquee, ssh_marquee_through

NOT_CONVERGED = "PlayguardMarqueeNotConverged"


def told(receiver: WebhookReceiver, status: str) -> list[dict[str, Any]]:
    return [
        alert
        for alert in receiver.alerts
        if alert["labels"]["alertname"] == NOT_CONVERGED and alert["status"] == status
    ]


def test_a_black_holed_marquee_pages_through_alertmanager_and_resolves_once_lifted(
    daemons: DaemonRunner,
    ssh_server: SshServer,
    tmp_path: Path,
    require_binary: Callable[[str, str], str],
) -> None:
    require_binary("prometheus", "prometheus")
    require_binary("prometheus-alertmanager", "prometheus-alertmanager")
    with ThreadedProxy(ssh_server.host, ssh_server.port) as proxy, WebhookReceiver() as receiver:
        daemons.write_inventory(
            ["edge-1", "fine-1"],
            lambda name: (
                ssh_marquee_through(ssh_server, proxy.port, name, tmp_path / name)
                if name == "edge-1"
                else ssh_marquee(ssh_server, name, tmp_path / name)
            ),
        )
        daemon, base = start_serving(
            daemons,
            phases=["tests.support.phases:remote_probe"],
            tick_interval=0.5,
            tick_jitter=0.0,
        )
        rules = shortened_rules(tmp_path / "rules.yml", for_seconds=2)
        with (
            AlertmanagerServer(tmp_path / "alertmanager", receiver.url) as alertmanager,
            PrometheusServer(
                tmp_path / "prometheus",
                targets=[base.removeprefix("http://")],
                rules=rules,
                alertmanager=alertmanager.address,
            ) as prometheus,
        ):
            proxy.cut()
            firing = wait_for(
                lambda: told(receiver, "firing"), timeout=60, what="the alert at the webhook"
            )
            assert {alert["labels"]["marquee"] for alert in firing} == {"edge-1"}
            labels = firing[0]["labels"]
            assert labels["reason"] == "failing"
            assert "outcome" not in labels, "a label that changes cycle to cycle re-fires the alert"
            assert "playguard_marquee_not_ok" in firing[0]["annotations"]["runbook"]
            assert "playguard describe edge-1" in firing[0]["annotations"]["runbook"]
            held = {alert["labels"]["alertname"] for alert in prometheus.alerts()}
            assert held == {NOT_CONVERGED}, "nothing else fires on a replica that is fine"

            proxy.heal()
            resolved = wait_for(
                lambda: told(receiver, "resolved"), timeout=60, what="the alert resolved"
            )
            assert {alert["labels"]["marquee"] for alert in resolved} == {"edge-1"}
            wait_for(lambda: not prometheus.alerts(), timeout=30, what="no alert left")
    assert daemons.stop_all([daemon], timeout=10) == {"r1": 0}
