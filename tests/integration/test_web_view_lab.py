"""The web view of a real fleet in a real browser: a ``playguard run`` with the built-in phases on
the lab's two Marquees (each its own sshd and dockerd), and a drift made by hand on a host that the
open Marquee page shows as found and fixed, without a reload; its containers listed as docker
reports them, and, once the Marquee is in ``detect``, a container removed by hand shown desired
against actual."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiodocker
import pytest
from selenium.webdriver import Chrome

from playguard_async.remote.compose import SERVICE_LABEL
from playguard_lab import DockerDaemon, SshServer
from tests.support.browser import cell_texts, chromium, mark, not_reloaded
from tests.support.cli import LAB_SETTINGS
from tests.support.daemon import DaemonRunner, wait_for
from tests.support.page_checks import check_and_picture, console_errors, screenshot_folder
from tests.support.playgrounds import project_containers
from tests.support.probes import start_serving
from tests.support.world import LabWorld, lab_marquee_fields

pytestmark = pytest.mark.integration


async def test_a_drift_made_by_hand_shows_as_found_and_fixed_on_the_open_page(
    lab: LabWorld,
    daemons: DaemonRunner,
    second_host: tuple[SshServer, DockerDaemon],
    lab_docker: aiodocker.Docker,
    require_binary: Callable[[str, str], str],
    tmp_path: Path,
) -> None:
    chromium_path = require_binary("chromium", "chromium")
    driver_path = require_binary("chromedriver", "chromium-driver")
    ssh, docker = second_host
    lab.data["marquees"].append(
        {**lab_marquee_fields(ssh, docker, tmp_path / "workdir-2"), "name": "edge-2"}
    )
    daemons.inventory.write_text(json.dumps(lab.data, indent=1), encoding="utf-8")
    # A cycle a second: each cycle's state lasts about a second, and the page shows only the
    # last state of each web_update_interval (1 s by default): a fifth of the tick keeps every
    # cycle, the fixing one included, on the page.
    settings = {**LAB_SETTINGS, "tick_interval": 1.0, "web_update_interval": 0.2}
    daemon, base = start_serving(daemons, "r1", **settings)
    with chromium(chromium_path, driver_path, tmp_path / "profile") as browser:
        browser.get(base + "/")
        wait_for(
            lambda: cell_texts(browser, "#fleet tbody td:nth-child(7)") == ["ok", "ok"],
            timeout=60,
            what="both lab Marquees ok on the fleet page",
        )
        assert cell_texts(browser, "#fleet tbody td:first-child a") == ["edge-1", "edge-2"]
        browser.get(base + "/marquee/edge-1")
        mark(browser)
        calm = wait_for(
            lambda: (
                cell_texts(browser, "#fixed") == ["Nothing."]
                and cell_texts(browser, "#history tbody tr:first-child td:first-child")
            ),
            timeout=30,
            what="a calm cycle of edge-1 after its first (which started everything)",
        )
        [app] = await project_containers(lab_docker)
        assert_listed_as_docker_says(browser, app)
        await lab_docker.containers.container(app["Id"]).delete(force=True)
        fixed = wait_for(
            lambda: [item for item in cell_texts(browser, "#fixed li") if "drift" in item],
            timeout=30,
            what="the drift found and fixed on edge-1's open page",
        )
        assert any(
            item.startswith("fixed drift web-main: ") and "missing" in item for item in fixed
        )
        assert cell_texts(browser, "#history tbody tr:first-child td:first-child") != calm
        assert int(cell_texts(browser, "#history tbody tr:first-child td:nth-child(6)")[0]) >= 1
        browser.save_screenshot(str(tmp_path / "edge-1-fixed.png"))
        wait_for(
            lambda: cell_texts(browser, "#fixed") == ["Nothing."],
            timeout=30,
            what="a calm cycle after the repair",
        )
        assert not_reloaded(browser), "the page was reloaded"
        [again] = await project_containers(lab_docker)
        assert again["State"]["Running"]
        await removed_under_detect(browser, daemons, lab, lab_docker, again)
        assert console_errors(browser) == []
        # The page with its containers and the diff, checked as every page is (axe-core, both
        # sizes, no overflow) and pictured for the docs from its containers on.
        check_and_picture(
            browser, base + "/marquee/edge-1#runs-where", "edge-1",
            screenshot_folder(tmp_path) / "web-view-marquee-runs-where.png",
        )  # fmt: skip
    assert daemons.stop_all([daemon], timeout=30) == {"r1": 0}


def assert_listed_as_docker_says(browser: Chrome, container: dict[str, Any]) -> None:
    """The page lists ``container`` under its Playground with the state, health and restarts
    docker reports, and as desired; a listing kept from an earlier cycle may lag a moment."""
    name = container["Name"].lstrip("/")
    state = container["State"]

    def row() -> list[str]:
        rows = [
            cells
            for cells in _rows(browser, "#runs-web-main tbody tr")
            if len(cells) > 1 and cells[1] == name
        ]
        return rows[0] if rows else []

    cells = wait_for(row, timeout=30, what=f"{name} listed under web-main")
    assert cells[2] == state["Status"]
    assert cells[3] == (state.get("Health") or {}).get("Status", "-")
    assert cells[4] == str(container["RestartCount"])
    assert cells[5] == container["Config"]["Image"]
    assert cells[8].startswith("✓"), cells
    assert "unchanged since" in cell_texts(browser, "#runs-seen")[0]


async def removed_under_detect(
    browser: Chrome,
    daemons: DaemonRunner,
    lab: LabWorld,
    lab_docker: aiodocker.Docker,
    container: dict[str, Any],
) -> None:
    """With edge-1 in ``detect``, a container removed by hand stays removed, and the open page
    shows it desired against actual: its service in the compose file, no container, and the
    plan's words for it."""
    lab.data["marquees"][0]["mode"] = "detect"
    daemons.inventory.write_text(json.dumps(lab.data, indent=1), encoding="utf-8")
    wait_for(
        lambda: cell_texts(browser, "#mode") == ["detect"],
        timeout=30,
        what="edge-1's page in detect",
    )
    service = container["Config"]["Labels"][SERVICE_LABEL]
    await lab_docker.containers.container(container["Id"]).delete(force=True)
    differs = wait_for(
        lambda: [
            cells for cells in _rows(browser, "#diff-web-main tbody tr")
            if cells[0] == f"service {service}" and cells[2] == "no container"
        ],
        timeout=60,
        what="the removed container desired against actual on edge-1's page",
    )  # fmt: skip
    assert differs[0][1].startswith("in the compose file")
    assert differs[0][3].startswith("✗")
    assert any(f"{service}: missing" in item for item in cell_texts(browser, "ul.drift li"))
    assert await project_containers(lab_docker) == [], "detect changed nothing"


def _rows(browser: Chrome, css: str) -> list[list[str]]:
    """Each row's cells' texts, read in one script (the live updates swap <main> any time)."""
    script = (
        "return [...document.querySelectorAll(arguments[0])]"
        ".map(r => [...r.cells].map(c => c.innerText.trim()));"
    )
    rows = browser.execute_script(script, css)
    assert isinstance(rows, list)
    return [[str(cell) for cell in row] for row in rows]
