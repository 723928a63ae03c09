"""What the inventory questions of one cycle cost, before (linear scans) and after (indexes).

A cycle of the seven built-in phases asks the inventory about its own Marquee: its playgrounds
(sync_git, fetch_branches, reconcile_playgrounds), each playground's playspec, the images and
registries they need (pull_images, refresh_credentials), its agent chats (process_agent_chats), and
for every container the host lists, whether its owner is still wanted there (sweep_orphans). This
asks the same questions both ways for a sample of Marquees of fleets of 100, 1,000 and 10,000
Marquees (20 playgrounds, 2 agent chats and 42 containers each):

- ``before``: the scans the phases did before the index, kept here as the reference;
- ``after``: ``Inventory``'s indexed methods, the index built once per inventory beforehand (its
  one-off cost is printed on its own, ``index build``).

Both ways must give the same answers; the run stops if they do not. Prints the mean per-cycle cost,
the cost of one tick of the whole fleet (per-cycle cost times Marquees) and the ratio, from one run,
before and after interleaved round by round so machine noise hits both alike.

    .venv/bin/python bench/inventory_queries.py [--rounds 5] [--sample 20]

Pure computation in this process; no server is started. Never part of the tests.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from playguard_async.desired_state.model import Inventory, Playground, Playspec, Registry

PLAYGROUNDS_PER_MARQUEE = 20
CHATS_PER_MARQUEE = 2
SERVICES_PER_PLAYGROUND = 2
PLAYSPECS = 50
REGISTRIES = 5

Answers = tuple[Any, ...]


def fleet(marquees: int) -> Inventory:
    """An inventory of ``marquees`` Marquees, every list as large as such a fleet's would be."""
    keys = {"user": "pg", "identity_file": "/k/id", "known_hosts": "/k/known_hosts"}
    return Inventory.model_validate(
        {
            "marquees": [
                {"name": f"m{m}", "host": f"m{m}.example", **keys} for m in range(marquees)
            ],
            "registries": [
                {"name": f"r{r}", "server": f"r{r}.example", "username": "u", "password_env": "P"}
                for r in range(REGISTRIES)
            ],
            "playspecs": [
                {
                    "name": f"s{s}",
                    "repo": f"https://git.example/s{s}.git",
                    "images": [f"r{s % REGISTRIES}.example/app{s}:1", "base:1"],
                    "registry": f"r{s % REGISTRIES}",
                }
                for s in range(PLAYSPECS)
            ],
            "playgrounds": [
                {
                    "name": f"pg-{m}-{p}",
                    "playspec": f"s{(m + p) % PLAYSPECS}",
                    "marquee": f"m{m}",
                    "branch": "main",
                }
                for m in range(marquees)
                for p in range(PLAYGROUNDS_PER_MARQUEE)
            ],
            "agent_chats": [
                {
                    "name": f"chat-{m}-{c}",
                    "playground": f"pg-{m}-{c}",
                    "image": "agent:1",
                    "command": ["run"],
                }
                for m in range(marquees)
                for c in range(CHATS_PER_MARQUEE)
            ],
        }
    )


def host_listing(marquee: str, inventory: Inventory) -> list[dict[str, str]]:
    """The labels of the containers the Marquee's host lists: its playgrounds' services, its
    chats, and one orphan of each kind."""
    m = marquee.removeprefix("m")
    labels = [
        {"playground": f"pg-{m}-{p}"}
        for p in range(PLAYGROUNDS_PER_MARQUEE)
        for _ in range(SERVICES_PER_PLAYGROUND)
    ]
    labels += [{"agent_chat": f"chat-{m}-{c}"} for c in range(CHATS_PER_MARQUEE)]
    labels += [{"playground": "pg-gone"}, {"agent_chat": "chat-gone"}]
    return labels


# -- before: the scans the phases made, the reference ---------------------------------------------


def scan_playgrounds_on(inventory: Inventory, marquee: str) -> list[Playground]:
    return [playground for playground in inventory.playgrounds if playground.marquee == marquee]


def scan_playspec_of(inventory: Inventory, playground: Playground) -> Playspec:
    return next(spec for spec in inventory.playspecs if spec.name == playground.playspec)


def scan_registry_of(inventory: Inventory, playspec: Playspec) -> Registry | None:
    return next((r for r in inventory.registries if r.name == playspec.registry), None)


def scan_agent_chat_names_on(inventory: Inventory, marquee: str) -> list[str]:
    playgrounds = {playground.name for playground in scan_playgrounds_on(inventory, marquee)}
    return [chat.name for chat in inventory.agent_chats if chat.playground in playgrounds]


def scan_cycle(inventory: Inventory, marquee: str, listing: list[dict[str, str]]) -> Answers:
    # sync_git and fetch_branches: the playgrounds and their playspecs, each phase on its own.
    for _ in ("sync_git", "fetch_branches"):
        playgrounds = scan_playgrounds_on(inventory, marquee)
        specs = {pg.name: scan_playspec_of(inventory, pg).repo for pg in playgrounds}
    # refresh_credentials: the registries.
    used = {
        scan_playspec_of(inventory, pg).registry for pg in scan_playgrounds_on(inventory, marquee)
    }
    registries = [r.name for r in inventory.registries if r.name in used]
    # pull_images: the images, with their registries.
    images: dict[str, str | None] = {}
    for pg in scan_playgrounds_on(inventory, marquee):
        spec = scan_playspec_of(inventory, pg)
        for image in spec.images:
            registry = scan_registry_of(inventory, spec)
            images.setdefault(image, registry.name if registry else None)
    # reconcile_playgrounds: the playgrounds, each one's compose file.
    compose = [
        scan_playspec_of(inventory, pg).compose_file
        for pg in scan_playgrounds_on(inventory, marquee)
    ]
    # process_agent_chats: the chats.
    chats = scan_agent_chat_names_on(inventory, marquee)
    # sweep_orphans: each listed container's owner, as the sweep asked before.
    orphans = []
    for labels in listing:
        if "agent_chat" in labels:
            if labels["agent_chat"] not in set(scan_agent_chat_names_on(inventory, marquee)):
                orphans.append(labels["agent_chat"])
        elif labels["playground"] not in {
            pg.name for pg in scan_playgrounds_on(inventory, marquee)
        }:
            orphans.append(labels["playground"])
    return specs, registries, images, compose, chats, orphans


# -- after: the inventory's indexed methods --------------------------------------------------------


def indexed_cycle(inventory: Inventory, marquee: str, listing: list[dict[str, str]]) -> Answers:
    for _ in ("sync_git", "fetch_branches"):
        playgrounds = inventory.playgrounds_on(marquee)
        specs = {pg.name: inventory.playspec_of(pg).repo for pg in playgrounds}
    registries = [registry.name for registry in inventory.registries_on(marquee)]
    images = {image: r and r.name for image, r in inventory.images_on(marquee).items()}
    compose = [inventory.playspec_of(pg).compose_file for pg in inventory.playgrounds_on(marquee)]
    chats = [chat.name for chat in inventory.agent_chats_on(marquee)]
    orphans = []
    for labels in listing:
        if "agent_chat" in labels:
            if not inventory.wants_agent_chat(marquee, labels["agent_chat"]):
                orphans.append(labels["agent_chat"])
        elif not inventory.wants_playground(marquee, labels["playground"]):
            orphans.append(labels["playground"])
    return specs, registries, images, compose, chats, orphans


# -- the run ---------------------------------------------------------------------------------------


def timed(
    cycle: Callable[[Inventory, str, list[dict[str, str]]], Answers],
    inventory: Inventory,
    sample: list[tuple[str, list[dict[str, str]]]],
) -> float:
    """Mean seconds of one cycle's questions over the sampled Marquees."""
    started = time.perf_counter()
    for marquee, listing in sample:
        cycle(inventory, marquee, listing)
    return (time.perf_counter() - started) / len(sample)


def measure(marquees: int, rounds: int, sample_size: int) -> dict[str, float]:
    inventory = fleet(marquees)
    started = time.perf_counter()
    inventory.marquee("m0")  # the first question builds the index
    build = time.perf_counter() - started
    chosen = random.Random(marquees).sample(range(marquees), min(sample_size, marquees))
    sample = [(f"m{m}", host_listing(f"m{m}", inventory)) for m in chosen]
    for marquee, listing in sample:
        if scan_cycle(inventory, marquee, listing) != indexed_cycle(inventory, marquee, listing):
            raise SystemExit(f"{marquee}: the indexed answers differ from the scans'")
    before, after = [], []
    for _ in range(rounds):
        before.append(timed(scan_cycle, inventory, sample))
        after.append(timed(indexed_cycle, inventory, sample))
    return {"before": statistics.median(before), "after": statistics.median(after), "build": build}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sample", type=int, default=20, help="Marquees asked about per round")
    args = parser.parse_args()
    print(
        f"{'marquees':>8}  {'before ms/cycle':>15}  {'after ms/cycle':>14}  {'before/after':>12}"
        f"  {'before s/tick':>13}  {'after s/tick':>12}  {'index build s':>13}"
    )
    for marquees in (100, 1_000, 10_000):
        cost = measure(marquees, args.rounds, args.sample)
        print(
            f"{marquees:>8}  {cost['before'] * 1e3:>15.3f}  {cost['after'] * 1e3:>14.3f}"
            f"  {cost['before'] / cost['after']:>11.0f}x"
            f"  {cost['before'] * marquees:>13.2f}  {cost['after'] * marquees:>12.3f}"
            f"  {cost['build']:>13.3f}"
        )


if __name__ == "__main__":
    main()
