"""Rendezvous assignment: every replica computes the same owner, shares are even, and a replica
coming or going moves only the Marquees it takes or held."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from playguard_async.coordination.replicas import rendezvous_owner

MARQUEES = [f"m{i}" for i in range(4000)]
replica_ids = st.binary(min_size=1, max_size=40)


@given(st.lists(replica_ids, min_size=1, max_size=8, unique=True), replica_ids)
def test_a_new_replica_takes_marquees_only_for_itself_and_a_leaving_one_only_gives_back(
    replicas: list[bytes], newcomer: bytes
) -> None:
    if newcomer in replicas:
        return
    before = tuple(replicas)
    after = (*before, newcomer)
    for marquee in MARQUEES[:300]:
        old, new = rendezvous_owner(marquee, before), rendezvous_owner(marquee, after)
        assert new in (old, newcomer), marquee


@given(st.permutations([b"r1", b"r2", b"r3", b"r4"]))
def test_the_owner_does_not_depend_on_the_order_replicas_are_listed_in(
    replicas: list[bytes],
) -> None:
    listed = tuple(replicas)
    canonical = (b"r1", b"r2", b"r3", b"r4")
    assert [rendezvous_owner(m, listed) for m in MARQUEES[:300]] == [
        rendezvous_owner(m, canonical) for m in MARQUEES[:300]
    ]


def test_shares_are_even_for_every_replica_count_up_to_eight() -> None:
    for count in range(1, 9):
        replicas = tuple(f"host-{n}:{1000 + n}".encode() for n in range(count))
        shares = Counter(rendezvous_owner(marquee, replicas) for marquee in MARQUEES)
        assert set(shares) == set(replicas)
        expected = len(MARQUEES) / count
        assert all(abs(share - expected) < 0.15 * expected for share in shares.values()), shares
