"""The trace settings: where traces may go (plain http only on loopback), headers kept secret,
and OpenTelemetry loaded only when an endpoint is set."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from playguard_async.service.wiring import build_engine
from playguard_async.settings import SettingsError, load_settings

SECRET = "Bearer s3cr3t-otlp-token"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("PLAYGUARD_", "OTEL_")):
            monkeypatch.delenv(name)


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://127.0.0.1:4318/v1/traces",
        "http://[::1]:4318/v1/traces",
        "http://localhost:4318/v1/traces",
        "https://collector.example.net/v1/traces",
    ],
)
def test_an_endpoint_on_loopback_or_over_https_is_taken(
    monkeypatch: pytest.MonkeyPatch, endpoint: str
) -> None:
    monkeypatch.setenv("PLAYGUARD_OTLP_ENDPOINT", endpoint)
    assert load_settings().otlp_endpoint == endpoint


@pytest.mark.parametrize(
    ("endpoint", "why"),
    [
        ("http://collector.example.net/v1/traces", "beyond loopback: use https://"),
        ("ftp://127.0.0.1/v1/traces", "http:// or https://"),
        ("https://user:pw@collector.example.net/v1/traces", "no credentials in the URL"),
    ],
)
def test_an_endpoint_beyond_loopback_in_clear_text_is_refused(
    monkeypatch: pytest.MonkeyPatch, endpoint: str, why: str
) -> None:
    monkeypatch.setenv("PLAYGUARD_OTLP_ENDPOINT", endpoint)
    with pytest.raises(SettingsError, match="otlp_endpoint") as raised:
        load_settings()
    assert why in str(raised.value)


def test_headers_are_a_secret_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLAYGUARD_OTLP_HEADERS", f"authorization={SECRET}")
    settings = load_settings()
    assert settings.otlp_headers is not None
    assert settings.otlp_headers.get_secret_value() == f"authorization={SECRET}"
    assert SECRET not in repr(settings)
    assert SECRET not in str(settings.model_dump())


def test_malformed_headers_are_refused_without_their_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PLAYGUARD_OTLP_HEADERS", f"x-key=1,{SECRET}")
    with pytest.raises(SettingsError, match="pair 2 is not name=value") as raised:
        load_settings()
    assert SECRET not in str(raised.value)


BUILD_ENGINE = textwrap.dedent(
    """
    import sys
    from playguard_async.settings import load_settings
    from playguard_async.service.daemon import serve  # everything the daemon imports
    from playguard_async.service.wiring import build_engine
    engine = build_engine(load_settings())
    ours = ("playguard_async.service.tracing", "opentelemetry.sdk.trace", "opentelemetry.exporter")
    print(sorted(name for name in sys.modules if name.startswith(ours)))
    """
)
"""Prints the tracing modules loaded once the daemon's engine is built. Not every
``opentelemetry`` module: redis-py (8.x) imports OpenTelemetry's API and metrics SDK itself
whenever they are installed, for metrics of its own that we leave off."""


def engine_built_imports(tmp_path: Path, **environment: str) -> str:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("marquees: {}\n", encoding="utf-8")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PLAYGUARD_", "OTEL_"))
    }
    env |= {"PLAYGUARD_INVENTORY": str(inventory), **environment}
    done = subprocess.run(
        [sys.executable, "-c", BUILD_ENGINE],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_without_an_endpoint_no_tracing_module_is_imported(tmp_path: Path) -> None:
    assert engine_built_imports(tmp_path) == "[]"


def test_with_an_endpoint_the_engine_traces(tmp_path: Path) -> None:
    loaded = engine_built_imports(tmp_path, PLAYGUARD_OTLP_ENDPOINT="http://127.0.0.1:9/v1/traces")
    assert "'playguard_async.service.tracing'" in loaded
    assert "'opentelemetry.exporter.otlp.proto.http.trace_exporter'" in loaded


def test_an_endpoint_without_opentelemetry_installed_is_a_settings_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("marquees: {}\n", encoding="utf-8")
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    monkeypatch.delitem(sys.modules, "playguard_async.service.tracing", raising=False)
    settings = load_settings(inventory=inventory, otlp_endpoint="http://127.0.0.1:4318/v1/traces")
    with pytest.raises(SettingsError, match=r"install playguard_async\[tracing\]"):
        build_engine(settings)
