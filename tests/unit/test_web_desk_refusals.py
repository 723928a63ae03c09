"""A refused action names what was wrong, never where the desired state lives on the machine:
the page shows it to every operator. The CLI's own code (``CliDesk``) on a real inventory file
whose path would give the layout away; no Redis is reached (nothing gets that far)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from playguard_async.operator.web_desk import CliDesk
from playguard_async.web.actions import ActionRefused
from tests.support.daemon import marquee_entry
from tests.support.engine import settings_for

REFUSED = [
    ("plan", {"marquee": "nope"}, "no marquee named 'nope'"),
    ("cycle", {"marquee": "nope"}, "no marquee named 'nope'"),
    ("pin", {"marquee": "m1", "playground": "x", "reason": "r"}, "no playground named 'x'"),
    ("pin", {"marquee": "nope", "playground": "x", "reason": "r"}, "no playground named 'x'"),
]


@pytest.mark.parametrize(("action", "form", "says"), REFUSED)
async def test_a_refusal_names_the_mistake_and_not_the_inventorys_path(
    tmp_path: Path, action: str, form: dict[str, str], says: str
) -> None:
    inventory = tmp_path / "where-it-lives" / "inventory.yaml"
    inventory.parent.mkdir()
    inventory.write_text(json.dumps({"marquees": [marquee_entry("m1")]}))
    desk = CliDesk(settings_for(inventory=inventory, redis_url="redis://127.0.0.1:9/0"))
    with pytest.raises(ActionRefused) as refused:
        await desk.act(action, form, "ada")
    assert says in str(refused.value)
    assert "where-it-lives" not in str(refused.value)
    assert str(tmp_path) not in str(refused.value)
