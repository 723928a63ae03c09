"""Acting from the web view in a real browser (Debian's chromium) against a real ``playguard run``
on the lab's redis-server: users written by ``playguard web add-user`` through standard input,
an operator who logs in and pauses a Marquee from its page, a viewer who sees no action and is
refused a crafted one, a form on another origin refused, a user removed from the file refused
without a restart, and a proxy's header from an untrusted address ignored. One daemon and one
browser serve the module.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import http.server
import json
import os
import stat
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis as AsyncRedis
from selenium import webdriver
from selenium.common.exceptions import (
    ElementNotInteractableException,
    StaleElementReferenceException,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from playguard_async.coordination.keys import (
    ROLLOUTS_KEY,
    last_cycle_key,
    operator_actions_key,
    pause_key,
    rollout_counts_key,
    rollout_key,
    rollout_marks_key,
)
from playguard_async.coordination.operator_actions import OperatorAction
from playguard_async.desired_state.model import Inventory
from playguard_async.operator.command_kit import EXIT_CONFIG
from playguard_async.phases.rollout_desk import RolloutDesk, Standing
from playguard_async.phases.rollout_record import Rollout
from playguard_lab import RedisServer, free_port
from tests.support.browser import cell_texts, chromium, mark, not_reloaded
from tests.support.cli import Playguard
from tests.support.daemon import PLAYGUARD, Daemon, DaemonRunner, marquee_entry, wait_for
from tests.support.page_checks import check_and_picture, screenshot_folder
from tests.support.probes import http_get, start_serving

pytestmark = pytest.mark.integration

PASSWORDS = {"otto": "otto's pass phrase", "vera": "véra-42-véra-42", "zed": "zed zed zed zed"}
ROLES = {"otto": "operator", "vera": "viewer", "zed": "operator"}
PAUSE_REASON = "disk swap <b>now</b>"


@dataclass
class Acting:
    daemon: Daemon
    base: str
    runner: DaemonRunner
    store: SyncRedis
    browser: webdriver.Chrome
    users: Path
    shots: Path


def add_user(users: Path, name: str, role: str, password: str, cwd: Path) -> str:
    """``playguard web add-user`` with the password on standard input (not a terminal)."""
    added = subprocess.run(
        [str(PLAYGUARD), "web", "add-user", name, role, "--file", str(users)],
        input=password + "\n",
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
        check=False,
    )
    assert added.returncode == 0, added.stderr
    return added.stdout


@pytest.fixture(scope="module")
def acting(
    tmp_path_factory: pytest.TempPathFactory,
    redis_server: RedisServer,
    require_binary: Callable[[str, str], str],
) -> Iterator[Acting]:
    chromium_path = require_binary("chromium", "chromium")
    driver_path = require_binary("chromedriver", "chromium-driver")
    workdir = tmp_path_factory.mktemp("web-actions")
    store = SyncRedis.from_url(redis_server.url, socket_timeout=2, socket_connect_timeout=2)
    store.flushall()
    users = workdir / "users"
    for name in ("otto", "vera"):
        add_user(users, name, ROLES[name], PASSWORDS[name], workdir)
    runner = DaemonRunner(workdir, redis_server.url)
    runner.write_inventory(["alpha", "beta"])
    try:
        daemon, base = start_serving(
            runner,
            phase_seconds=0.1,
            web_refresh_interval=1.0,
            web_credential_file=users,
            web_trusted_proxies=["127.0.0.2"],
            web_proxy_group_roles={"ops": "operator"},
        )
        with chromium(chromium_path, driver_path, workdir / "profile") as browser:
            yield Acting(daemon, base, runner, store, browser, users, workdir)
    finally:
        runner.kill_all()
        store.close()


def basic(name: str) -> str:
    return "Basic " + base64.b64encode(f"{name}:{PASSWORDS[name]}".encode()).decode()


def answer(
    url: str,
    *,
    headers: dict[str, str] | None = None,
    data: dict[str, str] | None = None,
) -> tuple[int, str]:
    body = None if data is None else urllib.parse.urlencode(data).encode()
    request = urllib.request.Request(url, data=body, headers=headers or {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read().decode()


def log_in(acting: Acting, name: str) -> webdriver.Chrome:
    browser = acting.browser
    browser.delete_all_cookies()
    browser.get(acting.base + "/")
    assert browser.current_url == acting.base + "/login", "a page without a user sends to /login"
    browser.find_element(By.NAME, "user").send_keys(name)
    browser.find_element(By.NAME, "password").send_keys(PASSWORDS[name])
    browser.find_element(By.CSS_SELECTOR, "#login button").click()
    # Read in one script: a live update may swap <main> (where the name is) at any moment.
    shown = wait_for(lambda: cell_texts(browser, "#user"), timeout=10, what=f"{name} logged in")
    assert shown == [name]
    return browser


def fill_and_press(
    browser: webdriver.Chrome, form_css: str, fields: dict[str, str], action: str
) -> None:
    """Type ``fields`` into the form and press its ``action`` button. A live update may swap
    the page's <main> before the first field has the focus (after that, the page waits for the
    form): then the form is found again and filled anew. A field is emptied by selecting what
    it holds and typing over it, never with WebDriver's clear(), which takes the focus away and
    lets a swap in between; chromedriver calls an element swapped out mid-command either stale
    or not interactable."""
    for _ in range(5):
        try:
            form = browser.find_element(By.CSS_SELECTOR, form_css)
            for name, value in fields.items():
                form.find_element(By.NAME, name).send_keys(Keys.CONTROL, "a", Keys.NULL, value)
            form.find_element(By.CSS_SELECTOR, f'button[value="{action}"]').click()
            return
        except (StaleElementReferenceException, ElementNotInteractableException):
            continue
    raise AssertionError(f"the form {form_css} was swapped under every try")


def row_buttons(browser: webdriver.Chrome, marquee: str) -> list[str]:
    """The values of ``marquee``'s row buttons on the fleet page, read in one script (a live
    update may swap the table at any moment)."""
    values: list[str] = browser.execute_script(
        "return Array.from(document.querySelectorAll("
        "`tr[data-marquee='${arguments[0]}'] button[name=row]`), b => b.value);",
        marquee,
    )
    return values


def press_in_row(browser: webdriver.Chrome, marquee: str, action: str) -> None:
    """Press ``marquee``'s row button for ``action``, found again if a live update swapped it."""
    for _ in range(5):
        try:
            browser.find_element(
                By.CSS_SELECTOR, f'tr[data-marquee="{marquee}"] button[value="{action} {marquee}"]'
            ).click()
            return
        except (StaleElementReferenceException, ElementNotInteractableException):
            continue
    raise AssertionError(f"{marquee}'s {action} button was swapped under every try")


def recorded_outcome(store: SyncRedis, marquee: str) -> str | None:
    raw = store.get(last_cycle_key(marquee))
    return None if raw is None else str(json.loads(raw)["outcome"])


def test_add_user_reads_the_password_from_stdin_and_writes_mode_0600(acting: Acting) -> None:
    said = add_user(acting.users, "zed", "operator", PASSWORDS["zed"], acting.shots)
    assert said == f"added zed (operator) to {acting.users}\n"
    lines = acting.users.read_text().splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["otto", "operator"],
        ["vera", "viewer"],
        ["zed", "operator"],
    ]
    assert all(line.split()[2].startswith("$argon2id$") for line in lines)
    assert not any(password in acting.users.read_text() for password in PASSWORDS.values())
    assert stat.S_IMODE(os.stat(acting.users).st_mode) == 0o600
    # The daemon reads the file again at the next request: zed is admitted without a restart.
    assert http_get(acting.base + "/healthz")[0] == 200
    assert answer(acting.base + "/csrf", headers={"Authorization": basic("zed")})[0] == 200


def test_an_operator_pauses_a_marquee_from_its_page_and_the_next_cycle_ends_paused(
    acting: Acting,
) -> None:
    browser = log_in(acting, "otto")
    wait_for(
        lambda: recorded_outcome(acting.store, "alpha") == "ok",
        timeout=20,
        what="a first ok cycle of alpha",
    )
    browser.save_screenshot(str(acting.shots / "fleet-logged-in.png"))
    assert browser.find_elements(By.ID, "rows"), "an operator's fleet page has its form"
    browser.get(acting.base + "/marquee/alpha")
    fill_and_press(browser, "#act-marquee", {"reason": PAUSE_REASON, "for": "30m"}, "pause")
    wait_for(
        lambda: browser.find_elements(By.CSS_SELECTOR, "#results pre"),
        timeout=15,
        what="the pause's result on the page",
    )
    assert browser.current_url == acting.base + "/marquee/alpha"
    result = cell_texts(browser, "#results pre")[0]
    assert result.startswith("paused by otto@"), result
    assert PAUSE_REASON in result
    mark(browser)
    # A cycle that finds its Marquee paused at its start runs no phase and is not recorded
    # (its last real outcome stays on the page): the daemon tells it in its log.
    ended = wait_for(
        lambda: [
            line
            for line in acting.daemon.events("cycle.finished", outcome="paused")
            if line.get("marquee") == "alpha"
        ],
        timeout=20,
        what="alpha's next cycle ending paused",
    )
    assert "paused by otto@" in ended[0]["reason"]
    wait_for(
        lambda: PAUSE_REASON in "".join(cell_texts(browser, "#paused")),
        timeout=10,
        what="the page showing the pause live",
    )
    assert not_reloaded(browser), "the page was reloaded"
    playguard = Playguard(acting.runner, acting.daemon.config)
    [alpha] = [
        m
        for m in json.loads(playguard("status", "--json").stdout)["marquees"]
        if m["name"] == "alpha"
    ]
    assert alpha["paused"]["reason"] == PAUSE_REASON
    assert alpha["paused"]["user"] == "otto"
    # Resumed from its row of the fleet page, where a paused row offers Resume, not Pause.
    browser.get(acting.base + "/")
    press_in_row(browser, "alpha", "resume")
    wait_for(
        lambda: acting.store.get(pause_key("alpha")) is None,
        timeout=15,
        what="alpha resumed from its row of the fleet page",
    )
    wait_for(
        lambda: row_buttons(browser, "alpha") == ["pause alpha", "cycle alpha", "plan alpha"],
        timeout=15,
        what="alpha's row offering Pause again",
    )
    # Both are kept for `why` as the signed-in user's, not as the daemon process's.
    kept = [
        OperatorAction.parse("alpha", raw)
        for raw in acting.store.lrange(operator_actions_key("alpha"), 0, -1)
    ]
    assert [(a.action, a.by.split("@")[0]) for a in kept if a] == [
        ("resume", "otto"),
        ("pause", "otto"),
    ]


def test_a_viewer_sees_no_action_and_a_crafted_post_is_refused(acting: Acting) -> None:
    browser = log_in(acting, "vera")
    assert browser.find_elements(By.ID, "fleet")
    assert not browser.find_elements(By.CSS_SELECTOR, 'form[action="/action"]')
    # The viewer's own session token (from the log-out form), sent by the page's own origin.
    status = browser.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        const body = new URLSearchParams({
            action: "pause", marquee: "beta", reason: "crafted",
            csrf: document.querySelector('form.who input[name="csrf"]').value,
        });
        fetch("/action", {method: "POST", body}).then(r => done(r.status));
        """
    )
    assert status == 403
    token = answer(acting.base + "/csrf", headers={"Authorization": basic("vera")})[1].strip()
    crafted = answer(
        acting.base + "/action",
        headers={"Authorization": basic("vera"), "Origin": acting.base},
        data={"action": "pause", "marquee": "beta", "reason": "crafted", "csrf": token},
    )
    assert crafted == (403, "refused: pause needs the role operator\n")
    assert acting.store.get(pause_key("beta")) is None


@pytest.fixture
def other_origin(acting: Acting) -> Iterator[str]:
    """A page on another loopback port whose form posts a pause of beta to the daemon as soon
    as it loads."""
    page = f"""<!doctype html><html><body>
<form id="f" method="post" action="{acting.base}/action">
<input name="action" value="pause"><input name="marquee" value="beta">
<input name="reason" value="cross-site"><input name="csrf" value="guess">
</form><script>document.getElementById("f").submit();</script></body></html>"""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = page.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            """Quiet."""

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_form_on_another_origin_is_refused_and_pauses_nothing(
    acting: Acting, other_origin: str
) -> None:
    browser = log_in(acting, "otto")
    browser.get(other_origin)
    wait_for(
        lambda: "refused" in browser.find_element(By.TAG_NAME, "body").text,
        timeout=10,
        what="the daemon's refusal of the cross-origin form",
    )
    assert browser.find_element(By.TAG_NAME, "body").text.startswith("refused: not from a page")
    assert acting.store.get(pause_key("beta")) is None


def test_a_user_removed_from_the_file_is_refused_at_the_next_request(acting: Acting) -> None:
    headers = {"Authorization": basic("zed")}
    if answer(acting.base + "/csrf", headers=headers)[0] != 200:
        add_user(acting.users, "zed", "operator", PASSWORDS["zed"], acting.shots)
    assert answer(acting.base + "/", headers=headers)[0] == 200
    kept = [line for line in acting.users.read_text().splitlines() if not line.startswith("zed ")]
    replacement = acting.users.with_name("users.new")
    replacement.write_text("".join(f"{line}\n" for line in kept))
    replacement.chmod(0o600)
    replacement.replace(acting.users)
    assert answer(acting.base + "/", headers=headers)[0] == 401
    assert answer(acting.base + "/", headers={"Authorization": basic("otto")})[0] == 200
    assert acting.daemon.process.poll() is None, "no restart"


def proxied_get(base: str, source: str) -> int:
    host, _, port = base.removeprefix("http://").partition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10, source_address=(source, 0))
    try:
        connection.request(
            "GET", "/csrf", headers={"X-Forwarded-User": "mallory", "X-Forwarded-Groups": "ops"}
        )
        return connection.getresponse().status
    finally:
        connection.close()


def test_the_proxy_header_is_believed_only_from_a_trusted_address(acting: Acting) -> None:
    assert [proxied_get(acting.base, "127.0.0.1") for _ in range(3)] == [401, 401, 401]
    ignored = acting.daemon.events("web.proxy_header_ignored")
    assert [(line["peer"], line["user"]) for line in ignored] == [("127.0.0.1", "'mallory'")]
    assert proxied_get(acting.base, "127.0.0.2") == 200


def test_plan_and_cycle_now_run_the_clis_code_in_the_daemon(acting: Acting) -> None:
    headers = {"Authorization": basic("otto"), "Origin": acting.base}
    token = answer(acting.base + "/csrf", headers=headers)[1].strip()
    headers["X-CSRF-Token"] = token
    planned = answer(
        acting.base + "/action", headers=headers, data={"action": "plan", "marquee": "beta"}
    )
    assert planned[0] == 200, planned
    # The witness phases would each act once: the diff phase by phase, then the verdict (or,
    # when the daemon's own cycle of beta held the lock just then, that).
    assert planned[1] in {
        "first\n  witnessed beta\nsecond\n  witnessed beta\n"
        "beta: 2 changes pending (first 1, second 1)\n",
    } or planned[1].startswith("beta: error: locked by"), planned
    cycled = answer(
        acting.base + "/action", headers=headers, data={"action": "cycle", "marquee": "beta"}
    )
    assert cycled[0] == 200, cycled
    assert cycled[1].startswith(("beta: ok; ", "beta is locked by")), cycled
    unknown = answer(
        acting.base + "/action", headers=headers, data={"action": "cycle", "marquee": "nope"}
    )
    assert unknown[0] == 409
    assert "nope" in unknown[1]
    unlock = answer(
        acting.base + "/action", headers=headers, data={"action": "unlock", "marquee": "beta"}
    )
    assert unlock == (403, "refused: unlock needs the role admin\n")
    assert acting.daemon.process.poll() is None, "the daemon kept its signal handlers and runs"


def test_a_file_of_one_shared_secret_stops_the_start_naming_the_command(acting: Acting) -> None:
    old = acting.shots / "old-credential"
    old.write_text("correct horse battery\n")
    old.chmod(0o600)
    daemon = acting.runner.start(
        "old", http_address=f"127.0.0.1:{free_port()}", web_credential_file=old
    )
    assert daemon.wait(30) == EXIT_CONFIG
    [line] = daemon.stderr().splitlines()
    assert line == (
        f"Error: {old}: line 1: not a `name role secret-hash` line, as in the old format of one "
        f"shared secret: write named users with `playguard web add-user NAME ROLE --file {old}` "
        "(roles viewer, operator, admin)"
    )


ROLLOUT_SCOPE = "web@main"


async def open_a_rollout(redis_url: str) -> None:
    """A rollout of Playspec ``web`` opened on the daemon's Redis as a cycle's rollout desk
    opens one (its first wave admitting alpha): what the fleet page lists with its actions."""
    world = Inventory.model_validate({
        "marquees": [marquee_entry(name) for name in ("alpha", "beta")],
        "playspecs": [{"name": "web", "repo": "https://git.example/web.git",
                       "rollout": {"waves": [1, "100%"], "bake": 3600}}],
        "playgrounds": [{"name": f"web-{name}", "playspec": "web", "marquee": name,
                         "branch": "main"} for name in ("alpha", "beta")],
    })  # fmt: skip
    redis = AsyncRedis.from_url(redis_url, socket_timeout=2)
    try:
        for name in ("alpha", "beta"):
            playground = world.playgrounds_on(name)[0]
            policy = world.playspec_of(playground).rollout
            assert policy is not None
            standing = Standing(has_good=True, good_release="0" * 64, has_previous=False,
                                rolls_back=True)  # fmt: skip
            desk = RolloutDesk(redis, 2.0, world, world.marquee(name), dry_run=False)
            await desk.verdict(playground, policy, "1" * 64, "c" * 40, standing)
    finally:
        await redis.aclose()


@pytest.fixture
def rollout(acting: Acting) -> Iterator[str]:
    """A rollout not done on the daemon's Redis (``open_a_rollout``), removed at the end: its
    scope."""
    asyncio.run(open_a_rollout(acting.runner.redis_url))
    try:
        yield ROLLOUT_SCOPE
    finally:
        keys = (rollout_key, rollout_marks_key, rollout_counts_key)
        acting.store.delete(*(key(ROLLOUT_SCOPE) for key in keys))
        acting.store.srem(ROLLOUTS_KEY, ROLLOUT_SCOPE)


def stored_rollout(store: SyncRedis, scope: str) -> Rollout:
    raw = store.get(rollout_key(scope))
    record = None if raw is None else Rollout.parse(scope, raw)
    assert record is not None, raw
    return record


def rollout_shown(browser: webdriver.Chrome, scope: str, status: str) -> list[str]:
    return cell_texts(browser, f'tr[data-rollout="{scope}"] .rollout-{status}')


def rollout_listed(acting: Acting, scope: str) -> None:
    """Wait until the open fleet page lists the rollout Redis holds now (not one a test before
    opened: the picture reads rollouts with each whole read of the fleet)."""
    meant = stored_rollout(acting.store, scope).id
    script = f'return [...document.querySelectorAll(\'tr[data-rollout="{scope}"] '
    script += "input[name=rollout]')].map((e) => e.value);"
    wait_for(
        lambda: acting.browser.execute_script(script) == [meant],
        timeout=15,
        what=f"rollout {meant} on the fleet page",
    )


def test_every_page_reads_on_a_desk_and_a_phone_and_is_pictured(
    acting: Acting, rollout: str
) -> None:
    """Each page (login, the fleet with a rollout and every action, a Marquee, its why page) at
    1400x1000 and at 390x844: its language, one <main>, its heading, no console error, nothing
    wider than the screen, every form control named; screenshots of each (``page_checks``)."""
    folder = screenshot_folder(acting.shots / "screenshots")
    browser = acting.browser
    browser.delete_all_cookies()
    check_and_picture(browser, acting.base + "/login", "playguard", folder / "web-view-login.png")
    log_in(acting, "otto")
    browser.get(acting.base + "/")
    rollout_listed(acting, rollout)
    check_and_picture(browser, acting.base + "/", "Fleet", folder / "web-view.png")
    check_and_picture(
        browser, acting.base + "/marquee/alpha", "alpha", folder / "web-view-marquee.png"
    )
    check_and_picture(
        browser, acting.base + "/marquee/alpha/why", "Why did alpha change?",
        folder / "web-view-why.png",
    )  # fmt: skip


def test_a_rollouts_abort_asks_first_and_its_pause_acts_from_its_row(
    acting: Acting, rollout: str
) -> None:
    """The rollout's row holds its four actions for an operator, each needing a reason; abort
    asks first, and a no sends nothing; pause, sent from the row, pauses the rollout in Redis."""
    browser = log_in(acting, "otto")
    rollout_listed(acting, rollout)
    row = f'tr[data-rollout="{rollout}"]'
    assert cell_texts(browser, f"{row} button") == ["promote", "pause", "resume", "abort"]
    fill_and_press(browser, f"{row} form", {"reason": "bad canary"}, "rollout-abort")
    alert = wait_for(lambda: browser.switch_to.alert, timeout=5, what="abort asking first")
    assert alert.text.startswith("Abort rollout "), alert.text
    alert.dismiss()
    assert stored_rollout(acting.store, rollout).status == "running", "a no aborted nothing"
    fill_and_press(browser, f"{row} form", {"reason": "look at the canary"}, "rollout-pause")
    result = wait_for(
        lambda: cell_texts(browser, "#results .newest"), timeout=15, what="the pause's result"
    )
    assert "paused" in result[0], result
    wait_for(
        lambda: stored_rollout(acting.store, rollout).status == "paused",
        timeout=15,
        what="the rollout paused from its row",
    )
    wait_for(
        lambda: rollout_shown(browser, rollout, "paused"),
        timeout=15,
        what="the rollout shown paused",
    )
