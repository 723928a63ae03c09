"""What every page of the web view must hold in a real browser, at a desk's size and at a
phone's, and the screenshots taken while checking it: a page that fails a check is not pictured.

The screenshots go to a test's own folder, or to the docs' (``docs/images``) when
``PLAYGUARD_SCREENSHOTS=docs`` is set: that is how the docs' pictures are refreshed, so they
follow the code (docs/operations/web-view.md, "Screenshots")."""

from __future__ import annotations

import base64
import functools
import os
from importlib import resources
from pathlib import Path
from typing import Any

from selenium import webdriver

from tests.support.daemon import wait_for

SCREENSHOTS = "PLAYGUARD_SCREENSHOTS"
"""Set to ``docs``: the screenshots replace the docs' pictures."""

DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"

SIZES = {"": (1400, 1000), "-phone": (390, 844)}
"""A screenshot's name suffix -> the viewport (CSS pixels, at one device pixel each)."""

BETWEEN = (1000, 800)
"""A viewport between the two (a tablet, a narrow window): checked for overflow only."""

UNNAMED_CONTROLS = """
const named = (e) => {
  const label = e.getAttribute('aria-label') || e.getAttribute('title') ||
    [...(e.labels || [])].map((l) => l.innerText).join(' ');
  const own = e.tagName === 'BUTTON' ? e.innerText : e.type === 'submit' ? e.value : '';
  return (label + own).trim() !== '';
};
return [...document.querySelectorAll('input:not([type=hidden]), select, textarea, button')]
  .filter((e) => !named(e)).map((e) => e.outerHTML.slice(0, 120));
"""
"""Form controls without an accessible name: no label, aria-label or title, and (a button) no
text. A placeholder is no name: it is gone once something is typed."""

PAGE_FACTS = """
const root = document.documentElement;
return {
  lang: root.lang,
  h1: [...document.querySelectorAll('h1')].map((h) => h.innerText.trim()),
  mains: document.querySelectorAll('main').length,
  overflow: root.scrollWidth - window.innerWidth,
  wide: [...document.querySelectorAll('body *')]
    .filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1 &&
                   !e.closest('table, pre, .table-wrap'))
    .slice(0, 5).map((e) => e.tagName + '.' + e.className),
};
"""


AXE_RULES = ["wcag2a", "wcag2aa"]
"""The axe-core rules run on each page: WCAG 2 levels A and AA (names of form controls, colour
contrast, the document's language, landmarks' uniqueness and more)."""

AXE_RUN = """
const done = arguments[arguments.length - 1];
axe.run(document, {runOnly: {type: 'tag', values: arguments[0]}, resultTypes: ['violations']})
  .then((found) => done(found.violations.map((v) => ({
    id: v.id, help: v.help, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(' ')),
  }))))
  .catch((error) => done([{id: 'axe failed', help: String(error), nodes: []}]));
"""


@functools.cache
def axe_source() -> str:
    """axe-core, as the ``axe-selenium-python`` package ships it (the tests' extra): put into
    the page by WebDriver, which the Content-Security-Policy does not govern."""
    shipped = resources.files("axe_selenium_python") / "node_modules" / "axe-core" / "axe.min.js"
    return shipped.read_text(encoding="utf-8")


def axe_violations(browser: webdriver.Chrome) -> list[dict[str, Any]]:
    """What axe-core finds against ``AXE_RULES`` on the open page."""
    browser.execute_script(axe_source())
    found = browser.execute_async_script(AXE_RUN, AXE_RULES)
    assert isinstance(found, list), found
    return found


def set_color_scheme(browser: webdriver.Chrome, scheme: str) -> None:
    """The page as a browser that prefers ``scheme`` (``light``, ``dark``; empty: its own)."""
    features = [{"name": "prefers-color-scheme", "value": scheme}] if scheme else []
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": features})


def screenshot_folder(fallback: Path) -> Path:
    """Where this run's screenshots go: the docs' pictures, or ``fallback``."""
    return DOCS_IMAGES if os.environ.get(SCREENSHOTS) == "docs" else fallback


def console_errors(browser: webdriver.Chrome) -> list[str]:
    """The console's errors since the last call (a refused script or style, a failed fetch, an
    uncaught exception)."""
    entries = browser.get_log("browser")  # type: ignore[no-untyped-call]
    return [str(entry["message"]) for entry in entries if entry["level"] == "SEVERE"]


def set_viewport(browser: webdriver.Chrome, width: int, height: int) -> None:
    """The page's viewport at exactly ``width`` x ``height``; narrow ones as a phone (the
    viewport meta tag applies, touch is on)."""
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 700},
    )


def check_and_picture(browser: webdriver.Chrome, url: str, heading: str, shot: Path) -> None:
    """Open ``url`` at each of ``SIZES``: the page says its language, has one <main> and the
    ``heading`` as its one <h1>, logs no console error, is no wider than the screen, names
    every form control, and axe-core finds nothing against WCAG 2 A and AA in light and in
    dark; then its screenshot (light, from the top) is ``shot`` with the size's suffix (a PNG).
    At ``BETWEEN`` the page is no wider than the screen either."""
    console_errors(browser)
    try:
        for suffix, (width, height) in SIZES.items():
            set_viewport(browser, width, height)
            browser.get(url)
            facts = wait_for(
                lambda: (found := browser.execute_script(PAGE_FACTS))["h1"] and found,
                timeout=10,
                what=f"{url} loaded",
            )
            where = f"{url} at {width}x{height}"
            assert facts["lang"] == "en", where
            assert facts["mains"] == 1, where
            assert facts["h1"] == [heading], (where, facts["h1"])
            assert facts["overflow"] <= 0, (where, facts)
            unnamed = browser.execute_script(UNNAMED_CONTROLS)
            assert unnamed == [], (where, unnamed)
            errors = console_errors(browser)
            assert errors == [], (where, errors)
            # Taken light and before axe-core runs: its contrast rule scrolls to each text.
            set_color_scheme(browser, "light")
            picture = browser.execute_cdp_cmd("Page.captureScreenshot", {"format": "png"})
            for scheme in ("light", "dark"):
                set_color_scheme(browser, scheme)
                violations = axe_violations(browser)
                assert violations == [], (where, scheme, violations)
            set_color_scheme(browser, "")
            target = shot.with_name(shot.stem + suffix + ".png")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(base64.b64decode(picture["data"]))
        set_viewport(browser, *BETWEEN)
        browser.get(url)
        overflow = browser.execute_script(PAGE_FACTS)["overflow"]
        assert overflow <= 0, f"{url} at {BETWEEN}: {overflow} px wider than the screen"
    finally:
        set_color_scheme(browser, "")
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
