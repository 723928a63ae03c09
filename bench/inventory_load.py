"""What reading the YAML desired state costs, side by side in one run, per fleet size.

For N Marquees with 5 Playgrounds each (a generated inventory file), interleaved round after round:
- ``pyyaml load``: ``yaml.load(text, CSafeLoader)`` alone, the reference: PyYAML's C loader with
  nothing of ours (no duplicate-key check, no shape check, no validation);
- ``before``: how the source parsed before (kept here as the reference): PyYAML's node tree,
  the alias/depth check over every node, construction, validation, the collector running;
- ``parse`` and ``validate``: the two halves of ``read`` alone, with the collector paused as the
  source pauses it: the text to data (event builder), and the data to the models;
- ``read``: ``YamlInventorySource.load()`` of a changed file: read, parse, shape check, validate,
  index;
- ``re-read``: ``load()`` again of the unchanged file (a ``stat``);
- ``loop stall``: the longest gap a 1 ms ticker on the event loop saw during ``read``: the read
  runs in a thread, so the loop must stay free.

Prints milliseconds of process CPU (user + system, both threads) per operation, and ratios.

    .venv/bin/python bench/inventory_load.py [--fleets 1000,10000] [--rounds 3]

Writes its inventories under a temporary directory. Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from loop_stall import LoopStall

from playguard_async.desired_state import fields, model, yaml_source
from playguard_async.desired_state.model import Inventory
from playguard_async.desired_state.yaml_source import YamlInventorySource

PLAYGROUNDS_PER_MARQUEE = 5


def write_inventory(
    directory: Path,
    marquees: int,
    *,
    playgrounds: int = PLAYGROUNDS_PER_MARQUEE,
    rollout: dict[str, Any] | None = None,
) -> Path:
    """``marquees`` Marquees with ``playgrounds`` Playgrounds each (branches ``feature/0`` on),
    all of one Playspec, which has the rollout policy ``rollout`` when one is given."""
    (directory / "id").write_text("key\n")
    (directory / "known_hosts").write_text("host\n")
    document = {
        "marquees": [
            {
                "name": f"edge-{index}",
                "host": f"10.{index // 65536}.{index // 256 % 256}.{index % 256}",
                "user": "playguard",
                "identity_file": "id",
                "known_hosts": "known_hosts",
            }
            for index in range(marquees)
        ],
        "playspecs": [
            {"name": "shop", "repo": "https://git.example.com/shop.git", "images": ["shop:1"]}
            | ({} if rollout is None else {"rollout": rollout})
        ],
        "playgrounds": [
            {
                "name": f"shop-{index}-{slot}",
                "playspec": "shop",
                "marquee": f"edge-{index}",
                "branch": f"feature/{slot}",
            }
            for index in range(marquees)
            for slot in range(playgrounds)
        ],
    }
    path = directory / f"inventory-{marquees}.yaml"
    path.write_text(yaml.dump(document, Dumper=yaml.CSafeDumper, sort_keys=False))
    return path


def parse_as_before(path: Path) -> Inventory:
    loader = yaml_source._InventoryLoader(path.read_text())
    try:
        node = loader.get_single_node()
        assert node is not None
        assert yaml_source._check_shape(node) is None
        document = loader.construct_document(node)
    finally:
        loader.dispose()
    return Inventory.model_validate(document, context={fields.BASE_DIR: path.parent})


def parse_and_validate(source: YamlInventorySource, path: Path, text: str) -> tuple[float, float]:
    """CPU ms of the source's parse of ``text``, and of validating what it made."""
    with model._collector_paused():
        started = time.process_time()
        document = source._parse(text)
        parsed = time.process_time()
        Inventory.model_validate(
            document, context={fields.BASE_DIR: path.parent, fields.PATHS_RESOLVED: {}}
        )
        validated = time.process_time()
        del document
    return (parsed - started) * 1000, (validated - parsed) * 1000


def cpu_ms(operation: Callable[[], object]) -> float:
    started = time.process_time()
    operation()
    return (time.process_time() - started) * 1000


async def read_with_stall(source: YamlInventorySource) -> tuple[float, float]:
    """CPU ms of one ``load()``, and the longest gap (ms) between ticks of a 1 ms ticker."""
    async with LoopStall() as stall:
        started = time.process_time()
        await source.load()
        spent = (time.process_time() - started) * 1000
    return spent, stall.ms


async def measure(path: Path, text: str, rounds: int) -> dict[str, float]:
    best: dict[str, float] = {}

    def keep(name: str, value: float) -> None:
        best[name] = min(best.get(name, value), value)

    for _ in range(rounds):
        keep("pyyaml load", cpu_ms(lambda: yaml.load(text, Loader=yaml.CSafeLoader)))
        source = YamlInventorySource(path, max_bytes=64 << 20, timeout=600)
        keep("before", cpu_ms(lambda: parse_as_before(path)))
        parse, validate = parse_and_validate(source, path, text)
        keep("parse", parse)
        keep("validate", validate)
        spent, stall = await read_with_stall(source)
        keep("read", spent)
        keep("loop stall", stall)
        started = time.process_time()
        await source.load()
        keep("re-read", (time.process_time() - started) * 1000)
    return best


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleets", default="1000,10000")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="inventory-bench-") as workdir:
        print(
            f"best of {args.rounds} rounds, CPU ms per operation, "
            f"{PLAYGROUNDS_PER_MARQUEE} Playgrounds per Marquee"
        )
        print(
            f"{'marquees':>8} {'MiB':>5} {'pyyaml load':>11} {'before':>8} {'parse':>8} "
            f"{'validate':>8} {'read':>8} "
            f"{'x before':>8} {'x pyyaml':>8} {'re-read':>8} {'stall ms':>8}"
        )
        for marquees in (int(part) for part in args.fleets.split(",")):
            path = write_inventory(Path(workdir), marquees)
            figures = await measure(path, path.read_text(), args.rounds)
            print(
                f"{marquees:>8} {path.stat().st_size / (1 << 20):>5.1f} "
                f"{figures['pyyaml load']:>11.0f} {figures['before']:>8.0f} "
                f"{figures['parse']:>8.0f} {figures['validate']:>8.0f} "
                f"{figures['read']:>8.0f} "
                f"{figures['read'] / figures['before']:>8.2f} "
                f"{figures['read'] / figures['pyyaml load']:>8.2f} "
                f"{figures['re-read']:>8.2f} {figures['loop stall']:>8.1f}"
            )


if __name__ == "__main__":
    asyncio.run(main())
