"""MkDocs hook (mkdocs.yml `hooks:`): the reference pages' tables are written from the code as the
site is built, so a command, option, setting, inventory field, metric or log event cannot be
added without reaching the docs, nor documented after it is gone.

A page asks for a table with a marker on a line of its own, ``<!-- reference: NAME -->``, NAME
one of ``GENERATED``'s keys. Links from a page to a file of the repository outside ``docs/``
(``../../bench/README.md``, which works where GitHub shows the Markdown) become links to
``repo_url`` when mkdocs.yml sets one, else the path in code: the site holds no copy of the file,
and a path that names no file fails the build.
"""

from __future__ import annotations

import ast
import inspect
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import click
from pydantic.fields import FieldInfo

import playguard_async
from playguard_async.desired_state.model import Inventory
from playguard_async.operator.cli import cli
from playguard_async.settings import ENV_PREFIX, Settings

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "playguard_async"
DOCS = ROOT / "docs"
MARKER = re.compile(r"^<!-- reference: ([a-z-]+) -->$", re.MULTILINE)
LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)\s#]+)(#[^)\s]*)?\)")
LOG_LEVELS = {"debug", "info", "warning", "error", "exception", "critical"}
EVENT_NAME = re.compile(r"^[a-z_]+(\.[a-z_]+)+$")

log = logging.getLogger("mkdocs.hooks.playguard")


def cell(text: object) -> str:
    """One table cell: a pipe or a line break would end it early."""
    return " ".join(str(text).split()).replace("|", "\\|")


def code(text: object) -> str:
    shown = str(text)
    fence = "``" if "`" in shown else "`"
    return f"{fence}{shown}{fence}" if shown else ""


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


# --- the command line, from click -------------------------------------------------------------


Commands = Iterator[tuple[tuple[str, ...], click.Command]]


def walk(command: click.Command, path: tuple[str, ...]) -> Commands:
    yield path, command
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            yield from walk(command.commands[name], (*path, name))


def option_row(param: click.Parameter) -> tuple[str, ...]:
    names = ", ".join(code(name) for name in (*param.opts, *param.secondary_opts))
    if isinstance(param, click.Argument):
        names = code(param.human_readable_name)
    kind = param.type.name
    if isinstance(param.type, click.Choice):
        kind = " or ".join(str(choice) for choice in param.type.choices)
    if isinstance(param, click.Option) and param.is_flag:
        kind = "flag"
    default = param.default
    if default in (None, (), False) or type(default).__name__ == "Sentinel":  # click's UNSET
        default = ""
    envvar = getattr(param, "envvar", None)
    required = "yes" if param.required else ""
    help_text = getattr(param, "help", None) or ""
    if envvar:
        help_text = f"{help_text} (environment: `{envvar}`)".strip()
    return names, kind, code(default) if default != "" else "", required, help_text


def cli_reference() -> str:
    parts = []
    for path, command in walk(cli, ("playguard",)):
        if command.hidden:
            continue
        context = click.Context(command, info_name=" ".join(path))
        usage = " ".join([*path, *command.collect_usage_pieces(context)])
        parts.append(f"### {' '.join(path)}\n")
        parts.append(f"```\n{usage}\n```\n")
        parts.append(inspect.cleandoc(command.help or "") + "\n")
        params = [p for p in command.get_params(context) if not getattr(p, "hidden", False)]
        if params:
            rows = [option_row(p) for p in params]
            parts.append(table(("argument or option", "type", "default", "required", "what"), rows))
            parts.append("")
        if isinstance(command, click.Group):
            subcommands = ", ".join(f"`{name}`" for name in sorted(command.commands))
            parts.append(f"Commands: {subcommands}.\n")
    return "\n".join(parts)


# --- settings, from the pydantic model ------------------------------------------------------


def type_name(field: FieldInfo) -> str:
    annotation = field.annotation
    shown = annotation.__name__ if isinstance(annotation, type) else repr(annotation)
    return re.sub(r"\b(?:pydantic\.types|pathlib|typing|collections\.abc)\.", "", shown)


def bounds(field: FieldInfo) -> str:
    said = []
    for item in field.metadata:
        for word, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            value = getattr(item, word, None)
            if value is not None:
                said.append(f"{sign} {value:g}" if isinstance(value, float) else f"{sign} {value}")
        if getattr(item, "min_length", None) is not None:
            said.append(f"length >= {item.min_length}")
        if getattr(item, "max_length", None) is not None:
            said.append(f"length <= {item.max_length}")
    return ", ".join(said)


def shown_default(field: FieldInfo) -> str:
    default: object = field.get_default(call_default_factory=True, validated_data={})
    if default is None:
        return "none"
    if isinstance(default, tuple | list):
        return code(list(default))
    return code(default)


SETTING_COLUMNS = ("setting", "environment variable", "type", "default", "bounds", "what")


def setting_row(name: str) -> tuple[str, ...]:
    field = Settings.model_fields[name]
    return (
        code(name), code(f"{ENV_PREFIX}{name.upper()}"), code(type_name(field)),
        shown_default(field), bounds(field), field.description or "",
    )  # fmt: skip


def settings_reference() -> str:
    """One table per section of the settings (the classes ``Settings`` is made of), in the
    order of the model; a field no section declares goes under "Other"."""
    sections = [c for c in Settings.__mro__[1:] if c.__module__.endswith("settings.sections")]
    seen: set[str] = set()
    parts = []
    for section in sections:
        own = [name for name in section.__annotations__ if name in Settings.model_fields]
        own = [name for name in own if name not in seen]
        if own:
            seen.update(own)
            title = section.__name__.removesuffix("Settings") or section.__name__
            parts += [f"### {title}\n", table(SETTING_COLUMNS, [setting_row(n) for n in own]), ""]
    missing = [name for name in Settings.model_fields if name not in seen]
    if missing:
        parts += ["### Other\n", table(SETTING_COLUMNS, [setting_row(n) for n in missing])]
    return "\n".join(parts)


# --- the inventory, from the model's JSON schema -------------------------------------------


def schema_type(spec: dict[str, Any]) -> str:
    if "$ref" in spec:
        return str(spec["$ref"]).rsplit("/", 1)[1]
    if "anyOf" in spec:
        return " or ".join(schema_type(option) for option in spec["anyOf"])
    if spec.get("type") == "array":
        return f"list of {schema_type(spec.get('items', {}))}"
    if "enum" in spec:
        return " or ".join(code(value) for value in spec["enum"])
    if "const" in spec:
        return code(spec["const"])
    return str(spec.get("type", "any"))


def schema_rules(spec: dict[str, Any]) -> str:
    words = {"pattern": "matches", "minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">",
             "exclusiveMaximum": "<", "minLength": "length >=", "maxLength": "length <=",
             "minItems": "items >=", "maxItems": "items <="}  # fmt: skip
    said = [f"{word} {code(spec[key])}" for key, word in words.items() if key in spec]
    for option in spec.get("anyOf", []):
        said += [f"{word} {code(option[key])}" for key, word in words.items() if key in option]
    return ", ".join(said)


def shown_schema_default(spec: dict[str, Any]) -> str:
    if "default" not in spec:
        return ""
    return "none" if spec["default"] is None else code(spec["default"])


def inventory_reference() -> str:
    schema = Inventory.model_json_schema()
    definitions: dict[str, dict[str, Any]] = schema.get("$defs", {})
    parts = ["### Inventory (the file's top level)\n"]
    order = [("Inventory", schema), *sorted(definitions.items())]
    for name, spec in order:
        if name != "Inventory":
            parts.append(f"### {name}\n")
        required = set(spec.get("required", []))
        rows = []
        for field, field_spec in spec.get("properties", {}).items():
            rows.append((
                code(field), schema_type(field_spec), "yes" if field in required else "",
                shown_schema_default(field_spec),
                schema_rules(field_spec),
            ))  # fmt: skip
        if rows:
            parts.append(table(("field", "type", "required", "default", "rules"), rows))
        elif "enum" in spec:
            parts.append("One of " + ", ".join(code(v) for v in spec["enum"]) + ".")
        parts.append("")
    return "\n".join(parts)


# --- metrics, from the daemon's registry -------------------------------------------------------


def metrics_reference() -> str:
    from tests.support.metrics import with_every_series  # noqa: PLC0415 - the repository's checkout only

    suffix = {"counter": "_total", "info": "_info"}
    rows = []
    for family in with_every_series().registry.collect():
        labels = sorted({label for sample in family.samples for label in sample.labels} - {"le"})
        name = family.name + suffix.get(family.type, "")
        rows.append(
            (
                code(name),
                family.type,
                ", ".join(code(label) for label in labels),
                family.documentation,
            )
        )
    return table(("metric", "type", "labels", "help"), sorted(rows))


# --- log events, from the source -------------------------------------------------------------


def log_events() -> dict[str, tuple[set[str], set[str]]]:
    """Each event name logged by a literal: its levels and the modules that log it."""
    found: dict[str, tuple[set[str], set[str]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr not in LOG_LEVELS or not node.args:
                continue
            first = node.args[0]
            event = first.value if isinstance(first, ast.Constant) else None
            if isinstance(event, str) and EVENT_NAME.match(event):
                levels, modules = found.setdefault(event, (set(), set()))
                levels.add(node.func.attr)
                modules.add(module)
    return found


def log_events_reference() -> str:
    rows = [
        (code(event), ", ".join(sorted(levels)), ", ".join(code(m) for m in sorted(modules)))
        for event, (levels, modules) in sorted(log_events().items())
    ]
    return table(("event", "level", "logged in"), rows)


# --- the package map, from the source tree -----------------------------------------------------


def first_line(path: Path) -> str:
    """A module's docstring up to its first full stop."""
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    sentence = " ".join(docstring.split()).split(". ", 1)[0]
    return sentence.rstrip(".")


def package_map() -> str:
    parts = []
    entries = sorted(
        p for p in PACKAGE.iterdir() if p.name != "__pycache__" and not p.name.startswith(".")
    )
    for entry in entries:
        if entry.is_dir() and (entry / "__init__.py").exists():
            modules = sorted(m for m in entry.rglob("*.py") if "__pycache__" not in m.parts)
            parts.append(f"### {entry.name}/\n")
            rows = [(code(m.relative_to(PACKAGE).as_posix()), first_line(m)) for m in modules]
            parts.append(table(("module", "what it is for"), rows))
            parts.append("")
        elif entry.suffix == ".py" and entry.name not in ("__init__.py", "__main__.py"):
            parts.append(f"### {entry.name}\n\n{first_line(entry)}.\n")
    return "\n".join(parts)


GENERATED: dict[str, Callable[[], str]] = {
    "package-map": package_map,
    "cli": cli_reference,
    "settings": settings_reference,
    "inventory": inventory_reference,
    "metrics": metrics_reference,
    "log-events": log_events_reference,
}


# --- links to the repository's files ----------------------------------------------------------


def repository_links(markdown: str, page_file: Path, repo_url: str | None) -> str:
    """Links of ``markdown`` (the page at ``page_file`` in the repository's docs/) that leave
    docs/ for a file of the repository, made links a site can follow."""

    def replace(match: re.Match[str]) -> str:
        text, target, anchor = match.group(1), match.group(2), match.group(3) or ""
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            return match.group(0)
        resolved = (page_file.parent / target).resolve()
        if resolved.is_relative_to(DOCS) or not resolved.is_relative_to(ROOT):
            return match.group(0)
        relative = resolved.relative_to(ROOT).as_posix()
        if not resolved.exists():
            page = page_file.relative_to(ROOT)
            log.warning("%s links to %s, which is not a file of the repository", page, target)
            return text
        if repo_url:
            return f"[{text}]({repo_url.rstrip('/')}/blob/HEAD/{relative}{anchor})"
        shown = text.strip("`")
        return f"`{relative}`" if shown == relative else f"{text} (`{relative}`)"

    return LINK.sub(replace, markdown)


def on_config(config: Any) -> Any:
    """Refuse to describe another checkout's code: an editable install elsewhere (a shared
    virtual environment) would otherwise lead ``sys.path`` when mkdocs runs by its script."""
    imported = Path(playguard_async.__file__).resolve().parent
    if imported != PACKAGE:
        log.warning(
            "the reference would describe %s, not %s: run `python -m mkdocs` from the repository",
            imported,
            PACKAGE,
        )
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    def generate(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATED:
            log.warning("%s asks for an unknown reference table %r", page.file.src_path, name)
            return match.group(0)
        return GENERATED[name]()

    markdown = MARKER.sub(generate, markdown)
    # Where the page is in the repository's docs/, whatever docs_dir a test builds from.
    return repository_links(markdown, DOCS / page.file.src_path, config.get("repo_url"))
