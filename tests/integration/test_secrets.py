"""Known secret values fed through every configuration route never appear in any output.

Routes: the Redis password in the TOML file, in ``PLAYGUARD_REDIS_PASSWORD`` and in the URL (with
the characters that fool URL parsers); the registry password from its password file. Outputs: every
operator command's stdout and stderr, plain and with ``--debug`` (debug-level console logs and
tracebacks), a debug-level JSON daemon log, the values in Redis, and the process list of the host
while a cycle runs there (the lab's Marquee is this machine).
"""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiodocker.utils import compose_auth_header
from redis import Redis as SyncRedis

from playguard_lab import RedisServer, RegistryServer
from tests.support.cli import Playguard
from tests.support.daemon import marquee_entry, wait_for, within_lease
from tests.support.world import LabWorld

pytestmark = pytest.mark.integration

# The command runner and the lab's Marquee configured for cycles, as test_cli makes them.

REDIS_SECRETS = {
    "toml": "Toml-s3cret-7Q",
    "env": "Env-s3cret-9W",
    "url": "Url#s3cret/?@4Z",
}
OPERATOR_COMMANDS = [("status",), ("locks",), ("unlock", "m1"), ("unlock", "m1", "--force"),
                     ("check", "--timeout", "2"), ("cycle", "m1")]  # fmt: skip


def forms(secret: str) -> list[str]:
    """The secret and the encodings it could leak in."""
    from urllib.parse import quote  # noqa: PLC0415

    return [secret, quote(secret, safe=""), base64.b64encode(secret.encode()).decode()]


def assert_absent(secrets: list[str], where: str, text: str) -> None:
    for secret in secrets:
        for form in forms(secret):
            assert form not in text, f"{form!r} found in {where}"


@pytest.mark.parametrize("route", sorted(REDIS_SECRETS))
def test_the_redis_password_appears_in_no_command_output(
    playguard: Playguard, live_redis_server: RedisServer, store: SyncRedis, route: str
) -> None:
    secret = REDIS_SECRETS[route]
    settings: dict[str, object] = {}
    env: dict[str, str] = {}
    if route == "toml":
        settings["redis_password"] = secret
    elif route == "env":
        env["PLAYGUARD_REDIS_PASSWORD"] = secret
    else:
        # Percent-encoded as settings require, and once raw, which settings must refuse unshown.
        encoded = forms(secret)[1]
        settings["redis_url"] = f"redis://app:{encoded}@127.0.0.1:{live_redis_server.port}/0"
    playguard.configure({"marquees": [marquee_entry("m1")]}, **settings)
    outputs = []
    for args in OPERATOR_COMMANDS:
        for debug in ((), ("--debug",)):
            done = run_with(playguard, (*debug, *args), env)
            outputs.append((f"{debug} {args}", done.stdout + done.stderr))
    if route == "url":
        raw = f"redis://app:{secret}@127.0.0.1:{live_redis_server.port}/0"
        done = run_with(playguard, ("--debug", "status"), {"PLAYGUARD_REDIS_URL": raw})
        assert "percent-encoded" in done.stderr
        outputs.append(("raw url", done.stdout + done.stderr))
    for where, text in outputs:
        assert_absent([secret], where, text)
    assert_absent([secret], "Redis", redis_dump(store))


def run_with(
    playguard: Playguard, args: tuple[str, ...], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        playguard.argv(args),
        capture_output=True,
        text=True,
        env={**playguard.runner.environment(phase_seconds=0.1), **env},
        cwd=playguard.runner.workdir,
        timeout=90,
        check=False,
    )


def redis_dump(store: SyncRedis) -> str:
    """Every key and value in the lab Redis, as text."""
    parts = []
    for key in store.scan_iter(count=1000):
        raw_kind = store.type(key)
        kind = raw_kind.decode() if isinstance(raw_kind, bytes) else str(raw_kind)
        value: object = kind
        if kind == "string":
            value = store.get(key)
        elif kind == "list":
            value = store.lrange(key, 0, -1)
        elif kind == "zset":
            value = store.zrange(key, 0, -1)
        parts.append(f"{key!r} {value!r}")
    return "\n".join(parts)


@pytest.fixture
def process_list() -> Iterator[list[str]]:
    """Every command line seen on this machine (the lab's Marquee) while the test runs."""
    seen: set[str] = set()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    seen.add(cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
                except OSError:
                    continue
            stop.wait(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    lines: list[str] = []
    try:
        yield lines
    finally:
        stop.set()
        watcher.join(5)
        lines.extend(sorted(seen))


def test_registry_credentials_appear_in_no_log_redis_value_or_host_process(
    playguard: Playguard, lab: LabWorld, registry: RegistryServer, store: SyncRedis,
    process_list: list[str],
) -> None:  # fmt: skip
    secret = registry.password
    header = compose_auth_header({"username": registry.username, "password": secret})
    debug_cycle = playguard("--debug", "cycle", "edge-1")
    assert debug_cycle.returncode == 0, debug_cycle.stdout + debug_cycle.stderr
    assert "refresh_credentials" in debug_cycle.stdout

    config = playguard.runner.write_settings(
        "json-debug",
        within_lease(
            {**json.loads(json.dumps(lab_settings(playguard))), "log_format": "json",
             "log_level": "debug", "tick_interval": 60.0, "replica_id": "secrets"}
        ),
    )  # fmt: skip
    store.delete("playguard:cycles:{edge-1}:last")
    daemon = subprocess.Popen(
        [*playguard.argv(("run",))[:-2], "--config", str(config)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=playguard.runner.environment(phase_seconds=0.1), cwd=playguard.runner.workdir,
    )  # fmt: skip
    try:
        wait_for(lambda: store.get("playguard:cycles:{edge-1}:last"), timeout=60, what="a cycle")
    finally:
        daemon.send_signal(signal.SIGTERM)
        out, err = daemon.communicate(timeout=60)
    assert '"event": "cycle.finished"' in err

    for where, text in [
        ("--debug cycle", debug_cycle.stdout + debug_cycle.stderr),
        ("json daemon log", out + err),
        ("Redis", redis_dump(store)),
        ("host processes", "\n".join(process_list)),
    ]:
        assert_absent([secret], where, text)
        assert header not in text, where


def lab_settings(playguard: Playguard) -> dict[str, object]:
    """The values of the lab's settings file, as the ``lab`` fixture wrote them."""
    import tomllib  # noqa: PLC0415

    assert playguard.config is not None
    return tomllib.loads(playguard.config.read_text(encoding="utf-8"))
