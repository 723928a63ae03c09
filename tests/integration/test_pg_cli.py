"""``playguard db migrate | import | export`` as an operator runs them: the installed command,
the database from the settings, the password from the environment, never from argv."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from playguard_async.desired_state.postgres.schema import shipped_migrations
from playguard_lab import free_port
from tests.support.cli import assert_one_line_error
from tests.support.daemon import PLAYGUARD
from tests.support.pg_inventory import by_name, full_document, load_yaml, write_inventory
from tests.support.postgres import LabDatabase, migrated_fleet, playguard_with


async def test_migrate_import_export_from_the_command_line(
    postgres: LabDatabase, tmp_path: Path
) -> None:
    source = write_inventory(tmp_path, full_document())

    first = playguard_with(postgres, "db", "migrate")
    again = playguard_with(postgres, "db", "migrate")
    imported = playguard_with(postgres, "db", "import", str(source))
    exported = playguard_with(postgres, "db", "export", "-o", str(tmp_path / "out.yaml"))

    # Every migration the package ships, whatever their number: a new one is applied like these.
    shipped = shipped_migrations()
    names = ", ".join(f"{m.version:04d}_{m.name}" for m in shipped)
    latest = shipped[-1].version
    assert (first.returncode, first.stdout) == (
        0,
        f"applied {names}; schema playguard version {latest}\n",
    )
    assert (again.returncode, again.stdout) == (
        0,
        f"schema playguard up to date (version {latest})\n",
    )
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith("imported 3 marquees, 2 registries")
    assert exported.returncode == 0, exported.stderr
    assert await load_yaml(tmp_path / "out.yaml") == by_name(await load_yaml(source))


def test_a_wrong_password_is_one_line_without_the_password(postgres: LabDatabase) -> None:
    wrong = "Wr0ng-secret-value"

    done = playguard_with(postgres, "db", "migrate", password=wrong)

    assert done.returncode == 1
    assert done.stderr.startswith(f"Error: {postgres.url.replace('/' + postgres.name, '')}")
    assert "password authentication failed" in done.stderr
    assert done.stderr.count("\n") == 1
    assert wrong not in done.stderr + done.stdout


def test_a_password_in_the_url_is_refused_without_echoing_it(postgres: LabDatabase) -> None:
    url = postgres.url.replace("playguard@", "playguard:Sup3r-secret@")
    env = {key: value for key, value in os.environ.items() if not key.startswith("PLAYGUARD_")}
    env["PLAYGUARD_DESIRED_STATE"] = url

    done = subprocess.run(
        [str(PLAYGUARD), "db", "migrate"], env=env, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip

    assert done.returncode == 1
    assert "must not carry a password" in done.stderr
    assert "Sup3r-secret" not in done.stderr + done.stdout


@pytest.mark.parametrize(
    "command",
    [
        ["cycle", "marquee-0"],
        ["cycle", "marquee-0", "--json"],
        ["status"],
        ["status", "--json"],
        ["describe", "marquee-0"],
        ["history", "marquee-0"],
    ],
    ids=" ".join,
)
@pytest.mark.parametrize("database_is", ["down", "refusing the password"])
def test_commands_that_read_the_desired_state_fail_in_one_line_when_it_is_out_of_reach(
    postgres: LabDatabase, command: list[str], database_is: str
) -> None:
    """No traceback, no password, exit status 1, the database named: whether nothing listens
    at its address or it refuses the password."""
    password = "Wr0ng-secret-value"
    if database_is == "down":
        address = urlsplit(postgres.url)
        url = address._replace(netloc=f"{address.username}@127.0.0.1:{free_port()}").geturl()
        expected = "cannot connect"
    else:
        url = postgres.url
        expected = "password authentication failed"

    done = playguard_with(postgres, *command, password=password, url=url)

    assert_one_line_error(done, "postgresql://playguard@127.0.0.1:")
    assert expected in done.stderr
    assert password not in done.stderr + done.stdout


@pytest.mark.parametrize(("limit", "imported"), [(1_000, False), (64 << 20, True)])
def test_import_is_bounded_by_the_daemons_inventory_max_bytes(
    postgres: LabDatabase, tmp_path: Path, limit: int, imported: bool
) -> None:
    """A fleet's inventory larger than the default bound (8 MiB) is imported with the bound
    the daemon runs with; past the bound set, one line names it and nothing is written."""
    source = write_inventory(tmp_path, full_document())
    size = source.stat().st_size
    assert 1_000 < size < 64 << 20
    settings = {"PLAYGUARD_INVENTORY_MAX_BYTES": str(limit)}

    playguard_with(postgres, "db", "migrate")
    done = playguard_with(postgres, "db", "import", str(source), settings=settings)
    exported = playguard_with(postgres, "db", "export")

    if imported:
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("imported 3 marquees")
    else:
        assert_one_line_error(done, f"{source}: cannot read inventory: {size} bytes, more than "
                              f"the limit of {limit}")  # fmt: skip
        assert "name:" not in exported.stdout  # nothing written


@pytest.mark.parametrize("command", ["describe", "history"])
async def test_a_marquee_not_in_the_database_is_one_line_naming_the_database(
    postgres: LabDatabase, tmp_path: Path, command: str
) -> None:
    connection = await migrated_fleet(postgres, write_inventory(tmp_path, full_document()))
    await connection.close()

    done = playguard_with(postgres, command, "nosuch")

    assert_one_line_error(done, f"no Marquee named 'nosuch' in {postgres.url}")
    assert postgres.password not in done.stderr + done.stdout
    assert ".yaml" not in done.stderr, "names the YAML inventory the settings do not use"
