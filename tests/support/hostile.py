"""Inventory documents an adversary would write, for the unit tests of the loader and the engine's
tests of a daemon that must survive them."""

from __future__ import annotations

from playguard_async.desired_state.yaml_source import MAX_DEPTH

GOOD = """\
marquees:
  - name: m1
    host: 127.0.0.1
    user: pg
    identity_file: /keys/id
    known_hosts: /keys/known_hosts
"""


def laughs(levels: int, width: int = 9) -> str:
    """The "billion laughs" document: each anchor lists the previous one ``width`` times."""
    lines = ['a0: &a0 ["lol"]']
    for level in range(1, levels + 1):
        refs = ", ".join([f"*a{level - 1}"] * width)
        lines.append(f"a{level}: &a{level} [{refs}]")
    lines.append(f"marquees: *a{levels}")
    return "\n".join(lines) + "\n"


def nested_flow(depth: int) -> str:
    return "marquees: " + "[" * depth + "]" * depth + "\n"


def nested_block(depth: int) -> str:
    return "marquees:\n" + "".join("  " * (level + 1) + "- \n" for level in range(depth))


def nested_maps(depth: int) -> str:
    return "".join("  " * level + f"k{level}:\n" for level in range(depth)) + "  " * depth + "x\n"


HOSTILE: dict[str, bytes] = {
    "not-utf8-start": b"\xff\xfe" + GOOD.encode(),
    "not-utf8-in-value": GOOD.replace("pg", "p\xe9").encode("latin-1"),
    "lone-surrogate-escape": b"marquees: [\xed\xa0\x80]\n",
    "nul-byte": GOOD.encode() + b"\x00\n",
    "control-chars": b"marquees: [\x1b[31m]\n",
    "flow-nesting-33": nested_flow(MAX_DEPTH + 1).encode(),
    "flow-nesting-999": nested_flow(999).encode(),
    "flow-nesting-100k": nested_flow(100_000).encode(),
    "block-nesting-300": nested_block(300).encode(),
    "map-nesting-300": nested_maps(300).encode(),
    "billion-laughs": laughs(9).encode(),
    "laughs-just-over": laughs(6, width=8).encode(),  # 8**6 = 262,144 nodes
    "recursive-alias": b"marquees: &a [*a]\n",
    "recursive-map-alias": b"a: &a {b: *a}\nmarquees: [*a]\n",
    "deep-through-alias": (
        nested_flow(20).replace("marquees: ", "x: &x ").encode()
        + b"marquees: "
        + b"[" * 20
        + b"*x"
        + b"]" * 20
        + b"\n"
    ),
    "merge-of-scalar": b"marquees:\n  - <<: 3\n",
    "python-tag": b"marquees: !!python/object/apply:os.system [id]\n",
    "unknown-tag": b"marquees: !nope [1]\n",
    "bad-timestamp": b"marquees: !!timestamp 2024-99-99\n",
    "bad-binary": b"marquees: !!binary '%%%'\n",
    "list-key": b"? [a, b]\n: 1\n",
    "huge-key": b"k" * 200_000 + b": 1\n",
    "huge-int": b"marquees: " + b"9" * 100_000 + b"\n",
    "two-documents": GOOD.encode() + b"---\n" + GOOD.encode(),
    "scalar-document": b"just text\n",
    "list-document": b"- 1\n- 2\n",
    "markup-key": b"'[/x]': 1\n'[bold]': 2\n",
}

# Pieces of YAML that the property tests string together into text a parser must survive.
YAML_PIECE_TEXTS = [
    "marquees:", "\n", "  ", "- ", "name: m1", "&a ", "*a", "[", "]", "{", "}", ",", ": ",
    "<<: ", "!!str ", "!!map ", "? ", "'", '"', "#", "---", "...", "|", ">", "%YAML 1.1",
    "host: 127.0.0.1", "user: x", "\t", "\\", "\x85", "\ufeff", "\u2028", "1e999", "~",
]  # fmt: skip
