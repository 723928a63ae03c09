"""The web view's one credential, checked on every page and stream.

A browser sends it as the password of basic auth (it asks once, then sends it with every request
of the page, EventSource's stream included); a script sends ``Authorization: Bearer <it>``. The
comparison is constant-time (``hmac.compare_digest``), so the time of a refusal tells nothing of
how much of a guess was right.
"""

from __future__ import annotations

import base64
import binascii
import hmac

CHALLENGE = 'Basic realm="playguard", charset="UTF-8"'
"""What a refusal asks for: basic auth, which a browser can answer by itself."""


def offered_secret(authorization: str | None) -> str | None:
    """The secret an ``Authorization`` header offers (a bearer token, or basic auth's password
    whatever the user name), None when the header is absent or malformed."""
    if not authorization:
        return None
    scheme, _, value = authorization.strip().partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer":
        return value or None
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    _, colon, password = decoded.partition(":")
    return password if colon and password else None


def admits(credential: str, authorization: str | None) -> bool:
    """Whether ``authorization`` carries ``credential``, compared in constant time."""
    offered = offered_secret(authorization)
    if offered is None:
        return False
    return hmac.compare_digest(offered.encode("utf-8"), credential.encode("utf-8"))
