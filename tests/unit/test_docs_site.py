"""The built docs site lists everything the code has: every command and option, setting,
inventory field, metric, log event and HTTP route appears on its reference page, because the
pages' tables are written from the code (scripts/docs_hooks.py). The site is built here with
``mkdocs build --strict``, into a directory of the test's own."""

from __future__ import annotations

import functools
import html
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import yaml

from playguard_async.desired_state.model import Inventory
from playguard_async.operator.cli import cli
from playguard_async.settings import ENV_PREFIX, Settings
from tests.support.docs import DOCS, ROOT, build_site
from tests.support.metrics import with_every_series

SUFFIX = {"counter": "_total", "info": "_info"}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("site")
    built = build_site(directory)
    assert built.returncode == 0, built.stderr[-3000:]
    return directory


@functools.cache
def text_of(site: Path, page: str) -> str:
    """A built page as the reader sees it: tags dropped, entities decoded."""
    markup = (site / page / "index.html").read_text(encoding="utf-8")
    main = markup.split('<article class="md-content__inner', 1)[1].split("</article>", 1)[0]
    return html.unescape(re.sub(r"<[^>]+>", "", main))


def commands(command: click.Command, path: tuple[str, ...]) -> Iterator[tuple[str, click.Command]]:
    yield " ".join(path), command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from commands(sub, (*path, name))


COMMANDS = dict(commands(cli, ("playguard",)))


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_every_command_and_option_is_on_the_cli_page(site: Path, path: str) -> None:
    page = text_of(site, "reference/cli")
    command = COMMANDS[path]
    assert f"{path}\n" in page or f"{path}¶" in page, f"no heading for {path}"
    section = page.split(f"{path}¶", 1)[1]
    for param in command.params:
        for name in (*param.opts, *param.secondary_opts):
            shown = param.human_readable_name if isinstance(param, click.Argument) else name
            assert shown in section.split("¶", 1)[0], f"{path}: {shown} missing"


@pytest.mark.parametrize("name", sorted(Settings.model_fields))
def test_every_setting_is_on_the_settings_page_with_its_variable(site: Path, name: str) -> None:
    page = text_of(site, "reference/settings")
    assert re.search(rf"^{name}\s*\n\s*{ENV_PREFIX}{name.upper()}\s*$", page, re.MULTILINE), name


def inventory_fields() -> list[tuple[str, str]]:
    schema = Inventory.model_json_schema()
    found = [("Inventory", field) for field in schema["properties"]]
    for model, spec in schema.get("$defs", {}).items():
        found += [(model, field) for field in spec.get("properties", {})]
    return found


@pytest.mark.parametrize(("model", "field"), inventory_fields())
def test_every_inventory_field_is_on_the_inventory_page(site: Path, model: str, field: str) -> None:
    page = text_of(site, "reference/inventory")
    heading = "Inventory (the file's top level)" if model == "Inventory" else model
    table = page.split(f"{heading}¶", 1)[1].split("¶", 1)[0]
    assert re.search(rf"^{re.escape(field)}$", table, re.MULTILINE), f"{model}.{field}"


def test_every_metric_is_on_the_metrics_page(site: Path) -> None:
    page = text_of(site, "reference/metrics")
    names = [f.name + SUFFIX.get(f.type, "") for f in with_every_series().registry.collect()]
    assert len(names) > 20
    assert [name for name in names if name not in page] == []


def test_every_log_event_the_source_names_is_on_its_page(site: Path) -> None:
    page = text_of(site, "reference/log-events")
    source = "\n".join(p.read_text() for p in (ROOT / "playguard_async").rglob("*.py"))
    events = set(
        re.findall(r"\blog\.(?:info|warning|error|debug)\(\s*\"([a-z_]+\.[a-z_.]+)\"", source)
    )
    assert len(events) > 50
    assert sorted(event for event in events if event not in page) == []


def test_every_http_route_is_on_the_endpoints_page(site: Path) -> None:
    page = text_of(site, "reference/http")
    source = "\n".join(p.read_text() for p in (ROOT / "playguard_async").rglob("*.py"))
    routes = set(re.findall(r"router\.add_(?:get|post)\(\s*\"([^\"]+)\"", source))
    assert "/healthz" in routes
    assert sorted(route for route in routes if route not in page) == []


@pytest.mark.parametrize("page", ["getting-started/lab", "getting-started/first-fleet"])
def test_the_guides_show_the_web_view(site: Path, page: str) -> None:
    assert "web add-user" in text_of(site, page)


BROKEN = {
    "an anchor the page does not have": "[a](concepts/lock.md#no-such-anchor)",
    "a page that does not exist": "[b](concepts/no-such-page.md)",
    "a repository file that does not exist": "[c](../no/such/file.py)",
}


def test_a_broken_link_fails_the_strict_build_naming_it(tmp_path: Path) -> None:
    """The repository's docs with a link of each broken kind added to the home page, built by
    the repository's mkdocs.yml and hook: the build fails and says which."""
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    home = docs / "index.md"
    home.write_text(home.read_text(encoding="utf-8") + "\n" + " ".join(BROKEN.values()) + "\n")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    config["docs_dir"] = str(docs)
    config["hooks"] = [str(ROOT / hook) for hook in config["hooks"]]
    changed = tmp_path / "mkdocs.yml"
    changed.write_text(yaml.safe_dump(config), encoding="utf-8")

    built = build_site(tmp_path / "site", changed)

    said = built.stdout + built.stderr
    assert built.returncode == 1, said[-3000:]
    warnings = [line for line in said.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == len(BROKEN), warnings
    for link in BROKEN.values():
        target = link.split("(", 1)[1].rstrip(")")
        assert any(target in warning for warning in warnings), (target, warnings)
