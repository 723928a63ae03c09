"""A secret in host output is never shown, whole or in part, wherever a cut of the text lands: the
cut of the tail looked at, the cut of the line shown, or the cut the text arrived with."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from playguard_async.kits.textclean import LINE_LIMIT, PARTIAL_SECRET, host_line, tail_reach

SECRET = "3tRegistryPassw0rd"


def _pieces(secret: str) -> set[str]:
    """Every piece of ``secret`` long enough that showing it gives part of it away."""
    return {
        secret[start : start + size]
        for size in range(PARTIAL_SECRET, len(secret) + 1)
        for start in range(len(secret) - size + 1)
    }


def _assert_hidden(shown: str, secret: str) -> None:
    leaked = sorted(piece for piece in _pieces(secret) if piece in shown)
    assert not leaked, f"{leaked} of the secret shown in {shown!r}"


@pytest.mark.parametrize("offset", range(-len(SECRET) - 2, len(SECRET) + 3))
def test_a_secret_straddling_the_tail_cut_is_not_shown_in_part(offset: int) -> None:
    """The health check's 4 KiB output, one line, the secret at every place around the point
    where the tail looked at begins."""
    reach = tail_reach()
    start = 4096 - reach + offset
    text = "x" * start + SECRET + "y" * (4096 - start - len(SECRET))
    _assert_hidden(host_line(text, secrets=[SECRET]), SECRET)


@pytest.mark.parametrize("offset", range(-len(SECRET) - 2, len(SECRET) + 3))
def test_a_secret_straddling_the_shown_lines_cut_is_not_shown_in_part(offset: int) -> None:
    start = LINE_LIMIT - 3 + offset
    text = "x" * start + SECRET + "y" * 50
    shown = host_line(text, secrets=[SECRET])
    assert len(shown) <= LINE_LIMIT
    _assert_hidden(shown, SECRET)


@pytest.mark.parametrize("kept", range(1, len(SECRET)))
def test_a_secret_the_text_arrived_cut_in_is_masked_from_a_few_characters(kept: int) -> None:
    """Docker keeps the first 4 KiB of a health check's output: the secret's beginning can end
    the text, or (output cut at its start) its end begin it."""
    ending = host_line("login failed for " + SECRET[:kept], secrets=[SECRET])
    beginning = host_line(SECRET[-kept:] + " was refused", secrets=[SECRET])
    _assert_hidden(ending, SECRET)
    _assert_hidden(beginning, SECRET)
    if kept >= PARTIAL_SECRET:
        assert ending == "login failed for ***"
        assert beginning == "*** was refused"
    else:
        assert ending == "login failed for " + SECRET[:kept]


@pytest.mark.parametrize(
    ("raw", "secret"),
    [
        ("user: pass \x1b[0mword ok", "pass word"),
        ("user: pass   word ok", "pass word"),
        ("user: pass\tword ok", "pass word"),
        ("ab\x1b[31mcdefgh", "abcdefgh"),
    ],
    ids=["markup-inside", "blank-run-inside", "tab-inside", "colour-inside"],
)
def test_a_secret_written_in_pieces_is_masked_once_joined(raw: str, secret: str) -> None:
    _assert_hidden(host_line(raw, secrets=[secret]), secret)


_SECRET_ALPHABET = st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="x*.")


@given(
    secret=st.text(_SECRET_ALPHABET, min_size=PARTIAL_SECRET, max_size=64),
    before=st.integers(min_value=0, max_value=5000),
    after=st.integers(min_value=0, max_value=5000),
    limit=st.integers(min_value=10, max_value=LINE_LIMIT),
)
def test_no_piece_of_a_secret_is_shown_wherever_it_stands(
    secret: str, before: int, after: int, limit: int
) -> None:
    shown = host_line("x" * before + secret + "x" * after, secrets=[secret], limit=limit)
    assert len(shown) <= limit
    _assert_hidden(shown, secret)
