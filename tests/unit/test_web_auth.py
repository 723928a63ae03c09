"""Every ``Authorization`` header, whatever its bytes, is the credential or a refusal, never an
exception: headers as aiohttp hands them over (bytes that are not UTF-8 as lone surrogates),
generated over whole classes of input."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from playguard_async.service.web_auth import admits, offered_secret

CREDENTIAL = "s3cret"


def as_aiohttp_reads(raw: bytes) -> str:
    """A header value's bytes as aiohttp's parser gives them to a handler."""
    return raw.decode("utf-8", "surrogateescape")


def basic_of(raw: bytes) -> bytes:
    return b"Basic " + base64.b64encode(raw)


HIGH_BYTES = [bytes([value]) for value in range(0x80, 0x100)]
CONTROL_BYTES = [bytes([value]) for value in [*range(0x20), 0x7F] if value != 0x09]
"""C0 controls and DEL; HTAB is HTTP's white space around a value (stripped, as a space is)."""


@pytest.mark.parametrize("byte", HIGH_BYTES + CONTROL_BYTES, ids=lambda b: f"0x{b[0]:02x}")
@pytest.mark.parametrize(
    "shape",
    [
        lambda b: b"Bearer " + b,
        lambda b: b"Bearer " + CREDENTIAL.encode() + b,
        lambda b: b"Bearer " + b + b"\xfe" + b,
        lambda b: b"Basic " + b,
        lambda b: b"Basic dXNlcjpz" + b + b"M2NyZXQ=",
        lambda b: basic_of(b"user:" + b),
        lambda b: basic_of(b"user:" + CREDENTIAL.encode() + b),
        lambda b: basic_of(b + b":" + CREDENTIAL.encode() + b),
        lambda b: b + b" " + CREDENTIAL.encode(),
    ],
    ids=[
        "bearer-byte",
        "bearer-credential-then-byte",
        "bearer-bytes",
        "basic-raw-byte",
        "basic-byte-inside-base64",
        "basic-password-byte",
        "basic-credential-then-byte",
        "basic-user-and-password-bytes",
        "byte-as-scheme",
    ],
)
def test_any_byte_in_a_token_is_a_refusal_not_an_exception(byte: bytes, shape: object) -> None:
    header = as_aiohttp_reads(shape(byte))  # type: ignore[operator]
    assert admits(CREDENTIAL, header) is False


@pytest.mark.parametrize(
    "header",
    [
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
    ],
    ids=lambda header: repr(header[:40]),
)
def test_empty_huge_schemeless_wrong_scheme_and_malformed_headers_are_refused(
    header: str,
) -> None:
    assert admits(CREDENTIAL, header) is False


@pytest.mark.parametrize("credential", ["s3cret", "correct horse", "pässwörd", "ключ"])
def test_the_credential_is_admitted_as_bearer_and_as_basic_password(credential: str) -> None:
    raw = credential.encode()
    assert admits(credential, as_aiohttp_reads(b"Bearer " + raw))
    assert admits(credential, as_aiohttp_reads(basic_of(b"anyone:" + raw)))
    assert admits(credential, as_aiohttp_reads(basic_of(b":" + raw)))
    assert not admits(credential, as_aiohttp_reads(b"Bearer " + raw[:-1]))


def test_a_lone_surrogate_no_parser_makes_is_refused() -> None:
    assert offered_secret("Bearer \ud800") is None
    assert offered_secret("Basic \ud800") is None


@given(st.binary(max_size=300))
def test_generated_header_bytes_are_never_an_exception(raw: bytes) -> None:
    for header in (raw, b"Bearer " + raw, b"Basic " + raw, basic_of(raw)):
        admitted = admits(CREDENTIAL, as_aiohttp_reads(header))
        assert admitted is (offered_secret(as_aiohttp_reads(header)) == CREDENTIAL.encode())


@given(st.text(max_size=200))
def test_generated_text_is_never_an_exception(text: str) -> None:
    for header in (text, f"Bearer {text}", f"Basic {text}"):
        assert isinstance(admits(CREDENTIAL, header), bool)
