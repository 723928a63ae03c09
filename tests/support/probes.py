"""Looking at a running daemon the way operators' tools do: HTTP probes, Prometheus scrapes, and the
messages a service manager receives on its notify socket."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from playguard_lab import free_port
from tests.support.daemon import Daemon, DaemonRunner, wait_for

# Probes go to 127.0.0.1 only: a proxy from the environment must never see them.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

CYCLES = "playguard_cycles_total"


def http_get(url: str, *, timeout: float = 5.0) -> tuple[int, str]:
    """Status and body of a GET; an HTTP error status is returned, not raised."""
    try:
        with _OPENER.open(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read().decode()


@dataclass(frozen=True)
class Scrape:
    """One scrape of /metrics, parsed by prometheus-client's own parser."""

    samples: list[Sample]

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples called ``name`` whose labels include ``labels``; a name no
        sample has is an error, so a typo cannot pass as zero."""
        named = [sample for sample in self.samples if sample.name == name]
        assert named, f"no sample {name} in the scrape"
        return sum(
            sample.value
            for sample in named
            if all(sample.labels.get(key) == value for key, value in labels.items())
        )

    def label_values(self, name: str, label: str) -> set[str]:
        return {sample.labels[label] for sample in self.samples if sample.name == name}


def scrape(url: str) -> Scrape:
    status, text = http_get(url)
    assert status == 200, (status, text)
    return Scrape(
        [sample for family in text_string_to_metric_families(text) for sample in family.samples]
    )


class NotifySocket:
    """A service manager's end of the notify protocol: a datagram socket that collects messages."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.messages: list[dict[str, str]] = []
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.bind(str(path))
        self._socket.settimeout(0.05)

    def receive(self) -> list[dict[str, str]]:
        """Every message received so far, each as its assignments (``{"READY": "1", ...}``)."""
        while True:
            try:
                datagram = self._socket.recv(4096)
            except TimeoutError:
                return self.messages
            self.messages.append(
                dict(line.split("=", 1) for line in datagram.decode().splitlines())
            )

    def wait_for(
        self, predicate: Callable[[list[dict[str, str]]], bool], *, timeout: float, what: str
    ) -> list[dict[str, str]]:
        deadline = time.monotonic() + timeout
        while not predicate(self.receive()):
            if time.monotonic() >= deadline:
                raise AssertionError(f"no {what} within {timeout:g} s; got {self.messages}")
        return self.messages

    def close(self) -> None:
        self._socket.close()


@contextmanager
def notify_socket(path: Path) -> Iterator[NotifySocket]:
    listener = NotifySocket(path)
    try:
        yield listener
    finally:
        listener.close()


def start_serving(
    daemons: DaemonRunner, replica: str = "r1", **settings: Any
) -> tuple[Daemon, str]:
    """Start a daemon with its HTTP endpoints on a free loopback port: it and their base URL."""
    address = f"127.0.0.1:{free_port()}"
    daemon = daemons.start(replica, http_address=address, **settings)
    base = f"http://{address}"
    wait_for(lambda: _serving(daemon, base), timeout=20, what=f"HTTP endpoints of {replica}")
    return daemon, base


def _serving(daemon: Daemon, base: str) -> bool:
    assert daemon.process.poll() is None, f"daemon exited:\n{daemon.stderr_tail()}"
    try:
        http_get(f"{base}/healthz", timeout=1)
    except OSError:
        return False
    return True


def scrape_until(base: str, done: Callable[[Scrape], bool], *, what: str) -> Scrape:
    def probe() -> Scrape | None:
        metrics = scrape(f"{base}/metrics")
        return metrics if done(metrics) else None

    return wait_for(probe, timeout=20, what=what, interval=0.2)


def answer_once(base: str, path: str, status: int) -> str:
    """The body ``path`` answers once it answers with ``status``."""

    def probe() -> str | None:
        answered, body = http_get(f"{base}{path}")
        return body if answered == status else None

    return wait_for(probe, timeout=10, what=f"{path} answering {status}", interval=0.1)
