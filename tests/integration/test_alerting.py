"""The alerting rules we ship, on the real servers: Debian's Prometheus scrapes a daemon and
evaluates ``deploy/prometheus/playguard.rules.yml`` (its ``for:`` shortened, as
``playguard_lab.monitoring.shortened_rules`` documents), Debian's Alertmanager tells a webhook.
A Marquee's sshd black-holed fires PlayguardMarqueeNotConverged there; lifted, resolves it. Redis
SIGSTOPped under the daemon fires PlayguardRedisDown, one alert for the replica, and no
per-Marquee alert, though every Marquee's series says it is not ok; Redis back, it resolves."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from playguard_lab import RedisServer, SshServer
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
REDIS_DOWN = "PlayguardRedisDown"


def told(
    receiver: WebhookReceiver, status: str, alertname: str = NOT_CONVERGED
) -> list[dict[str, Any]]:
    return [
        alert
        for alert in receiver.alerts
        if alert["labels"]["alertname"] == alertname and alert["status"] == status
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


def test_a_redis_outage_is_one_redis_down_alert_and_no_per_marquee_page(
    daemons: DaemonRunner, tmp_path: Path, require_binary: Callable[[str, str], str]
) -> None:
    require_binary("prometheus", "prometheus")
    require_binary("prometheus-alertmanager", "prometheus-alertmanager")
    redis = RedisServer(tmp_path / "own-redis")
    redis.start()
    try:
        with WebhookReceiver() as receiver:
            daemons.write_inventory(["m1", "m2", "m3"])
            daemon, base = start_serving(
                daemons, redis_url=redis.url, tick_interval=0.5, tick_jitter=0.0
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
                wait_for(
                    lambda: prometheus.query("playguard_redis_up == 1"),
                    timeout=30,
                    what="a scrape of the replica with Redis answering",
                )
                redis.pause()
                try:
                    firing = wait_for(
                        lambda: told(receiver, "firing", REDIS_DOWN),
                        timeout=60,
                        what="PlayguardRedisDown at the webhook",
                    )
                    # What a per-Marquee alert reads is there: each Marquee not ok 3 cycles on.
                    wait_for(
                        lambda: len(prometheus.query("playguard_marquee_not_ok >= 3")) == 3,
                        timeout=30,
                        what="every Marquee's series not ok for 3 cycles",
                    )
                    held = alerts_held_for(prometheus, seconds=8.0)
                finally:
                    redis.resume()
                assert {alert["labels"]["instance"] for alert in firing} == {
                    base.removeprefix("http://")
                }
                assert "playguard_redis_up" in firing[0]["annotations"]["runbook"]
                assert held == {REDIS_DOWN}, "one cause, one alert"
                wait_for(
                    lambda: told(receiver, "resolved", REDIS_DOWN),
                    timeout=60,
                    what="PlayguardRedisDown resolved",
                )
            assert told(receiver, "firing") == [], "no Marquee paged for Redis"
    finally:
        redis.stop()
    assert daemons.stop_all([daemon], timeout=10) == {"r1": 0}


def alerts_held_for(prometheus: PrometheusServer, *, seconds: float) -> set[str]:
    """Every alert Prometheus held (pending or firing) at any look over ``seconds``."""
    held: set[str] = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        held |= {alert["labels"]["alertname"] for alert in prometheus.alerts()}
        time.sleep(0.5)
    return held
