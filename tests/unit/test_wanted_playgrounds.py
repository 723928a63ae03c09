"""What a Marquee's page shows as asked of each of its Playgrounds: read from the desired state
alone, each Playground with its Playspec's repository and images and its own agent chats."""

from __future__ import annotations

from playguard_async.coordination.marquee_reads import WantedPlayground
from playguard_async.desired_state.model import Inventory
from playguard_async.service.story import wanted_playgrounds
from tests.support.daemon import marquee_entry

INVENTORY = Inventory.model_validate({
    "marquees": [marquee_entry(name) for name in ("m1", "m2")],
    "playspecs": [{"name": "web", "repo": "https://git.example/web.git",
                   "images": ["r/app:1", "r/db:2"]}],
    "playgrounds": [
        {"name": "web-a", "playspec": "web", "marquee": "m1", "branch": "main"},
        {"name": "web-b", "playspec": "web", "marquee": "m1", "branch": "dev", "state": "stopped"},
        {"name": "web-c", "playspec": "web", "marquee": "m2", "branch": "main"},
    ],
    "agent_chats": [
        {"name": "helper", "playground": "web-a", "image": "r/agent:3", "command": ["run"]},
        {"name": "other", "playground": "web-c", "image": "r/agent:3", "command": ["run"],
         "state": "closed"},
    ],
})  # fmt: skip


def test_each_playground_of_the_marquee_with_its_playspec_and_only_its_own_chats() -> None:
    assert wanted_playgrounds(INVENTORY, "m1") == (
        WantedPlayground("web-a", "web", "https://git.example/web.git", "main", "running",
                         images=("r/app:1", "r/db:2"), chats=(("helper", "r/agent:3", "active"),)),
        WantedPlayground("web-b", "web", "https://git.example/web.git", "dev", "stopped",
                         images=("r/app:1", "r/db:2")),
    )  # fmt: skip
    assert [wanted.chats for wanted in wanted_playgrounds(INVENTORY, "m2")] == [
        (("other", "r/agent:3", "closed"),)
    ]
    assert wanted_playgrounds(INVENTORY, "nowhere") == ()
