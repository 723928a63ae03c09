"""Addresses as the settings write them: an HTTP ``HOST:PORT``, whether a host is loopback, and a
URL with its credentials masked for logs, errors and status output."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit


def is_loopback(host: str) -> bool:
    """Whether ``host`` (from ``parse_http_address``) binds loopback only: ``localhost`` or a
    loopback address; any other name may resolve beyond the machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_http_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[V6]:PORT`` for IPv6) as a host and a port; ValueError when malformed.

    The host is required: binding every interface must be asked for (``0.0.0.0:9464``), never the
    accident of a missing host.
    """
    try:
        parts = urlsplit(f"//{address}")
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ValueError(f"must be HOST:PORT with a port from 0 to 65535 ({exc})") from None
    if not host or port is None or parts.path or parts.query or parts.fragment or parts.username:
        raise ValueError("must be HOST:PORT, e.g. 127.0.0.1:9464 or [::1]:9464")
    return host, port


_URL_FORM = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)", re.DOTALL)


def mask_url(url: str) -> str:
    """``url`` with its credentials masked: ``scheme://user:***@host...``.

    The credentials are everything before the URL's last ``@``, however they are written: a
    password holding ``#``, ``/``, ``?`` or ``@`` fools URL parsers into reading part of it as
    path, query or host, so this does not ask one. A user without a password is masked whole
    (``redis://SECRET@host`` is a password to many), and so is anything without the
    ``scheme://`` form.
    """
    match = _URL_FORM.fullmatch(url)
    if match is None:
        return "***"
    credentials, at, location = match["rest"].rpartition("@")
    if not at:
        return url
    user, colon, _ = credentials.partition(":")
    masked = f"{user}:***" if colon else "***"
    return f"{match['scheme']}://{masked}@{location}"
