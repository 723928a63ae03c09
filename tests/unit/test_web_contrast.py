"""The web view's colours read to WCAG 2 AA: every pair of a text colour and a background it is
drawn on, as the stylesheet's variables set them, light and dark, has a contrast ratio of at
least 4.5:1 (text of normal size). The browser tests run axe-core on each page too
(``tests/support/page_checks.py``); this test also covers pairs that no page of a test's fleet
shows (a failed outcome on a hovered row, a danger button pressed)."""

from __future__ import annotations

import re
from importlib import resources

import pytest

AA_NORMAL_TEXT = 4.5

TEXT_ON = {
    "--text": ("--bg", "--panel", "--frame", "--code-bg", "--warn-bg", "--bad-bg", "--held-bg",
               "--detect-bg"),
    "--muted": ("--bg", "--panel", "--frame"),
    "--accent": ("--bg", "--panel", "--frame"),
    "--ok": ("--bg", "--panel", "--frame"),
    "--bad": ("--bg", "--panel", "--frame", "--bad-bg"),
    "--warn": ("--warn-bg",),
    "--held": ("--held-bg",),
    "--detect": ("--detect-bg",),
    "--accent-text": ("--accent",),
    "--panel": ("--bad",),
    "--nav-text": ("--nav",),
    "--nav-muted": ("--nav",),
}  # fmt: skip
"""Text colour -> the backgrounds the stylesheet draws it on: the page, panels, table heads and
hovered rows (``--frame``), banners and badges; a pressed button's words on its colour; the top
bar's."""


def stylesheet() -> str:
    return (resources.files("playguard_async.web") / "static" / "web_view.css").read_text()


def variables(block: str) -> dict[str, str]:
    """The colour variables ``block`` sets, each as ``#rrggbb`` (``#fff`` written out)."""
    found = re.findall(r"(--[\w-]+):\s*#([0-9a-fA-F]{6}|[0-9a-fA-F]{3})\b", block)
    return {
        name: "#" + (hex if len(hex) == 6 else "".join(c * 2 for c in hex)) for name, hex in found
    }


def schemes() -> dict[str, dict[str, str]]:
    """The colour variables by scheme: light (the first ``:root``), dark (light's, overridden
    by the ``:root`` under ``prefers-color-scheme: dark``)."""
    css = stylesheet()
    light = variables(css.split(":root {", 1)[1].split("}", 1)[0])
    dark_block = css.split("@media (prefers-color-scheme: dark)", 1)[1]
    dark = {**light, **variables(dark_block.split(":root {", 1)[1].split("}", 1)[0])}
    return {"light": light, "dark": dark}


def luminance(colour: str) -> float:
    """WCAG 2's relative luminance of ``#rrggbb``."""
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(one: str, other: str) -> float:
    lighter, darker = sorted((luminance(one), luminance(other)), reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


def test_the_ratio_is_wcags() -> None:
    assert contrast("#000000", "#ffffff") == pytest.approx(21.0)
    assert contrast("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_text_colour_reads_on_every_background_it_is_drawn_on(scheme: str) -> None:
    colours = schemes()[scheme]
    named = {name for pair in TEXT_ON.items() for name in (pair[0], *pair[1])}
    assert named <= colours.keys(), f"not set in the stylesheet: {named - colours.keys()}"
    low = {
        f"{text} on {background}": round(contrast(colours[text], colours[background]), 2)
        for text, backgrounds in TEXT_ON.items()
        for background in backgrounds
        if contrast(colours[text], colours[background]) < AA_NORMAL_TEXT
    }
    assert low == {}, f"{scheme}: below {AA_NORMAL_TEXT}:1"
