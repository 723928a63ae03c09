"""What runs where on a Marquee's page: the stored listing read as outside input
(``coordination.containers_seen``), judged against the desired state (``web.containers``), and
rendered as text whatever it holds."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

import pytest

from playguard_async.coordination.containers_seen import (
    TEXT_MAX,
    VALUE_MAX,
    ContainersSeen,
    DesiredParts,
    SeenContainer,
    SeenRead,
    parse_seen,
)
from playguard_async.coordination.marquee_reads import (
    LastCycle,
    MarqueeStatus,
    MarqueeStory,
    PlaygroundRevisions,
    WantedPlayground,
)
from playguard_async.kits.last_written import LastWritten
from playguard_async.web.containers import runs_where, started_shown
from tests.support.web_view import picture_of, serving, view_of

IMAGE_ID = "sha256:" + "a" * 64
OLD_ID = "sha256:" + "b" * 64
ENV = "e" * 64

HOSTILE = (
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(2)>',
    "{{ 7*7 }}</td></tr></table><b>bold</b>",
)


def container(**fields: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "playground": "web", "service": "app", "name": "pg-web-app-1", "state": "running",
        "health": "healthy", "restarts": 0, "image": "app:main", "image_id": IMAGE_ID,
        "started_at": "2026-12-07T17:00:00Z", "config_hash": "c0ffee",
    }  # fmt: skip
    values.update(fields)
    return values


def stored(containers: list[Any], **fields: Any) -> str:
    value: dict[str, Any] = {
        "seen_at": 1_796_000_000.0,
        "cycle": "c-1",
        "containers": containers,
        "desired": {
            "web": {
                "services": ["app", "db"],
                "images": {"app:main": IMAGE_ID},
                "env": ENV,
                "definitions": {"app": "c0ffee", "db": "d00d"},
            }
        },
    }
    value.update(fields)
    return json.dumps(value)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"\xff\xfe", "not JSON"),
        ("not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ("{}", "not of the written shape (at seen_at)"),
        (stored([], seen_at="yesterday"), "not of the written shape (at seen_at)"),
        (stored([], cycle=7), "not of the written shape (at cycle)"),
        (stored([], desired={"web": {"services": "app"}}), "(at desired.web.services)"),
        (stored([], more=-1), "(at more)"),
        ("x" * (VALUE_MAX + 1), f"over {VALUE_MAX}"),
    ],
)
def test_a_stored_value_not_of_the_written_shape_reads_as_unreadable_with_why(
    raw: str | bytes, why: str
) -> None:
    read = parse_seen(raw)
    assert read.seen is None
    assert read.unreadable is not None
    assert why in read.unreadable


@pytest.mark.parametrize(
    "entry",
    [
        "a string",
        None,
        [1, 2],
        container(name=None),
        container(name=["x"]),
        container(restarts="7"),
        container(restarts=-1),
        container(restarts=True),
        container(state={"Status": "running"}),
        container(image=12),
    ],
)
def test_a_container_entry_of_the_wrong_types_is_left_out_and_counted(entry: Any) -> None:
    read = parse_seen(stored([container(), entry]))
    assert read.seen is not None
    assert read.unreadable is None
    assert [kept.name for kept in read.seen.containers] == ["pg-web-app-1"]
    assert read.seen.more == 1


def test_huge_strings_are_cut_and_unknown_fields_dropped() -> None:
    read = parse_seen(stored([container(name="n" * 100_000, extra="x" * 1000)]))
    assert read.seen is not None
    [kept] = read.seen.containers
    assert kept.name == "n" * TEXT_MAX
    assert not hasattr(kept, "extra")


def test_the_digest_leaves_out_when_by_whom_and_what_is_read_on_change_only() -> None:
    seen = ContainersSeen.model_validate_json(stored([container()]))
    later = seen.model_copy(update={"seen_at": 1.0, "cycle": "c-2"})
    restarted = seen.model_copy(
        update={"containers": [SeenContainer.model_validate(container(restarts=3))]}
    )
    stopped = seen.model_copy(
        update={"containers": [SeenContainer.model_validate(container(state="exited"))]}
    )
    assert seen.digest() == later.digest() == restarted.digest()
    assert stopped.digest() != seen.digest()


def test_a_listing_written_once_is_due_again_only_when_it_changes_or_after_the_refresh() -> None:
    now = [0.0]
    memo = LastWritten(3600.0, clock=lambda: now[0])
    assert memo.due("m", "d1")
    memo.wrote("m", "d1")
    assert not memo.due("m", "d1")
    assert memo.due("m", "d2")
    now[0] = 3600.0
    assert memo.due("m", "d1")
    memo.forget("m")
    assert memo.due("m", "d1")


def story_of(seen: SeenRead, **fields: Any) -> MarqueeStory:
    values: dict[str, Any] = {
        "name": "m-0", "lock": None, "fence_counter": 1, "last": None, "steps": [],
        "history": [], "seen": seen,
        "wanted": (
            WantedPlayground(
                "web", "spec", "repo", "main", "running", images=("app:main",),
                chats=(("chat-1", "chat:1", "active"),),
            ),
        ),
    }  # fmt: skip
    values.update(fields)
    return MarqueeStory(**values)


def seen_with(*containers: dict[str, Any]) -> SeenRead:
    return parse_seen(stored(list(containers)))


def verdicts(story: MarqueeStory) -> dict[str, tuple[bool | None, str]]:
    return {
        row.seen.name: (row.matches, row.why)
        for group in runs_where(story).groups
        for row in group.rows
    }


@pytest.mark.parametrize(
    ("entry", "matches", "why"),
    [
        (container(), True, ""),
        (container(state="exited"), False, "exited"),
        (container(health="unhealthy"), False, "unhealthy"),
        (container(service="gone"), False, "its service is not in the compose file"),
        (container(image_id=OLD_ID), False, "app:main names another image now (aaaaaaaaaaaa)"),
        (
            container(image="docker.io/library/app:main", image_id=OLD_ID),
            False,
            "docker.io/library/app:main names another image now (aaaaaaaaaaaa)",
        ),
        (container(image="app", image_id=OLD_ID), True, ""),
        (container(playground="other"), False, "not in the desired state"),
        (
            container(config_hash="0ld"),
            False,
            "its service definition changed (compose file, .env or override)",
        ),
        (container(config_hash=None), True, ""),
        (container(agent_chat="chat-1", image="chat:1"), True, ""),
        (container(agent_chat="chat-1", image="chat:2"), False, "runs chat:2, desired chat:1"),
        (container(agent_chat="chat-1", image="index.docker.io/library/chat:1"), True, ""),
        (container(agent_chat="stray"), False, "no such agent chat in the desired state"),
        (
            container(agent_chat="chat-1", image="chat:1", state="exited"),
            True,
            "finished (left in place, never restarted)",
        ),
        (container(agent_chat="chat-1", image="chat:1", state="created"), False, "created"),
    ],
)
def test_each_container_is_judged_against_the_desired_state(
    entry: dict[str, Any], matches: bool, why: str
) -> None:
    assert verdicts(story_of(seen_with(entry))) == {entry["name"]: (matches, why)}


def test_a_desired_chat_without_a_container_is_listed_with_none() -> None:
    groups = runs_where(story_of(seen_with(container()))).groups
    assert [(group.title, len(group.rows)) for group in groups] == [
        ("Playground web", 1),
        ("Agent chat chat-1", 0),
    ]


def test_a_held_playground_is_judged_by_its_hold_and_shown_desired_against_actual() -> None:
    held = PlaygroundRevisions(None, None, None, "held by rollout spec@main, wave 1 of 2")
    story = story_of(seen_with(container()), revisions={"web": held})
    assert verdicts(story)["pg-web-app-1"] == (None, "held: held by rollout spec@main, wave 1 of 2")
    assert "web" in runs_where(story).diffs


def test_a_removed_container_shows_its_service_desired_against_no_container() -> None:
    last = LastCycle(
        cycle="c-2", outcome="ok", phase=None, reason=None, fence=1, host_fence=None,
        finished_at=time.time(), duration=1.0, actions=0, drift={"web": ["db: missing"]},
        branch_gone={}, failed=[], dry_run=True,
    )  # fmt: skip
    running: dict[str, Any] = {"commit": None, "images": {}, "env": "f" * 64, "override": "-"}
    story = story_of(
        seen_with(container()),
        last=last,
        revisions={"web": PlaygroundRevisions(running, None, None)},  # type: ignore[arg-type]
    )
    diff = runs_where(story).diffs["web"]
    rows = {row.part: (row.desired, row.running, row.same) for row in diff.rows}
    assert rows["service db"] == ("in the compose file, definition d00d", "no container", False)
    assert rows["service app"][2] is True
    assert rows[".env"] == (f"sha256:{ENV[:12]}", f"sha256:{'f' * 12}", False)
    assert diff.drift == ["db: missing"]


def test_a_playground_in_sync_has_no_diff() -> None:
    both = seen_with(container(), container(service="db", name="pg-web-db-1", config_hash="d00d"))
    assert runs_where(story_of(both)).diffs == {}


def hostile_entries() -> list[dict[str, Any]]:
    return [
        container(
            playground=value,
            service=value,
            name=value,
            state=value,
            health=value,
            image=value,
            image_id=value,
            started_at=value,
            agent_chat=value if i else None,
        )
        for i, value in enumerate(HOSTILE)
    ]


@pytest.mark.parametrize(
    "seen",
    [
        seen_with(*hostile_entries()),
        parse_seen(stored(hostile_entries(), cycle=HOSTILE[0], more=10**9)),
        parse_seen(stored([], desired={HOSTILE[1]: {"services": list(HOSTILE)}})),
        parse_seen(stored([container(name="x" * 50_000)], seen_at=1e300)),
        parse_seen(HOSTILE[0]),
        SeenRead(None, HOSTILE[1]),
        SeenRead(None),
    ],
)
async def test_hostile_listings_render_as_text_on_the_marquee_page(seen: SeenRead) -> None:
    wanted = WantedPlayground(HOSTILE[1], "s", "r", "b", "running", images=(HOSTILE[0],))
    story = story_of(seen, wanted=(wanted,))
    picture = picture_of([MarqueeStatus("m-0", True, None, None)], story)
    async with serving(view_of(picture)) as client:
        response = await client.get("/marquee/m-0")
        html = await response.text()
    assert response.status == 200, html
    assert 'id="runs-where"' in html
    for value in HOSTILE:
        assert value not in html
    assert html.count("<script") == 1  # the package's own, by src
    assert "x" * (TEXT_MAX + 1) not in html
    if seen.seen is None:
        assert "Not seen since" in html or "cannot be read" in html


def test_desired_parts_default_to_unknown() -> None:
    parts = DesiredParts()
    assert (parts.services, parts.images, parts.env) == (None, {}, "-")


@pytest.mark.parametrize(
    ("revisions", "running", "same"),
    [
        (None, "not known", None),
        (PlaygroundRevisions(None, None, None), "not known", None),
        (
            PlaygroundRevisions(None, {"commit": None, "images": {}, "env": ENV, "override": "-"},
                                None),
            f"sha256:{ENV[:12]} (its last good revision)",
            True,
        ),
        (
            PlaygroundRevisions({"commit": None, "images": {}, "env": "-", "override": "-"},
                                None, None),
            "absent",
            False,
        ),
    ],
)  # fmt: skip
def test_the_env_is_compared_with_what_runs_else_the_last_good_else_not_known(
    revisions: PlaygroundRevisions | None, running: str, same: bool | None
) -> None:
    held = PlaygroundRevisions(None, None, None, "held")  # a hold: the diff is shown
    story = story_of(
        seen_with(container()),
        revisions={"web": held if revisions is None else replace(revisions, held_by="held")},
    )
    [env] = [row for row in runs_where(story).diffs["web"].rows if row.part == ".env"]
    assert (env.desired, env.running, env.same) == (f"sha256:{ENV[:12]}", running, same)


@pytest.mark.parametrize(
    ("started", "shown"),
    [
        ("2026-12-07T17:47:25.410145061Z", "2026-12-07 17:47:25 UTC"),
        ("0001-01-01T00:00:00Z", "never"),
        ("yesterday <b>", "yesterday <b>"),
        (None, "?"),
    ],
)
def test_a_start_time_is_shown_to_the_second_or_as_it_is(started: str | None, shown: str) -> None:
    assert started_shown(started) == shown
