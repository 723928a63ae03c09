"""The validators' fast paths accept exactly what their rule-by-rule checks accept, so a cheaper
check never lets through (or refuses) a value the rules judge otherwise."""

from __future__ import annotations

import ipaddress
from pathlib import PurePosixPath

from hypothesis import given
from hypothesis import strategies as st

from playguard_async.inventory import (
    _BRANCH_RULES,
    _HOSTNAME,
    _VALID_BRANCH,
    _check_host,
    _check_safe_chars,
)

BRANCHY = st.text(alphabet="ab-._/lock0@ ~", max_size=16)


def _rules_accept(branch: str) -> bool:
    try:
        _check_safe_chars(branch)
    except ValueError:
        return False
    return not any(broken(branch) for broken, _ in _BRANCH_RULES)


@given(BRANCHY)
def test_branch_fast_path_accepts_exactly_what_the_rules_accept(branch: str) -> None:
    assert bool(_VALID_BRANCH.fullmatch(branch)) == _rules_accept(branch)


def _ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


@given(st.text(alphabet="0123456789.:abf-", max_size=20))
def test_host_check_order_changes_nothing(value: str) -> None:

    expected = _ip(value) or (len(value) <= 253 and bool(_HOSTNAME.fullmatch(value)))
    try:
        _check_host(value)
    except ValueError:
        accepted = False
    else:
        accepted = True
    assert accepted == expected


@given(st.text(alphabet="a./", max_size=12))
def test_dot_dot_found_by_split_as_by_posix_parts(path: str) -> None:
    assert (".." in path.split("/")) == (".." in PurePosixPath(path).parts)
