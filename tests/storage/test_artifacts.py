"""Content-addressed artifacts: dedup, reference counts, gc, persistence, map growth."""

from __future__ import annotations

import hashlib
from pathlib import Path

import lmdb
import pytest

from actline.storage import NotStored, Store
from actline.storage import artifacts as art


def stored_count(store: Store) -> int:
    return store.read(lambda txn: int(txn.stat(store.db["artifacts"])["entries"]))


def test_identical_content_is_stored_once_with_two_references(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        first = art.put(store, b"same bytes")
        second = art.put(store, b"same bytes")
        assert first == second == hashlib.sha256(b"same bytes").hexdigest()
        assert stored_count(store) == 1
        assert art.refcount(store, first) == 2
        assert art.get(store, first) == b"same bytes"


def test_put_adds_the_given_number_of_references(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        sha = art.put(store, b"x", refs=3)
        assert art.refcount(store, sha) == 3
        assert art.refcount(store, art.put(store, b"y", refs=0)) == 0
        with pytest.raises(ValueError, match="at least 0"):
            art.put(store, b"z", refs=-1)


def test_missing_content_is_not_stored(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        missing = hashlib.sha256(b"never put").hexdigest()
        for sha in (missing, "not-a-digest", "", "Ü" * 64):
            with pytest.raises(NotStored) as caught:
                art.get(store, sha)
            assert (caught.value.kind, caught.value.key) == ("artifact", sha)
            with pytest.raises(NotStored):
                art.ref(store, sha, 1)
            assert art.refcount(store, sha) == 0


def test_a_reference_count_never_goes_below_zero(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        sha = art.put(store, b"counted", refs=2)
        assert art.ref(store, sha, -1) == 1
        assert art.ref(store, sha, -5) == 0
        assert art.refcount(store, sha) == 0
        assert art.ref(store, sha, 2) == 2
        assert art.ref(store, sha, 0) == 2


def test_gc_removes_unreferenced_content_only(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        kept = art.put(store, b"kept")
        dropped = art.put(store, b"dropped!")
        never = art.put(store, b"never referenced", refs=0)
        art.ref(store, dropped, -1)
        assert art.gc(store) == (2, len(b"dropped!") + len(b"never referenced"))
        assert art.get(store, kept) == b"kept"
        assert art.refcount(store, kept) == 1
        for sha in (dropped, never):
            with pytest.raises(NotStored):
                art.get(store, sha)
            assert art.refcount(store, sha) == 0
        assert stored_count(store) == 1
        assert art.gc(store) == (0, 0)


def test_content_put_again_after_gc_is_stored_again(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        sha = art.put(store, b"phoenix", refs=0)
        assert art.gc(store) == (1, 7)
        assert art.put(store, b"phoenix") == sha
        assert art.get(store, sha) == b"phoenix"
        assert art.refcount(store, sha) == 1


def test_content_and_counts_survive_reopening_the_store(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        sha = art.put(store, b"durable")
        art.put(store, b"durable")
    with Store(tmp_path) as store:
        assert art.get(store, sha) == b"durable"
        assert art.refcount(store, sha) == 2


def test_put_txn_commits_or_aborts_with_the_callers_transaction(tmp_path: Path) -> None:
    with Store(tmp_path) as store:

        def fails(txn: lmdb.Transaction) -> str:
            art.put_txn(store, txn, b"rolled back")
            raise RuntimeError("abort")

        with pytest.raises(RuntimeError):
            store.write(fails)
        assert stored_count(store) == 0

        def two(txn: lmdb.Transaction) -> tuple[str, str]:
            return art.put_txn(store, txn, b"a"), art.put_txn(store, txn, b"a")

        a, again = store.write(two)
        assert a == again
        assert art.refcount(store, a) == 2


def test_large_content_grows_the_map_and_reads_back(tmp_path: Path) -> None:
    with Store(tmp_path, map_size=256 << 10) as store:
        start = store.map_size
        big = bytes(range(256)) * 12_000  # ~3 MB: overflow pages and several map doublings
        sha = art.put(store, big)
        assert store.map_size > start
        assert art.get(store, sha) == big
        assert art.refcount(store, sha) == 1
        art.ref(store, sha, -1)
        assert art.gc(store) == (1, len(big))
