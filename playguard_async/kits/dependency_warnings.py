"""Warnings that a dependency raises about another dependency, which a person running ``playguard``
can do nothing about: filtered at the entry point, one by one, each named with its upstream issue.

Only the exact warning is filtered (its category, the start of its message, the module it is
attributed to); any other warning, ours or a dependency's, is shown as Python shows it. The test
suite filters the same ones in ``pyproject.toml`` (pytest turns every warning into an error), and
``scripts/newest.sh`` runs the unit tests and the command against the newest versions the
dependency ranges allow, so the next one is found in CI rather than by a user.
"""

from __future__ import annotations

import warnings

from cryptography.utils import CryptographyDeprecationWarning


def filter_known_dependency_warnings() -> None:
    """Install the filters; call it before the dependencies are imported (import time is when
    they warn)."""
    # cryptography 51 deprecated DSA (https://github.com/pyca/cryptography/pull/15597): every
    # public name of its dsa module warns when read, and asyncssh (2.24.1, the newest) still reads
    # them at import time in asyncssh/crypto/misc.py and dsa.py: five warnings, ten lines, on every
    # command. The nearest asyncssh issue is the same kind of warning for FFDH under cryptography
    # 50, https://github.com/ronf/asyncssh/issues/826 (open); none for DSA was found. Drop this
    # filter once asyncssh stops reading the deprecated names.
    warnings.filterwarnings(
        "ignore",
        message="DSA is deprecated",
        category=CryptographyDeprecationWarning,
        module=r"asyncssh\.",
    )
