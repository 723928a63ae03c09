"""A real browser for the web view's tests: Debian's chromium, driven through Debian's
chromedriver by Selenium (given both paths, Selenium's driver manager downloads nothing), headless,
with a new empty profile and nothing that talks to the network by itself."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,900",
)


@contextlib.contextmanager
def chromium(chromium_path: str, driver_path: str, profile: Path) -> Iterator[webdriver.Chrome]:
    """A headless chromium with ``profile`` as its (new) user data directory; quit at the end."""
    options = webdriver.ChromeOptions()
    options.binary_location = chromium_path
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    profile.mkdir(parents=True, exist_ok=True)
    options.add_argument(f"--user-data-dir={profile}")
    # The page's console, read by ``page_checks.console_errors``.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    try:
        driver.set_page_load_timeout(20)
        yield driver
    finally:
        driver.quit()


def cell_texts(browser: webdriver.Chrome, css: str) -> list[str]:
    """The text of what ``css`` selects, read in one script: the live updates swap <main> at
    any moment, which would leave element handles found one call earlier stale."""
    script = "return [...document.querySelectorAll(arguments[0])].map(e => e.innerText.trim());"
    texts = browser.execute_script(script, css)
    assert isinstance(texts, list)
    return [str(text) for text in texts]


def not_reloaded(browser: webdriver.Chrome) -> bool:
    """Whether the page marked by ``mark`` is still the page that was marked."""
    return bool(browser.execute_script("return window.loadedOnce === true;"))


def mark(browser: webdriver.Chrome) -> None:
    """Mark the page, so that a reload (which drops the mark) shows."""
    browser.execute_script("window.loadedOnce = true;")
