"""``playguard db triggers``' statement: names quoted as identifiers, the column and the lookup
as literals, and anything else refused in one line, whatever the input holds."""

from __future__ import annotations

import re

import pytest

from playguard_async.desired_state.postgres.triggers import trigger_statement


def test_the_statement_names_the_table_the_schema_and_quotes_the_lookup() -> None:
    statement = trigger_statement(
        "fleet", "public.playgrounds", "marquee_id", "SELECT name FROM m WHERE note = 'x'"
    )
    assert statement == (
        "CREATE TRIGGER playguard_notify AFTER INSERT OR UPDATE OR DELETE ON "
        '"public"."playgrounds"\n'
        '    FOR EACH ROW EXECUTE FUNCTION "fleet".notify_marquee('
        "'marquee_id', 'SELECT name FROM m WHERE note = ''x''');\n"
        'CREATE TRIGGER playguard_truncate BEFORE TRUNCATE ON "public"."playgrounds"\n'
        '    FOR EACH STATEMENT EXECUTE FUNCTION "fleet".playguard_table_truncated('
        "'marquee_id', 'SELECT name FROM m WHERE note = ''x''');"
    )
    assert trigger_statement("playguard", "marquees", "name", None).endswith(
        "\"playguard\".playguard_table_truncated('name');"
    )


@pytest.mark.parametrize(
    ("table", "column", "lookup", "reason"),
    [
        ("public.x; DROP TABLE y", "id", None, "'x; DROP TABLE y' is not a plain SQL name"),
        ('public."x"', "id", None, "'\"x\"' is not a plain SQL name"),
        ("a.b.c", "id", None, "'b.c' is not a plain SQL name"),
        ("", "id", None, "'' is not a plain SQL name"),
        ("t", "id) OR (true", None, "'id) OR (true' is not a plain SQL name"),
        ("t", "1id", None, "'1id' is not a plain SQL name"),
        ("t", "id", "SELECT '\x00'", "a NUL byte cannot be part of a SQL literal"),
    ],
)
def test_anything_but_plain_names_is_refused(
    table: str, column: str, lookup: str | None, reason: str
) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(reason)}") as refused:
        trigger_statement("playguard", table, column, lookup)
    assert "\n" not in str(refused.value)
