"""``playguard why`` end to end against the lab: a cycle that moves a Playground to a new head is
shown with its replica and fence and the writes its host accepted, joined on cycle id; after
Redis loses everything the host's writes still show, marked; hostile text from Redis and from the
host's journal is bounded and inert; an unreachable host is said, with what Redis had. With the
desired state in PostgreSQL, an application's change names its actor and the cycle that
included it, and operators' actions and a drift fixed on the host join the same timeline."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiodocker
import asyncpg
import pytest
from redis import Redis as SyncRedis
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException
from selenium.webdriver.common.by import By

from playguard_async.coordination.keys import (
    last_cycle_key,
    operator_actions_key,
    pause_key,
    pins_key,
)
from playguard_async.cycle_record import read_through
from playguard_async.desired_state.postgres.schema import migrate
from playguard_async.desired_state.postgres.transfer import import_inventory
from playguard_async.remote.journal import STARTED
from playguard_lab import GitOrigin
from tests.support.browser import cell_texts, chromium
from tests.support.cli import LAB_SETTINGS, Playguard
from tests.support.daemon import Daemon, wait_for
from tests.support.playgrounds import compose_yaml, project_containers
from tests.support.postgres import LabDatabase
from tests.support.probes import start_serving
from tests.support.world import LabWorld


def cycle(playguard: Playguard) -> subprocess.CompletedProcess[str]:
    done = playguard("cycle", "edge-1", timeout=180.0)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def why(playguard: Playguard, *args: str) -> tuple[int, dict[str, Any], str]:
    """``why edge-1`` as JSON and as text: exit status, the JSON, the text."""
    as_json = playguard("why", "edge-1", *args, "--json")
    as_text = playguard("why", "edge-1", *args)
    assert as_json.returncode == as_text.returncode, as_json.stderr + as_text.stderr
    return as_json.returncode, json.loads(as_json.stdout), as_text.stdout


def journal_file(lab: LabWorld) -> Path:
    return Path(lab.data["marquees"][0]["state_dir"]) / "journal"


def test_why_joins_a_cycle_with_its_host_writes_and_keeps_them_after_redis_is_flushed(
    playguard: Playguard, lab: LabWorld, git_origin: GitOrigin, busybox_image: str,
    store: SyncRedis,
) -> None:  # fmt: skip
    cycle(playguard)
    branch = lab.data["playgrounds"][0]["branch"]
    git_origin.commit(branch, {"compose.yaml": compose_yaml(busybox_image, sleep="86401")}, "Move")
    cycle(playguard)
    moved = json.loads(store.get(last_cycle_key("edge-1")) or "{}")

    status, told, text = why(playguard, "web-main")

    assert status == 0, text
    cycles = [event for event in told["events"] if event["kind"] == "cycle"]
    assert cycles[-1]["cycle"] == moved["cycle"]
    assert (cycles[-1]["by"], cycles[-1]["fence"]) == (
        f"replica {moved['replica']}",
        moved["fence"],
    )
    written = [(write["action"].split(" ")[0], write["cycle"]) for write in cycles[-1]["writes"]]
    assert ("update", moved["cycle"]) in written
    assert ("compose", moved["cycle"]) in written
    assert f"cycle {moved['cycle']}  ok  replica {moved['replica']}  fence {moved['fence']}" in text
    assert "    host     " in text
    assert "update playground web-main from " in text

    store.flushall()
    status, told, text = why(playguard)

    assert status == 0, text
    events = told["events"]
    assert not [event for event in events if event["kind"] == "cycle"]
    orphans = [event for event in events if event["kind"] == "host write"]
    assert {event["by"] for event in orphans} == {"no cycle record"}
    assert any(
        event["cycle"] == moved["cycle"] and event["text"].startswith("update playground web-main")
        for event in orphans
    )
    assert f"no cycle record; cycle {moved['cycle']}" in text

    status, told, text = why(playguard, "web-gone")
    assert status == 0, text
    assert told["playground_wanted"] is False
    assert "playground web-gone is not in the desired state now" in text

    journal_file(lab).write_text("", encoding="utf-8")  # emptied by a hand on the host
    status, told, text = why(playguard)
    assert status == 1, "a journal cut after --since is an incomplete source"
    assert (told["host_read"], told["journal_cut"], told["journal_begins"]) == (True, True, None)
    assert "host journal holds no write and no mark of its start" in text


def test_hostile_text_is_bounded_and_inert_and_an_unreachable_host_is_said(
    playguard: Playguard, lab: LabWorld, store: SyncRedis
) -> None:
    hostile = "\x1b]0;owned\x07\x1b[2J<script>alert(1)</script>" + "A" * 100_000
    journal = journal_file(lab)
    journal.parent.mkdir(parents=True, exist_ok=True)
    if not journal.exists():  # as the guard makes one: whole since its start
        journal.write_text(f"{STARTED}{time.time() - 60:.6f}\n", encoding="utf-8")
    with journal.open("a", encoding="utf-8") as appended:
        appended.write(f"9 {time.time():.6f} cycle=abc123 {hostile}\n")
    now = time.time()
    pause = {"user": "eve", "host": hostile, "reason": hostile, "since": now, "until": now + 600}
    store.set(pause_key("edge-1"), json.dumps(pause))
    pin = {"revision": "last-good", "user": hostile, "host": "h", "reason": hostile, "since": now}
    store.hset(pins_key("edge-1"), "web-main", json.dumps(pin))

    status, told, text = why(playguard, "--since", "7d")

    assert status == 0, text
    assert "\x1b" not in text
    assert "\x07" not in text
    assert "\\x1b]0;owned\\x07" in text
    assert max(len(line) for line in text.splitlines()) < 1_500
    assert len(json.dumps(told)) < 5_000

    lab.data["marquees"][0]["port"] = 1  # nothing listens there
    playguard.configure(lab.data, **LAB_SETTINGS)
    status, told, text = why(playguard)

    assert status == 1
    assert told["host_read"] is False
    assert told["host_unread"]
    assert sorted(event["kind"] for event in told["events"]) == ["pause", "pin"]
    assert "host journal not read: " in text


async def _remove_by_hand(docker: aiodocker.Docker) -> None:
    """The Playground's containers deleted as a person on the host would: a drift to fix."""
    for shown in await project_containers(docker):
        await docker.containers.container(shown["Id"]).delete(force=True)


async def _desired_state_in(
    postgres: LabDatabase, connection: asyncpg.Connection, playguard: Playguard, lab: LabWorld,
    tmp_path: Path,
) -> dict[str, object]:  # fmt: skip
    """The lab's inventory moved into PostgreSQL (migrated, imported), the only desired state of
    the CLI's settings; those settings."""
    await migrate(connection)
    await import_inventory(connection, playguard.runner.inventory)
    password_file = tmp_path / "pg-password"
    password_file.write_text(postgres.password + "\n")
    password_file.chmod(0o600)
    settings = {**LAB_SETTINGS, "desired_state": postgres.url,
                "desired_state_password_file": password_file}  # fmt: skip
    playguard.configure(lab.data, **settings)
    playguard.runner.inventory.unlink()
    return settings


def _cycles_of_edge_1(daemon: Daemon) -> int:
    return len(daemon.events("cycle.finished", marquee="edge-1"))


@contextlib.contextmanager
def _daemon_with_web_view(
    playguard: Playguard, settings: dict[str, object]
) -> Iterator[tuple[Daemon, str]]:
    """A daemon on the desired state of ``settings`` (600 s ticks: only NOTIFY wakes it), its
    web view on a free loopback port; it and the view's base URL. Stopped cleanly at the end."""
    runner = playguard.runner
    try:
        daemon, base = start_serving(runner, "r1", phase_seconds=0.2, **settings,
                                     tick_interval=600.0, tick_jitter=0.0)  # fmt: skip
        yield daemon, base
        assert runner.stop_all([daemon], timeout=30) == {"r1": 0}
    finally:
        runner.kill_all()


async def _alice_moves_web_main(
    daemon: Daemon, connection: asyncpg.Connection, git_origin: GitOrigin, busybox_image: str,
    store: SyncRedis,
) -> dict[str, Any]:  # fmt: skip
    """The daemon converges edge-1, then alice's transaction moves web-main to a new branch: the
    row's NOTIFY wakes a cycle (the 600 s tick is not waited for); that cycle's record (written
    before the daemon logs the cycle's end)."""
    wait_for(lambda: _cycles_of_edge_1(daemon) >= 1, timeout=180,
             what=f"edge-1 converged:\n{daemon.stderr_tail()}")  # fmt: skip
    branch = f"why-{time.monotonic_ns()}"
    git_origin.commit(branch, {"compose.yaml": compose_yaml(busybox_image)}, "Moved")
    before = _cycles_of_edge_1(daemon)
    async with connection.transaction():
        await connection.execute("SET LOCAL playguard.actor = 'alice'")
        await connection.execute(
            "UPDATE playguard.playgrounds SET branch = $1 WHERE name = 'web-main'", branch
        )
    wait_for(lambda: _cycles_of_edge_1(daemon) > before, timeout=60,
             what=f"the cycle after alice's change:\n{daemon.stderr_tail()}")  # fmt: skip
    moved: dict[str, Any] = json.loads(store.get(last_cycle_key("edge-1")) or "{}")
    return moved


def _alices_change_in_the_cli(playguard: Playguard, moved: dict[str, Any], who: str) -> None:
    """``why edge-1 web-main`` names alice's change of the row (``who``: her claim and the role
    that wrote it), the cycle that included it, its replica and fence, and the write the host
    accepted."""
    status, told, text = why(playguard, "web-main")

    assert status == 0, text
    change = _one(told["events"], kind="change", by=who)
    assert change["text"].endswith(": playguard.playgrounds web-main: branch changed")
    assert change["included_in"] == moved["cycle"]
    including = _one(told["events"], kind="cycle", cycle=moved["cycle"])
    assert (including["by"], including["fence"]) == ("replica r1", moved["fence"])
    assert including["includes"] == [change["text"].split(":")[0]]
    assert including["version"].startswith("change log up to id ")
    updates = [w for w in including["writes"] if w["action"].startswith("update playground")]
    assert [w["cycle"] for w in updates] == [moved["cycle"]]
    assert f"{who}: {change['text']}  [in cycle {moved['cycle']}]" in text


def _alices_change_in_the_browser(
    browser: webdriver.Chrome, base: str, moved: dict[str, Any], who: str, shots: Path
) -> None:
    """From the Marquee's page, its link and its form (no script needed): the timeline of
    web-main shows alice's change joined to the cycle, its replica and fence, and the write the
    host accepted."""
    browser.get(f"{base}/marquee/edge-1")
    # The Marquee page is live: an update may swap <main> between finding the link and its
    # click; then it is found again.
    for _ in range(5):
        try:
            browser.find_element(By.ID, "why-link").click()
            break
        except StaleElementReferenceException:
            continue
    else:
        raise AssertionError("the Marquee page was swapped under every click of its why link")
    wait_for(lambda: browser.find_elements(By.NAME, "playground"), timeout=20, what="the why page")
    browser.find_element(By.NAME, "playground").send_keys("web-main")
    browser.find_element(By.CSS_SELECTOR, "#why-query button").click()

    def alices() -> list[str] | None:
        if "playground=web-main" not in browser.current_url:
            return None
        changes = cell_texts(browser, 'li[data-kind="change"]')
        return [text for text in changes if f"{who}: change " in text] or None

    (change,) = wait_for(alices, timeout=20, what="alice's change on the form's answer")
    assert "playguard.playgrounds web-main: branch changed" in change
    assert f"[in cycle {moved['cycle']}]" in change
    (cycle,) = cell_texts(browser, f'li[data-kind="cycle"][data-cycle="{moved["cycle"]}"]')
    assert f"replica r1 fence {moved['fence']}" in cycle, cycle
    assert "includes change " in cycle
    accepted = cell_texts(browser, f'li[data-cycle="{moved["cycle"]}"] li.host')
    assert any(
        f"fence {moved['fence']}: update playground web-main from " in line for line in accepted
    ), accepted
    browser.save_screenshot(str(shots / "why.png"))


def _hostile_text_in_the_browser(browser: webdriver.Chrome, base: str, shots: Path) -> None:
    """The hostile actor and kept action render as text: no script runs, no element is made."""
    browser.get(f"{base}/marquee/edge-1/why")
    shown = cell_texts(browser, "main")[0]
    assert "\\x1b]0;owned\\x07\\x1b[2J<script>alert(1)</script>AAA" in shown, "the kept action's"
    assert "?]0;owned?" in shown, "the actor's, as the trigger bounded it"
    assert not browser.find_elements(By.CSS_SELECTOR, "main script, main img, main svg")
    with pytest.raises(NoAlertPresentException):
        _ = browser.switch_to.alert.text
    assert max(len(line) for line in shown.splitlines()) < 1_500
    browser.save_screenshot(str(shots / "why-hostile.png"))


async def _hostile_actor_and_action(connection: asyncpg.Connection, store: SyncRedis) -> None:
    """Hostile text where each source takes it: the application's actor, a kept action written
    into Redis by hand."""
    async with connection.transaction():
        await connection.execute("SELECT set_config('playguard.actor', $1, true)", HOSTILE)
        await connection.execute(
            "UPDATE playguard.marquees SET launchable = launchable WHERE name = 'edge-1'"
        )
    entry = {"at": time.time(), "action": HOSTILE, "by": HOSTILE, "reason": HOSTILE,
             "target": HOSTILE}  # fmt: skip
    store.lpush(operator_actions_key("edge-1"), json.dumps(entry))


HOSTILE = "\x1b]0;owned\x07\x1b[2J<script>alert(1)</script>" + "A" * 1_000_000


def _one(events: list[dict[str, Any]], **fields: object) -> dict[str, Any]:
    (found,) = [e for e in events if all(e[key] == value for key, value in fields.items())]
    return found


async def test_why_follows_a_row_changed_by_alice_to_the_hosts_write_then_a_pause_and_a_drift(
    playguard: Playguard, lab: LabWorld, postgres: LabDatabase, git_origin: GitOrigin,
    busybox_image: str, lab_docker: aiodocker.Docker, store: SyncRedis, tmp_path: Path,
    require_binary: Callable[[str, str], str],
) -> None:  # fmt: skip
    chromium_path = require_binary("chromium", "chromium")
    driver_path = require_binary("chromedriver", "chromium-driver")
    who = f"alice (claimed) as role {postgres.server.user}"
    connection = await postgres.connect()
    try:
        settings = await _desired_state_in(postgres, connection, playguard, lab, tmp_path)
        with (
            _daemon_with_web_view(playguard, settings) as (daemon, base),
            chromium(chromium_path, driver_path, tmp_path / "profile") as browser,
        ):
            moved = await _alice_moves_web_main(daemon, connection, git_origin, busybox_image,
                                                store)  # fmt: skip
            _alices_change_in_the_browser(browser, base, moved, who, tmp_path)
            await _hostile_actor_and_action(connection, store)
            _hostile_text_in_the_browser(browser, base, tmp_path)

        _alices_change_in_the_cli(playguard, moved, who)

        paused = playguard("pause", "edge-1", "--reason", "<b>disk</b> full, investigating")
        assert paused.returncode == 0, paused.stderr
        assert playguard("resume", "edge-1").returncode == 0
        await _remove_by_hand(lab_docker)
        cycle(playguard)
        fixed = json.loads(store.get(last_cycle_key("edge-1")) or "{}")

        status, told, text = why(playguard)

        assert status == 0, text
        kinds = [event["kind"] for event in told["events"]]
        assert kinds.index("pause") < kinds.index("resume")
        pause = _one(told["events"], kind="pause")
        assert pause["text"].endswith(": <b>disk</b> full, investigating")
        assert "@" in pause["by"]
        drift = _one(told["events"], kind="cycle", cycle=fixed["cycle"])
        assert any("web-main" in cause and "missing" in cause for cause in drift["causes"])
        assert drift["includes"] == [], "a drift fixed after alice's change was read includes none"
        assert any(
            w["action"].startswith("compose up playground web-main") for w in drift["writes"]
        )
        assert {w["read"] for w in drift["writes"]} == {read_through(fixed["desired"])}, (
            "each journal line names how far its cycle read the change log"
        )
        assert fixed["desired"]["change"] >= moved["desired"]["change"] > 0
        assert "\x1b" not in text
        assert "\x07" not in text
        assert "\\x1b]0;owned\\x07" in text, "the kept action's, escaped"
        assert "?]0;owned?" in text, "the actor's, as the trigger bounded it"
        assert max(len(line) for line in text.splitlines()) < 1_500
        assert len(json.dumps(told)) < 50_000

        away = {**settings, "desired_state": "postgresql://playguard@127.0.0.1:1/gone"}
        playguard.configure(lab.data, **away)
        status, told, text = why(playguard)

        assert status == 1
        assert told["changes_read"] is False
        assert [event["kind"] for event in told["events"]].count("pause") == 1
        assert "change log not read: " in text
    finally:
        await connection.close()
