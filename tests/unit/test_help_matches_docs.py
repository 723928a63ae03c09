"""Every command's ``--help`` agrees with the docs on exit statuses, and points at the docs in a
way a pip-installed user can follow (a page by its path in the site, a section by its title):
the help text and the docs pages are read here, side by side, for every command of the CLI."""

from __future__ import annotations

import re
from collections.abc import Iterator

import click
import pytest

from playguard_async.engine.results import Outcome
from playguard_async.operator.cli import cli
from tests.support.docs import headings, page

CLI_PAGE = page("reference/cli.md")
STEERING_PAGE = page("concepts/steering.md")
EXIT_WORDS = re.compile(r"(?i)\bexit\b")
CODE = re.compile(r"(?<![\w-])(\d+)(?![\w-])")
PAGE_REFERENCE = re.compile(r"see the docs, page ([\w/.-]+\.md), section \"([^\"]+)\"")


def commands(command: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[str, str]]:
    """(command path, its help in one line) for the command and everything under it."""
    yield " ".join(path) or "playguard", " ".join((command.help or "").split())
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from commands(sub, (*path, name))


HELPS = dict(commands(cli))


def table_rows(text: str, heading: str) -> dict[int, str]:
    """Exit status -> its meaning, from the table in ``text`` whose header starts ``heading``."""
    start = text.index(f"| {heading} |")
    rows: dict[int, str] = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        code, meaning = (cell.strip() for cell in line.strip("|").split("|", 1))
        rows[int(code)] = meaning
    return rows


GENERAL = table_rows(CLI_PAGE, "exit status")
PLAN = table_rows(STEERING_PAGE, "`plan` exit status")


def exit_sentences(help_text: str) -> list[str]:
    return [sentence for sentence in re.split(r"\.\s", help_text) if EXIT_WORDS.search(sentence)]


def codes_in(help_text: str) -> set[int]:
    return {int(code) for s in exit_sentences(help_text) for code in CODE.findall(s)}


def documented_codes(command: str) -> set[int]:
    """The statuses the docs give ``command``: its own table (``plan``), else the general
    table's rows that name no command and those that name it."""
    if command == "plan":
        return set(PLAN)
    named = {
        code: re.findall(r"(?:^|; )`([a-z ]+)`:", meaning) for code, meaning in GENERAL.items()
    }
    return {code for code, names in named.items() if not names or command in names}


def outcomes(text: str) -> set[str]:
    return set(re.findall(r"[a-z_]+", text[text.index("(") : text.index(")")]))


@pytest.mark.parametrize("command", sorted(HELPS))
def test_help_names_only_exit_statuses_the_docs_give_the_command(command: str) -> None:
    named = codes_in(HELPS[command])

    assert named <= documented_codes(command), HELPS[command]


@pytest.mark.parametrize("command", sorted(c for c in HELPS if 2 in codes_in(HELPS[c])))
def test_help_gives_exit_status_2_the_docs_meaning(command: str) -> None:
    [sentence] = [s for s in exit_sentences(HELPS[command]) if "2" in CODE.findall(s)][:1]
    if command == "plan":
        assert "2 changes pending" in sentence
        assert PLAN[2] == "changes pending"
    else:
        assert "2 bad usage" in sentence
        assert GENERAL[2] == "bad usage"


def test_plan_help_gives_each_status_the_docs_meaning() -> None:
    for code, meaning in PLAN.items():
        first = meaning.split(":")[0]
        assert f"{code} {first}" in HELPS["plan"], (code, meaning)


def test_cycle_help_and_docs_list_the_same_outcomes_for_exit_status_4() -> None:
    """Every outcome but ok, locked (3) and Redis away (an error, 1) ends ``cycle`` with 4."""
    ends_with_4 = {o.value for o in Outcome} - {"ok", "locked", "redis_unavailable"}
    help_text = HELPS["cycle"]
    said = help_text[help_text.index("4 when") :]

    assert outcomes(said) == ends_with_4
    assert outcomes(GENERAL[4]) == ends_with_4


def test_no_help_points_at_the_readme() -> None:
    """The README is a page of links now; a pip-installed user has the site, not the clone."""
    assert [command for command, text in HELPS.items() if "README" in text] == []


@pytest.mark.parametrize("command", sorted(c for c in HELPS if "see the docs" in HELPS[c]))
def test_help_points_at_a_docs_page_and_section_that_exist(command: str) -> None:
    help_text = HELPS[command]
    references = PAGE_REFERENCE.findall(help_text)
    pages = headings()

    assert references, f"{command}: name the page and its section: {help_text}"
    assert help_text.count("see the docs") == len(references)
    for path, title in references:
        assert path in pages, f"{command}: no page docs/{path}"
        assert title in pages[path], f"{command}: docs/{path} has no section {title!r}"
