"""The consistent hash ring that gives nodes a preferred conductor."""

from __future__ import annotations

import uuid

from metalforge.coordination.hashring import HashRing


def test_empty_ring_has_no_owner() -> None:
    assert HashRing([]).owner("x") is None


def test_every_host_gets_a_share_and_removal_moves_only_its_share() -> None:
    keys = [str(uuid.UUID(int=i)) for i in range(3000)]
    three = HashRing(["a", "b", "c"])
    owners = {k: three.owner(k) for k in keys}
    shares = {h: sum(1 for o in owners.values() if o == h) for h in "abc"}
    assert all(600 < n < 1400 for n in shares.values()), shares
    two = HashRing(["a", "b"])
    moved = [k for k in keys if owners[k] != "c" and two.owner(k) != owners[k]]
    assert moved == []
    assert all(two.owner(k) in ("a", "b") for k in keys)
