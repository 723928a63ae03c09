"""Every link from the README or a docs page to a file of the repository names a file that
exists: mkdocs checks the links between pages and their anchors (``--strict``), but not a link
out of docs/ (to bench/README.md, a script, a test), nor any link of the README, which GitHub
shows as it is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.docs import DOCS, ROOT

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:")
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def file_links(markdown: str) -> list[str]:
    """The link targets that name a file (no URL, no anchor of the page itself), code left out."""
    prose = FENCE.sub("", markdown)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    targets = [target.split("#", 1)[0] for target in LINK.findall(prose)]
    return [target for target in targets if target and not SCHEME.match(target)]


def broken(page: Path, markdown: str) -> list[str]:
    """The file links of ``markdown``, written in ``page``, that name no file of the repository."""
    named = [(target, (page.parent / target).resolve()) for target in file_links(markdown)]
    return [t for t, path in named if not path.is_file() or not path.is_relative_to(ROOT)]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_link_to_a_repository_file_names_one_that_exists(page: Path) -> None:
    assert broken(page, page.read_text(encoding="utf-8")) == []


def test_the_readme_links_into_the_site() -> None:
    assert len(file_links((ROOT / "README.md").read_text(encoding="utf-8"))) > 20


@pytest.mark.parametrize(
    ("markdown", "found"),
    [
        ("[a](docs/index.md) and ![b](docs/x.png)", ["docs/index.md", "docs/x.png"]),
        ("[a](https://example.com/x.md) [b](#anchor) [c](mailto:x@example.com)", []),
        ("[a](bench/README.md#http-flood)", ["bench/README.md"]),
        ("```\n[a](not/a/link.md)\n```\n`[b](nor/this.md)`", []),
    ],
)  # fmt: skip
def test_file_links_are_told_from_urls_anchors_and_code(markdown: str, found: list[str]) -> None:
    assert file_links(markdown) == found


def test_a_link_to_a_missing_file_or_out_of_the_repository_is_reported() -> None:
    page = DOCS / "reference" / "cli.md"
    markdown = (
        "[ok](../../bench/README.md) [gone](../../no/such/file.py) [out](../../../etc/hostname)"
    )
    assert broken(page, markdown) == ["../../no/such/file.py", "../../../etc/hostname"]
