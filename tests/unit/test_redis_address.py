"""redis_url's forms: what each one names, and one-line refusals that never quote a password."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from playguard_async.coordination.address import RedisAddress, parse_redis_url
from playguard_async.settings import SettingsError, load_settings


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://h", RedisAddress("single", False, (("h", 6379),))),
        ("rediss://u:p@h:6380/2", RedisAddress("single", True, (("h", 6380),), 2, "", "u", "p")),
        ("redis://[::1]:7000/", RedisAddress("single", False, (("::1", 7000),))),
        ("redis://s%40cret@h", RedisAddress("single", False, (("h", 6379),), password="s@cret")),
        (
            "redis+sentinel://a:26380,b/mymaster/3",
            RedisAddress("sentinel", False, (("a", 26380), ("b", 26379)), 3, "mymaster"),
        ),
        (
            "rediss+sentinel://:pw@a:1/svc",
            RedisAddress("sentinel", True, (("a", 1),), 0, "svc", None, "pw"),
        ),
        (
            "redis+cluster://a:7000,b:7001,[::1]:7002",
            RedisAddress("cluster", False, (("a", 7000), ("b", 7001), ("::1", 7002))),
        ),
        (
            "rediss+cluster://u:p@a:7000/0",
            RedisAddress("cluster", True, (("a", 7000),), 0, "", "u", "p"),
        ),
    ],
)
def test_each_form_names_its_mode_nodes_and_credentials(url: str, expected: RedisAddress) -> None:
    assert parse_redis_url(url) == expected


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("redis+sentinel://a:1", "names its service"),
        ("redis+sentinel://a:1/bad name", "names its service"),
        ("redis+sentinel://a:1/svc/x", "names its service"),
        ("redis+cluster://a:1/3", "only DB 0"),
        ("redis+cluster://a:1?x=1", "only DB 0"),
        ("redis+cluster://a:1,,b:2", "is not HOST[:PORT]"),
        ("redis+cluster://a:99999", "port must be a number"),
        ("redis+cluster://", "is not HOST[:PORT]"),
        ("redis+mongo://a", "must be redis://"),
        ("redis://a,b:1", "is not HOST[:PORT]"),
    ],
)
def test_malformed_topology_urls_are_one_line_naming_the_url(url: str, reason: str) -> None:
    with pytest.raises(SettingsError) as error:
        load_settings(None, redis_url=url)
    [problem] = str(error.value).removeprefix("invalid settings: ").splitlines()
    assert "redis_url = " in problem
    assert reason in problem


@given(st.sampled_from(["redis+sentinel", "redis+cluster", "rediss+cluster"]), st.text(min_size=1))
def test_a_password_never_shows_in_an_error_or_a_repr(scheme: str, password: str) -> None:
    secret = f"Zq7{password}s3cr3t"
    for url in (f"{scheme}://u:{secret}@a:1,b:2/svc", f"{scheme}://{secret}@a:x"):
        try:
            address = parse_redis_url(url)
        except ValueError as error:
            said = str(error)
        else:
            said = f"{address!r} {address.display()}"
        assert secret not in said


def test_display_shows_mode_and_nodes_without_credentials() -> None:
    address = parse_redis_url("rediss+sentinel://u:hunter2@a:1,[::1]:2/svc/1")
    assert address.display() == "sentinel a:1,[::1]:2 service svc db 1 (TLS)"
