"""The validators' fast paths accept exactly what their rule-by-rule checks accept, so a cheaper
check never lets through (or refuses) a value the rules judge otherwise."""

from __future__ import annotations

import ipaddress
from pathlib import Path, PurePosixPath

from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from yaml.nodes import ScalarNode

from playguard_async.desired_state.fields import (
    _BRANCH_RULES,
    _HOSTNAME,
    _VALID_BRANCH,
    BASE_DIR,
    PATHS_RESOLVED,
    _check_host,
    _check_safe_chars,
)
from playguard_async.desired_state.model import (
    Inventory,
)
from playguard_async.desired_state.yaml_source import _EventBuilder, _InventoryLoader

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


@given(st.text(max_size=12) | st.sampled_from(["", "yes", "~", "<<", "=", "1e3", ".inf", "0x1"]))
def test_a_plain_scalar_no_resolver_claims_resolves_to_a_string(text: str) -> None:
    loader = _InventoryLoader("")
    try:
        builder = _EventBuilder(loader)
        resolved = builder.loader.resolve(ScalarNode, text, (True, False))
    finally:
        loader.dispose()
    assert not builder.universal
    if text[:1] not in builder.resolvable_firsts:
        assert resolved == "tag:yaml.org,2002:str"


PATH_INPUTS = st.sampled_from(
    ["id", "keys/id", "/k/id", "~/id", "../id", "", ".", "a\x00b", 7, None, ["id"], {"a": 1}]
)


def _validated(document: dict[str, object], context: dict[str, object]) -> object:
    try:
        return Inventory.model_validate(document, context=context)
    except ValidationError as exc:
        return [(error["loc"], error["type"], error["msg"]) for error in exc.errors()]


@given(st.lists(st.tuples(PATH_INPUTS, PATH_INPUTS), min_size=1, max_size=6))
def test_remembered_local_paths_validate_as_each_resolved_alone(
    paths: list[tuple[object, object]],
) -> None:
    """Marquees sharing a key file's text share its resolved Path, and nothing else changes: the
    same inventory, or the same errors in the same places."""
    document: dict[str, object] = {
        "marquees": [
            {
                "name": f"m{index}",
                "host": "h",
                "user": "u",
                "identity_file": identity,
                "known_hosts": known_hosts,
            }
            for index, (identity, known_hosts) in enumerate(paths)
        ]
    }
    base: dict[str, object] = {BASE_DIR: Path("/srv/inventory")}
    remembered = _validated(document, {**base, PATHS_RESOLVED: {}})
    assert remembered == _validated(document, base)
    if isinstance(remembered, Inventory):
        first: dict[object, Path] = {}
        for (identity, _), marquee in zip(paths, remembered.marquees, strict=True):
            assert first.setdefault(identity, marquee.identity_file) is marquee.identity_file
