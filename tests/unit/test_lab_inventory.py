"""The lab's inventory of many Marquees on one host writes a rollout and canaries when asked,
and neither by default, as the YAML source reads them."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from playguard_async.desired_state.rollout_policy import RolloutPolicy
from playguard_async.desired_state.yaml_source import YamlInventorySource
from playguard_lab.fleet import Lab
from playguard_lab.shared_host import shared_host_inventory, write_inventory


def _lab(directory: Path) -> Lab:
    """What the inventory is written from, without starting a server."""
    ssh = SimpleNamespace(
        host="127.0.0.1", port=2222, user="lab", client_key=directory / "id",
        known_hosts=directory / "known_hosts",
    )  # fmt: skip
    host = SimpleNamespace(name="marquee-0", ssh=ssh, docker=SimpleNamespace(socket="/run/d.sock"))
    registry = SimpleNamespace(address="127.0.0.1:5000", username="lab", password="pw")
    lab = SimpleNamespace(marquees=[host], registry=registry, image="127.0.0.1:5000/busybox:1",
                          git=SimpleNamespace(url="file:///srv/origin.git"))  # fmt: skip
    return cast(Lab, lab)


async def _written(tmp_path: Path, **options: Any) -> Any:
    document = shared_host_inventory(
        _lab(tmp_path), tmp_path / "fleet", marquees=4, playgrounds=2, **options
    )
    return await YamlInventorySource(write_inventory(document, tmp_path / "inv.yaml")).load()


async def test_by_default_no_rollout_and_no_canary(tmp_path: Path) -> None:
    inventory = await _written(tmp_path)
    assert [spec.rollout for spec in inventory.playspecs] == [None]
    assert not any(marquee.canary for marquee in inventory.marquees)


async def test_a_rollout_and_the_first_marquees_as_canaries_when_asked(tmp_path: Path) -> None:
    rollout: dict[str, Any] = {"waves": [1, "50%", "100%"], "bake": 10, "max_failures": 0}
    inventory = await _written(tmp_path, rollout=rollout, canaries=2)
    assert [spec.rollout for spec in inventory.playspecs] == [RolloutPolicy.model_validate(rollout)]
    assert [m.name for m in inventory.marquees if m.canary] == ["marquee-0-0", "marquee-0-1"]
    assert list(inventory.cohort("web", "main"))[:2] == [
        (name, True) for name in ("marquee-0-0", "marquee-0-1")
    ]
