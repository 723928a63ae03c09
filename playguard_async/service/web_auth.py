"""The one credential of the HTTP endpoints, checked on every page and stream (and on /metrics when
``metrics_require_credential`` is set).

A browser sends it as the password of basic auth (it asks once, then sends it with every request
of the page, EventSource's stream included); a script or Prometheus sends
``Authorization: Bearer <it>``. The comparison is of bytes and constant-time
(``hmac.compare_digest``), so the time of a refusal tells nothing of how much of a guess was right.

A header is outside input down to its bytes: aiohttp hands over bytes that are not UTF-8 as lone
surrogates (``surrogateescape``), which ``str.encode`` refuses. Every header, whatever its bytes,
is therefore either the credential or a refusal, never an exception.
"""

from __future__ import annotations

import hmac

from aiohttp import BasicAuth

CHALLENGE = 'Basic realm="playguard", charset="UTF-8"'
"""What a refusal asks for: basic auth, which a browser can answer by itself."""

_OWS = " \t"
"""HTTP's optional white space around a header's parts (not ``str.strip``'s Unicode idea of it)."""


def offered_secret(authorization: str | None) -> bytes | None:
    """The secret an ``Authorization`` header offers, as the bytes that came on the wire (a bearer
    token, or basic auth's password whatever the user name, UTF-8 encoded); None when the header is
    absent, malformed, or offers an empty secret."""
    if not authorization:
        return None
    scheme, _, value = authorization.strip(_OWS).partition(" ")
    value = value.strip(_OWS)
    if not value:
        return None
    if scheme.lower() == "bearer":
        try:
            return value.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:  # a surrogate no HTTP parser makes: not a header's bytes
            return None
    if scheme.lower() != "basic":
        return None
    try:
        # ValueError covers a base64 that is not ASCII, malformed or without a colon, and a
        # password that is not UTF-8 (UnicodeError is a ValueError).
        password = BasicAuth.decode(f"Basic {value}", encoding="utf-8").password
    except ValueError:
        return None
    return password.encode("utf-8") if password else None


def admits(credential: str, authorization: str | None) -> bool:
    """Whether ``authorization`` carries ``credential``, compared in constant time."""
    offered = offered_secret(authorization)
    if offered is None:
        return False
    return hmac.compare_digest(offered, credential.encode("utf-8"))
