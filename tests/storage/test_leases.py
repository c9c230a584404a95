"""Node-local conversation leases: check-and-set, renewal, lapse, release."""

from __future__ import annotations

from pathlib import Path

from storage import Store
from storage.leases import acquire, holder, release, renew


def test_a_held_lease_keeps_others_out_until_it_lapses(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        lease = acquire(store, "c1", "node-a", ttl=10, now=100)
        assert lease is not None and lease.expires_at == 110
        assert acquire(store, "c1", "node-b", ttl=10, now=105) is None
        assert holder(store, "c1", now=105) == lease
        taken = acquire(store, "c1", "node-b", ttl=10, now=111)
        assert taken is not None and taken.owner == "node-b" and taken.acquired_at == 111


def test_the_owner_renews_and_acquiring_again_counts_as_a_renewal(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        acquire(store, "c1", "a", ttl=10, now=0)
        renewed = renew(store, "c1", "a", ttl=10, now=5)
        assert renewed is not None and (renewed.expires_at, renewed.renewals) == (15, 1)
        again = acquire(store, "c1", "a", ttl=10, now=6)
        assert again is not None and (again.acquired_at, again.renewals) == (0, 2)
        assert renew(store, "c1", "b", ttl=10, now=7) is None
        assert renew(store, "c1", "a", ttl=10, now=99) is None  # lapsed: take it again


def test_release_frees_only_our_own_lease(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        acquire(store, "c1", "a", ttl=10, now=0)
        assert release(store, "c1", "b") is False
        assert release(store, "c1", "a") is True
        assert holder(store, "c1", now=1) is None
        assert release(store, "c1", "a") is False
