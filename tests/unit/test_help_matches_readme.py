"""Every command's ``--help`` agrees with the README on exit statuses, and points at the README
in a way a pip-installed user can follow (the project's README, a section by its title): the
help text and the README are read here, side by side, for every command of the CLI."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from playguard_async.engine.results import Outcome
from playguard_async.operator.cli import cli

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
EXIT_WORDS = re.compile(r"(?i)\bexit\b")
CODE = re.compile(r"(?<![\w-])(\d+)(?![\w-])")
SECTION_REFERENCE = re.compile(r"see the project's README, section \"([^\"]+)\"")


def commands(command: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[str, str]]:
    """(command path, its help in one line) for the command and everything under it."""
    yield " ".join(path) or "playguard", " ".join((command.help or "").split())
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from commands(sub, (*path, name))


HELPS = dict(commands(cli))


def table_rows(heading: str) -> dict[int, str]:
    """Exit status -> its meaning, from the README table whose header row starts ``heading``."""
    start = README.index(f"| {heading} |")
    rows: dict[int, str] = {}
    for line in README[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        code, meaning = (cell.strip() for cell in line.strip("|").split("|", 1))
        rows[int(code)] = meaning
    return rows


GENERAL = table_rows("exit status")
PLAN = table_rows("`plan` exit status")


def exit_sentences(help_text: str) -> list[str]:
    return [sentence for sentence in re.split(r"\.\s", help_text) if EXIT_WORDS.search(sentence)]


def codes_in(help_text: str) -> set[int]:
    return {int(code) for s in exit_sentences(help_text) for code in CODE.findall(s)}


def readme_codes(command: str) -> set[int]:
    """The statuses the README gives ``command``: its own table (``plan``), else the general
    table's rows that name no command and those that name it."""
    if command == "plan":
        return set(PLAN)
    named = {code: re.match(r"`([a-z ]+)`:", meaning) for code, meaning in GENERAL.items()}
    return {code for code, name in named.items() if name is None or name[1] == command}


def outcomes(text: str) -> set[str]:
    return set(re.findall(r"[a-z_]+", text[text.index("(") : text.index(")")]))


@pytest.mark.parametrize("command", sorted(HELPS))
def test_help_names_only_exit_statuses_the_readme_gives_the_command(command: str) -> None:
    named = codes_in(HELPS[command])

    assert named <= readme_codes(command), HELPS[command]


@pytest.mark.parametrize("command", sorted(c for c in HELPS if 2 in codes_in(HELPS[c])))
def test_help_gives_exit_status_2_the_readmes_meaning(command: str) -> None:
    [sentence] = [s for s in exit_sentences(HELPS[command]) if "2" in CODE.findall(s)][:1]
    if command == "plan":
        assert "2 changes pending" in sentence
        assert PLAN[2] == "changes pending"
    else:
        assert "2 bad usage" in sentence
        assert GENERAL[2] == "bad usage"


def test_plan_help_gives_each_status_the_readmes_meaning() -> None:
    for code, meaning in PLAN.items():
        first = meaning.split(":")[0]
        assert f"{code} {first}" in HELPS["plan"], (code, meaning)


def test_cycle_help_and_readme_list_the_same_outcomes_for_exit_status_4() -> None:
    """Every outcome but ok, locked (3) and Redis away (an error, 1) ends ``cycle`` with 4."""
    ends_with_4 = {o.value for o in Outcome} - {"ok", "locked", "redis_unavailable"}
    help_text = HELPS["cycle"]
    said = help_text[help_text.index("4 when") :]

    assert outcomes(said) == ends_with_4
    assert outcomes(GENERAL[4]) == ends_with_4


@pytest.mark.parametrize("command", sorted(c for c in HELPS if "README" in HELPS[c]))
def test_help_points_at_a_readme_section_that_exists_by_its_title(command: str) -> None:
    help_text = HELPS[command]
    sections = SECTION_REFERENCE.findall(help_text)
    headings = set(re.findall(r"^#+ (.+)$", README, flags=re.MULTILINE))

    assert sections, f"{command}: name the README's section: {help_text}"
    assert help_text.count("README") == len(sections)
    assert set(sections) <= headings
