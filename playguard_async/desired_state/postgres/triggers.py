"""``playguard db triggers``: the statements that attach ``notify_marquee`` (rows) and
``playguard_table_truncated`` (TRUNCATE) to one of the application's tables, printed for its
owner to review and run (in a migration of the app's own, so its schema dump records them).
playguard never runs them: it alters no table of the app's.

Names are quoted as identifiers and the column and lookup query as literals, so what is printed
is exactly one statement whatever the input holds.
"""

from __future__ import annotations

import re

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_$]{0,62}")


def quoted_identifier(name: str) -> str:
    """``name`` as a SQL identifier, ValueError unless it is a plain one."""
    if not _IDENTIFIER.fullmatch(name):
        raise ValueError(f"{name!r} is not a plain SQL name (letters, digits, '_', '$')")
    return f'"{name}"'


def quoted_literal(value: str) -> str:
    """``value`` as a SQL string literal (standard_conforming_strings, PostgreSQL's default)."""
    if "\x00" in value:
        raise ValueError("a NUL byte cannot be part of a SQL literal")
    return "'" + value.replace("'", "''") + "'"


def trigger_statement(schema: str, table: str, column: str, lookup: str | None) -> str:
    """``CREATE TRIGGER playguard_notify ... ON table ... notify_marquee(column[, lookup])``, and
    its twin for TRUNCATE (``playguard_truncate``: one change-log entry for the statement, the
    Marquees of all the rows woken); ``table`` may be ``schema.table``."""
    target = ".".join(quoted_identifier(part) for part in table.split(".", 1))
    quoted_identifier(column)  # a column's name, not an expression
    arguments = ", ".join(quoted_literal(value) for value in (column, lookup) if value is not None)
    return (
        f"CREATE TRIGGER playguard_notify AFTER INSERT OR UPDATE OR DELETE ON {target}\n"
        f"    FOR EACH ROW EXECUTE FUNCTION {quoted_identifier(schema)}.notify_marquee("
        f"{arguments});\n"
        f"CREATE TRIGGER playguard_truncate BEFORE TRUNCATE ON {target}\n"
        f"    FOR EACH STATEMENT EXECUTE FUNCTION {quoted_identifier(schema)}"
        f".playguard_table_truncated({arguments});"
    )
