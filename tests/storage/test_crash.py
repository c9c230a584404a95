"""Crash safety: a writer process SIGKILLed at random moments leaves only whole turns.

A worker (``tests/storage/worker.py``) appends turns to one conversation, one persist
per turn, printing the revision after each commit; the test follows those lines, kills
it at a random point (right after it opened the store, or after a random number of
commits plus a random short delay), and only once it is dead opens the store in this
process to check what the kill left. The map starts at 256 KiB so that it also grows
while the kills happen. For the second half of the kills another process keeps the
environment open, so that the lock file is not reset on the next open: a kill inside a
write transaction then leaves the writer mutex to LMDB's dead-owner recovery, and a
kill inside a read transaction leaves a reader slot that the next open must clear.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from actline.storage import Store
from actline.timeline import Timeline
from tests.storage.worker import SCRATCH_DB, SMALL_MAP, Worker, add_turn, check_whole, held_key

SEED = 20261122
KILLS = 50
CID = "crash"


@dataclass
class Progress:
    """What one worker reported, checked line by line against what the parent verified."""

    verified: int
    """The revision the parent verified before this worker started."""
    reported: int = field(init=False)
    grew: bool = False

    def __post_init__(self) -> None:
        self.reported = self.verified
        self._map_size = 0

    def feed(self, line: str) -> None:
        if line == "opened":
            return
        if line.startswith("ready "):
            revision, self._map_size = map(int, line.split()[1:])
            assert revision == self.verified, f"worker started at {revision}, not {self.verified}"
            return
        revision, map_size = map(int, line.split())
        assert revision == self.reported + 1, f"revision {revision} after {self.reported}"
        self.reported = revision
        self.grew = self.grew or map_size > self._map_size


def test_a_writer_killed_at_random_moments_leaves_only_whole_turns(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    store_dir = tmp_path / "store"
    revision = 0
    killed: list[int] = []
    grew_in_a_worker = 0
    keeper: Worker | None = None
    try:
        for kill in range(KILLS):
            if kill == KILLS // 2:
                keeper = Worker("keep", store_dir, log_dir=tmp_path)
                assert keeper.line() == "opened"
            progress = Progress(revision)
            with Worker("append", store_dir, CID, log_dir=tmp_path) as writer:
                progress.feed(writer.line())
                if rng.random() >= 0.1:  # else: kill while it loads the conversation
                    progress.feed(writer.line())
                    for _ in range(rng.randint(0, 4)):
                        progress.feed(writer.line())
                    if rng.random() < 0.7:
                        # Spreads the kill over building, writing and committing the next
                        # turn; nothing waits on it and no result depends on it.
                        time.sleep(rng.uniform(0, 0.004))
                for line in writer.kill():
                    progress.feed(line)
                killed.append(writer.pid)
            with Store(store_dir, map_size=SMALL_MAP) as store:
                stored = check_whole(store, CID)
            # Each persist prints its revision once committed: the kill can fall between a
            # commit and its line, never further ahead, and never undo a printed commit.
            assert progress.reported <= stored <= progress.reported + 1, (
                f"kill {kill}: worker reported revision {progress.reported}, stored {stored}"
            )
            revision = stored
            grew_in_a_worker += progress.grew

        assert revision > KILLS, f"only {revision} turns were committed in {KILLS} runs"
        assert grew_in_a_worker, "no worker grew the map while it ran"
        with Store(store_dir, map_size=SMALL_MAP) as store:
            assert store.map_size > 8 * SMALL_MAP
        assert keeper is not None
        keeper.send("readers")
        stale = set(json.loads(keeper.expect("readers"))) & set(killed)
        assert not stale, f"reader slots of killed workers {sorted(stale)} were not cleared"
    finally:
        if keeper is not None:
            keeper.close()


def test_a_writer_killed_inside_its_write_transaction_does_not_block_the_next_writer(
    tmp_path: Path,
) -> None:
    store_dir = tmp_path / "store"
    with Store(store_dir, map_size=SMALL_MAP) as store:
        tl = Timeline(CID)
        for n in (1, 2):
            add_turn(tl, n)
            store.persist(tl)
    # With another process keeping the environment open the lock file is not reset, so the
    # next writer meets the dead process's writer lock and must recover it.
    with Worker("keep", store_dir, log_dir=tmp_path) as keeper:
        assert keeper.line() == "opened"
        with Worker("hold-write", store_dir, log_dir=tmp_path) as holder:
            assert holder.line() == "holding"
            assert holder.kill() == []
        with Worker("append", store_dir, CID, "--turns", 2, log_dir=tmp_path) as writer:
            lines = writer.finish()
        assert [line.split()[0] for line in lines] == ["opened", "ready", "3", "4", "done"]
        with Store(store_dir, map_size=SMALL_MAP) as store:
            assert check_whole(store, CID) == 4
            key = held_key(holder.pid)
            assert store.read(lambda txn: txn.get(key, db=store.db[SCRATCH_DB])) is None
