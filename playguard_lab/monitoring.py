"""Debian's Prometheus and Alertmanager on loopback, and a webhook receiver, so the alerting rules
we ship (``deploy/prometheus/``) are proven on the real servers: a scrape of a lab daemon, the
rules evaluated, the alert sent to Alertmanager and on to a receiver.

The rules' ``for:`` durations are minutes, made for 60 s ticks; ``shortened_rules`` is the
documented override that makes every ``for:`` a few seconds, so a test sees an alert fire and
resolve in its own time. Alertmanager's clustering is switched off: it would listen on every
address (port 9094) and gossip.
"""

from __future__ import annotations

import http.client
import http.server
import json
import re
import threading
import urllib.parse
from pathlib import Path
from typing import Any, Self

from playguard_lab.process import LabServer, find_binary, free_port

RULES = Path(__file__).resolve().parent.parent / "deploy" / "prometheus" / "playguard.rules.yml"
"""The rules we ship, as an operator loads them."""


def shortened_rules(into: Path, *, for_seconds: int) -> Path:
    """The shipped rules with every ``for:`` made ``for_seconds``, written to ``into``."""
    text = re.sub(
        r"^(\s+for:) \S+$", rf"\1 {for_seconds}s", RULES.read_text(encoding="utf-8"), flags=re.M
    )
    into.write_text(text, encoding="utf-8")
    return into


def _ready(port: int) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1.0)
    try:
        connection.request("GET", "/-/ready")
        return connection.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


class AlertmanagerServer(LabServer):
    """prometheus-alertmanager (0.25) sending every alert, and its resolution, to ``webhook``
    at once (group wait and interval of 1 s)."""

    name = "alertmanager"

    def __init__(self, workdir: Path, webhook: str) -> None:
        super().__init__(workdir)
        self._binary = find_binary("prometheus-alertmanager", "prometheus-alertmanager")
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.webhook = webhook
        self.config = self.workdir / "alertmanager.yml"

    def _prepare(self) -> None:
        config = {
            "route": {
                "receiver": "lab",
                "group_by": ["alertname", "marquee"],
                "group_wait": "1s",
                "group_interval": "1s",
                "repeat_interval": "1h",
            },
            "receivers": [
                {"name": "lab", "webhook_configs": [{"url": self.webhook, "send_resolved": True}]}
            ],
        }
        self.config.write_text(json.dumps(config, indent=2) + "\n")  # JSON is YAML

    def _command(self) -> list[str]:
        return [
            self._binary,
            f"--config.file={self.config}",
            f"--storage.path={self.workdir / 'data'}",
            f"--web.listen-address={self.address}",
            "--cluster.listen-address=",
        ]

    def _ready(self) -> bool:
        return _ready(self.port)


class PrometheusServer(LabServer):
    """Prometheus (2.42) scraping ``targets`` as job ``playguard`` every second, evaluating
    ``rules`` every second and sending alerts to ``alertmanager``."""

    name = "prometheus"
    start_timeout = 30.0

    def __init__(
        self, workdir: Path, *, targets: list[str], rules: Path, alertmanager: str
    ) -> None:
        super().__init__(workdir)
        self._binary = find_binary("prometheus", "prometheus")
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.config = self.workdir / "prometheus.yml"
        self._targets, self._rules, self._alertmanager = targets, rules, alertmanager

    def _prepare(self) -> None:
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(self._rules)],
            "alerting": {
                "alertmanagers": [{"static_configs": [{"targets": [self._alertmanager]}]}]
            },
            "scrape_configs": [
                {"job_name": "playguard", "static_configs": [{"targets": self._targets}]}
            ],
        }
        self.config.write_text(json.dumps(config, indent=2) + "\n")

    def _command(self) -> list[str]:
        return [
            self._binary,
            f"--config.file={self.config}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address={self.address}",
            "--rules.alert.resend-delay=1s",
        ]

    def _ready(self) -> bool:
        return _ready(self.port)

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts Prometheus holds now (pending and firing), from its API."""
        alerts: list[dict[str, Any]] = self._api("/api/v1/alerts")["alerts"]
        return alerts

    def query(self, expression: str) -> list[dict[str, Any]]:
        """The series of an instant query of ``expression`` now (empty: none, or false)."""
        found: list[dict[str, Any]] = self._api(
            "/api/v1/query?" + urllib.parse.urlencode({"query": expression})
        )["result"]
        return found

    def _api(self, path: str) -> dict[str, Any]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5.0)
        try:
            connection.request("GET", path)
            data: dict[str, Any] = json.loads(connection.getresponse().read())["data"]
            return data
        finally:
            connection.close()


class WebhookReceiver:
    """An HTTP server on 127.0.0.1 in a thread of its own keeping every alert Alertmanager
    posts to it (``with WebhookReceiver() as receiver: ... receiver.alerts``)."""

    def __init__(self) -> None:
        self.alerts: list[dict[str, Any]] = []
        received = self.alerts

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.extend(json.loads(body)["alerts"])
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
