"""Every ``Authorization`` header, whatever its bytes, is a user and password offered or a
refusal, never an exception: headers as aiohttp hands them over (bytes that are not UTF-8 as lone
surrogates), generated over whole classes of input. Bearer tokens are no longer a credential."""

from __future__ import annotations

import base64
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from playguard_async.web.auth import offered_basic

CREDENTIAL = "s3cret"
OFFERED = ("user", CREDENTIAL)


def admits(header: str | None) -> bool:
    """Whether ``header`` offers exactly user ``user`` with ``CREDENTIAL``."""
    return offered_basic(header) == OFFERED


def as_aiohttp_reads(raw: bytes) -> str:
    """A header value's bytes as aiohttp's parser gives them to a handler."""
    return raw.decode("utf-8", "surrogateescape")


def basic_of(raw: bytes) -> bytes:
    return b"Basic " + base64.b64encode(raw)


HIGH_BYTES = [bytes([value]) for value in range(0x80, 0x100)]
CONTROL_BYTES = [bytes([value]) for value in [*range(0x20), 0x7F] if value != 0x09]
"""C0 controls and DEL; HTAB is HTTP's white space around a value (stripped, as a space is)."""


TOKEN_SHAPES: dict[str, Callable[[bytes], bytes]] = {
    "bearer-byte": lambda b: b"Bearer " + b,
    "bearer-credential-then-byte": lambda b: b"Bearer " + CREDENTIAL.encode() + b,
    "bearer-bytes": lambda b: b"Bearer " + b + b"\xfe" + b,
    "basic-raw-byte": lambda b: b"Basic " + b,
    "basic-byte-inside-base64": lambda b: b"Basic dXNlcjpz" + b + b"M2NyZXQ=",
    "basic-password-byte": lambda b: basic_of(b"user:" + b),
    "basic-credential-then-byte": lambda b: basic_of(b"user:" + CREDENTIAL.encode() + b),
    "basic-user-and-password-bytes": lambda b: basic_of(b + b":" + CREDENTIAL.encode() + b),
    "byte-as-scheme": lambda b: b + b" " + CREDENTIAL.encode(),
}


def test_any_byte_in_a_token_is_a_refusal_not_an_exception() -> None:
    outcomes: dict[tuple[str, bytes], bool | str] = {}
    for byte in HIGH_BYTES + CONTROL_BYTES:
        for shape, make in TOKEN_SHAPES.items():
            try:
                outcomes[shape, byte] = admits(as_aiohttp_reads(make(byte)))
            except Exception as exc:  # what is asserted: none escapes
                outcomes[shape, byte] = repr(exc)
    assert {key: outcome for key, outcome in outcomes.items() if outcome is not False} == {}


MALFORMED = [
    "",
    " ",
    "Bearer",
    "Bearer ",
    "Bearer \t ",
    "Basic",
    "Basic ",
    CREDENTIAL,
    f"Token {CREDENTIAL}",
    f"Digest {CREDENTIAL}",
    f"Bearer{CREDENTIAL}",
    "Basic !!!notbase64",
    "Basic " + base64.b64encode(b"no-colon").decode(),
    "Basic " + base64.b64encode(b"user:").decode(),
    "Basic " + base64.b64encode(b"user:s3cret").decode()[:-1],
    "Basic " + base64.b64encode(b"u:\xff\xfe").decode(),
    "Basic " + base64.b64encode("u:s3cret".encode("utf-16")).decode(),
    "Bearer " + "x" * 1_000_000,
    "Basic " + "QUFB" * 250_000,
    "Basic \udcff\udcfe",
    "Basic ünïcode",
    "Basic czNjcmV0\udcff",
]
"""Empty, schemeless, wrong-scheme, malformed, not ASCII, huge."""


def test_empty_huge_schemeless_wrong_scheme_and_malformed_headers_are_refused() -> None:
    outcomes: dict[str, bool | str] = {}
    for header in MALFORMED:
        try:
            outcomes[header[:40]] = admits(header)
        except Exception as exc:  # what is asserted: none escapes
            outcomes[header[:40]] = repr(exc)
    assert {header: outcome for header, outcome in outcomes.items() if outcome is not False} == {}


def test_basic_auth_offers_user_and_password_in_any_script_and_bearer_offers_nothing() -> None:
    for credential in ("s3cret", "correct horse", "pässwörd", "ключ", "pa:ss"):
        raw = credential.encode()
        assert offered_basic(as_aiohttp_reads(basic_of(b"anyone:" + raw))) == ("anyone", credential)
        assert offered_basic(as_aiohttp_reads(b"Bearer " + raw)) is None
        assert offered_basic(as_aiohttp_reads(basic_of(b":" + raw))) is None  # no user name


def test_a_lone_surrogate_no_parser_makes_is_refused() -> None:
    assert offered_basic("Basic \ud800") is None


# No deadline: on a machine other test runs share, one example's time says nothing.
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_generated_header_bytes_are_never_an_exception(raw: bytes) -> None:
    for header in (raw, b"Bearer " + raw, b"Basic " + raw, basic_of(raw)):
        offered = offered_basic(as_aiohttp_reads(header))
        assert offered is None or (isinstance(offered, tuple) and all(offered))


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=200))
def test_generated_text_is_never_an_exception(text: str) -> None:
    for header in (text, f"Bearer {text}", f"Basic {text}"):
        assert isinstance(admits(header), bool)
