"""The ``Host`` header of a request, read strictly: a DNS name or an IP literal, and a port.

The Host header is how a server tells a request meant for it from one a DNS-rebinding page made (a
page of ``evil.example`` whose name now resolves to 127.0.0.1 still sends ``Host: evil.example``).
So the reading is narrow: ASCII letters, digits, hyphens and dots, a bracketed IPv6 address, an
optional numeric port; anything else (spaces, bytes beyond ASCII, user info, a trailing dot, an
IPv6 zone) is no host at all and is refused by whoever asks.
"""

from __future__ import annotations

import ipaddress
import re

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_HOST = re.compile(
    rf"(?:\[(?P<v6>[0-9a-f:.]+)\]|(?P<name>{_NAME.pattern}))(?::(?P<port>[0-9]{{1,5}}))?"
)

MAX_HOST = 253 + len(":65535")
"""Characters a Host header may have: the longest DNS name and a port."""


def host_of(header: str | None) -> str | IPAddress | None:
    """The host a ``Host`` header names: an IP address, or a lower-case DNS name; None when the
    header is absent or anything but ``name[:port]``, ``IPv4[:port]`` or ``[IPv6][:port]``.

    The port is read but not returned: a forwarded port (``ssh -L 8080:127.0.0.1:9464``, a
    published container port) differs from the bound one, and no page can choose it anyway.
    """
    if header is None or len(header) > MAX_HOST or not header.isascii():
        return None
    match = _HOST.fullmatch(header.lower())
    if match is None or (match["port"] is not None and not 0 < int(match["port"]) <= 65535):
        return None
    if match["v6"] is not None:
        try:
            return ipaddress.IPv6Address(match["v6"])
        except ValueError:
            return None
    try:
        return ipaddress.IPv4Address(match["name"])
    except ValueError:
        return match["name"]


def host_entry(value: str) -> str | IPAddress:
    """A host a setting names (no port, no brackets): an IP address or a lower-case DNS name;
    ValueError for anything else."""
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        pass
    if not value.isascii() or _NAME.fullmatch(value.lower()) is None or len(value) > 253:
        raise ValueError(f"{value!r} is neither a DNS name nor an IP address")
    return value.lower()
