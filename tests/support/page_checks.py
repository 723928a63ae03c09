"""What every page of the web view must hold in a real browser, at a desk's size and at a
phone's, and the screenshots taken while checking it: a page that fails a check is not pictured.

The screenshots go to a test's own folder, or to the docs' (``docs/images``) when
``PLAYGUARD_SCREENSHOTS=docs`` is set: that is how the docs' pictures are refreshed, so they
follow the code (docs/operations/web-view.md, "Screenshots")."""

from __future__ import annotations

import base64
import os
from pathlib import Path

from selenium import webdriver

from tests.support.daemon import wait_for

SCREENSHOTS = "PLAYGUARD_SCREENSHOTS"
"""Set to ``docs``: the screenshots replace the docs' pictures."""

DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"

SIZES = {"": (1400, 1000), "-phone": (390, 844)}
"""A screenshot's name suffix -> the viewport (CSS pixels, at one device pixel each)."""

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
    ``heading`` as its one <h1>, logs no console error, is no wider than the screen, and names
    every form control; then its screenshot is ``shot`` with the size's suffix (a PNG)."""
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
            picture = browser.execute_cdp_cmd("Page.captureScreenshot", {"format": "png"})
            target = shot.with_name(shot.stem + suffix + ".png")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(base64.b64decode(picture["data"]))
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
