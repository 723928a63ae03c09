"""The entry point filters exactly the dependency warnings it names, and nothing else."""

from __future__ import annotations

import warnings

from cryptography.utils import CryptographyDeprecationWarning

from playguard_async.kits.dependency_warnings import filter_known_dependency_warnings

DSA = (
    "DSA is deprecated and support will be removed in a future release. Use a more modern "
    "signature algorithm."
)


def shown(message: str, category: type[Warning], module: str) -> list[str]:
    """The warnings that get through the entry point's filters, as Python would show them."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        filter_known_dependency_warnings()
        warnings.warn_explicit(message, category, f"/{module.replace('.', '/')}.py", 32, module)
    return [str(warning.message) for warning in caught]


def test_asyncssh_reading_cryptographys_dsa_names_is_not_shown() -> None:
    assert shown(DSA, CryptographyDeprecationWarning, "asyncssh.crypto.misc") == []
    assert shown(DSA, CryptographyDeprecationWarning, "asyncssh.crypto.dsa") == []


def test_the_same_warning_from_our_code_is_still_shown() -> None:
    assert shown(DSA, CryptographyDeprecationWarning, "playguard_async.remote.ssh") == [DSA]


def test_another_cryptography_deprecation_in_asyncssh_is_still_shown() -> None:
    ffdh = "Diffie-Hellman over finite fields (FFDH) is deprecated"
    assert shown(ffdh, CryptographyDeprecationWarning, "asyncssh.crypto.dh") == [ffdh]


def test_another_category_with_the_same_message_is_still_shown() -> None:
    assert shown(DSA, DeprecationWarning, "asyncssh.crypto.misc") == [DSA]
