"""What naming a cycle's inputs costs (issue 40): the desired-state version each cycle record
carries, and the change log's highest id the PostgreSQL source reads for it; the code at
``--before`` (by default where this branch left main) against this checkout, side by side.

Starts the lab's PostgreSQL, and for each code version a database of its own, migrated and
filled with ``--marquees`` Marquees (5 Playgrounds each) by that version. Then, in a child process
running that version, every statement its connections send is counted (asyncpg's query logger on
the connections the source and the observed-state writer open):

- ``whole read``: the source's first ``load()`` (a tick's read; the daemon reads once a tick, not
  once a cycle);
- ``narrow read``: ``load_marquees`` of one Marquee (a wake-up's read);
- ``in-sync cycles``: ``--cycles`` records of cycles that found nothing to do, handed to the
  observed-state writer (``record_cycle``) one at a time and written: what a cycle in sync sends
  to PostgreSQL;
- per cycle, the record as Redis stores it (``records.encode_record``): its bytes, and the
  microseconds its encoding takes, with its version and without (best of 10 runs of 2,000 each,
  the two interleaved in one process: the difference is what the version adds to a cycle; the
  engine's other new step, copying the inventory's version into the result, is one attribute).

    .venv/bin/python bench/cycle_inputs_cost.py [--marquees 200] [--cycles 50] [--before REF]

Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from code_versions import git_output, run_with, versions  # bench/ is on sys.path
from inventory_load import write_inventory
from lab_database import PASSWORD_VARIABLE, create_database, import_inventory, run_import

from playguard_lab import PostgresServer

RECORD_MAX_BYTES = 4096
"""The ``record_max_bytes`` setting's default."""


async def measure(url: str, cycles: int) -> dict[str, Any]:
    """The counts above, with the code ``PYTHONPATH`` names."""
    from playguard_async.coordination import records  # noqa: PLC0415
    from playguard_async.desired_state.postgres import (  # noqa: PLC0415
        connection as pg_connection,
    )
    from playguard_async.desired_state.postgres import observed_state, source  # noqa: PLC0415
    from playguard_async.engine.results import CycleResult  # noqa: PLC0415

    sent: list[str] = []

    async def counted(*args: Any, **kwargs: Any) -> Any:
        opened = await pg_connection.connect(*args, **kwargs)
        opened.add_query_logger(lambda logged: sent.append(logged.query))
        return opened

    source.connect = counted  # type: ignore[attr-defined]
    observed_state.connect = counted  # type: ignore[attr-defined]
    address = pg_connection.PgAddress.parse(url)
    password = pg_connection.password_from(os.environ[PASSWORD_VARIABLE], None)
    writer = observed_state.ObservedStateWriter(address, password, replica="r1", timeout=30.0)
    desired = source.PostgresDesiredState(address, password, observed=writer)
    figures: dict[str, Any] = {}
    inventory = await desired.load()
    figures["whole read"] = len(sent)
    sent.clear()
    await desired.load_marquees(["edge-0"])
    figures["narrow read"] = len(sent)
    sent.clear()
    marquee = inventory.marquees[0]
    result = CycleResult(marquee=marquee.name, cycle_id="0" * 12, replica="r1", fence=7)
    result.durations = {"sync_git": 0.01, "reconcile_playgrounds": 0.02}
    result.findings = {"reconcile_playgrounds": {"playgrounds": {
        playground.name: {"state": "running", "drift": [], "actions": []}
        for playground in inventory.playgrounds_on(marquee.name)
    }}}  # fmt: skip
    if hasattr(result, "desired"):
        result.desired = inventory.version
    for index in range(cycles):
        result.finished_at = time.time() + index
        desired.record_cycle(result.to_record())
        await writer.close()  # written now, as the writer's task would soon after
    figures["in-sync cycle statements"] = len(sent) / cycles
    figures["in-sync cycle writes"] = (
        sum(query.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE")) for query in sent)
        / cycles
    )
    encoded = records.encode_record(result.to_record(), RECORD_MAX_BYTES)
    figures["record bytes"] = len(encoded.encode())
    record = dict(result.to_record())
    unnamed = {key: value for key, value in record.items() if key != "desired"}
    best = {"encode us": float("inf"), "encode us, version left out": float("inf")}
    for _ in range(10):  # interleaved, so the machine's load weighs on both alike
        for name, encoded_record in (("encode us", record), ("encode us, version left out",
                                                             unnamed)):  # fmt: skip
            started = time.perf_counter()
            for _ in range(2000):
                records.encode_record(encoded_record, RECORD_MAX_BYTES)
            best[name] = min(best[name], (time.perf_counter() - started) / 2000 * 1e6)
    figures.update(best)
    await desired.close()
    return figures


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--marquees", type=int, default=200)
    parser.add_argument("--cycles", type=int, default=50)
    parser.add_argument("--before", default=None, help="git ref (default: the merge base)")
    args = parser.parse_args()
    before = args.before or git_output("merge-base", "HEAD", "main")
    with (
        tempfile.TemporaryDirectory(prefix="cycle-inputs-") as workdir,
        PostgresServer(Path(workdir) / "postgres") as server,
    ):
        inventory = write_inventory(Path(workdir), args.marquees)
        rows = {}
        for label, code in versions(before, Path(workdir)).items():
            url = await create_database(server, f"bench_{label}")
            run_import(__file__, server, url, inventory, code)
            os.environ[PASSWORD_VARIABLE] = server.password
            rows[label] = run_with(code, __file__, "--measure", url, str(args.cycles))
        print(f"{args.marquees} Marquees, {args.cycles} in-sync cycles; statements sent")
        keys = list(next(iter(rows.values())))
        print(f"{'':>28}" + "".join(f"{label:>12}" for label in rows))
        for key in keys:
            print(f"{key:>28}" + "".join(f"{row[key]:>12.2f}" for row in rows.values()))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--setup"]:
        import_inventory(sys.argv[2], Path(sys.argv[3]))
    elif sys.argv[1:2] == ["--measure"]:
        print(json.dumps(asyncio.run(measure(sys.argv[2], int(sys.argv[3])))))
    else:
        asyncio.run(main())
