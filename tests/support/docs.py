"""The docs site's pages as tests read them: a page's text, one of its sections by title, its
code blocks, and the site built into a directory of the test's own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def page(path: str) -> str:
    """The Markdown of ``docs/<path>``."""
    return (DOCS / path).read_text(encoding="utf-8")


def section(path: str, title: str) -> str:
    """The body of the ``## title`` section of a page, up to the next ``##`` heading."""
    text = page(path)
    marker = f"\n## {title}\n"
    assert marker in text, f"docs/{path} has no section {title!r}"
    return text.split(marker, 1)[1].split("\n## ", 1)[0]


def code_blocks(text: str, language: str) -> list[str]:
    """The fenced blocks of ``language`` in ``text``, in order."""
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


def headings() -> dict[str, set[str]]:
    """Each page (its path under docs/) and the titles of its headings."""
    return {
        path.relative_to(DOCS).as_posix(): set(
            re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), flags=re.MULTILINE)
        )
        for path in DOCS.rglob("*.md")
    }


def build_site(
    site_dir: Path, config: Path = ROOT / "mkdocs.yml"
) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of the site ``config`` describes (the repository's) into
    ``site_dir``, run as ``python -m`` from the repository, so that the hook writes the reference
    from this checkout's code."""
    command = ["build", "--strict", "--config-file", str(config), "--site-dir", str(site_dir)]
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", *command],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # Material's notice about its successor
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
