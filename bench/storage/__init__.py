"""Turn persistence in the LMDB store against rewriting the whole timeline as one JSON file.

A deterministic conversation (seeded ``random.Random``; block ids ``b<k>``,
turn ids ``t<n>``; turns of a header, a prompt, 1-12 decision rounds of
sometimes notes, a tool call and its result, and a completion; texts of
100 B-2 KB; a sources pool of 50 rows) is built to exactly ``N`` blocks for N
in ``--sizes``, as a ``Timeline``, and written into its own ``Store`` (one
LMDB environment per size, under the system temp directory, removed at the
end) in transactions of 5,000 blocks. Then one more turn of exactly 20 blocks
(header, prompt, 8 tool calls with results, notes, completion) is appended to
the timeline in memory, and every sample persists that turn:

- lmdb: ``Store.append_turn(cid, the 20 blocks, tl.snapshot())``
  with the snapshot taken once (the real header of that timeline: cursors, cache
  and notices; the pool and plans are header rows, stored with the prefill and
  not changed by the turn).
- fixed hdr: the same call with the header of a 100-block conversation at every
  size, the previous stored header being such a one too; this isolates the
  store's own cost.
- persist(): ``Store.persist(tl)``, the call production makes after a round;
  it writes the same rows and also reads the stored header, finds the new
  blocks in the timeline and takes the snapshot.
- naive: what the original does every turn: the whole timeline (full snapshot with
  the pool and plans, and every block as a dict) as one JSON document, written to a temporary file,
  flushed, ``os.fsync``-ed and ``os.replace``-d over the previous one.

After each lmdb, fixed hdr and persist() sample the turn is rolled back (outside the
timing, in one write transaction that deletes its block and path rows and its
turn-log entry and puts the previous header bytes back), so every sample
finds exactly ``N`` blocks stored. The stores are opened with ``sync=True``
(the default, what production uses: every commit is flushed to disk like the
naive ``fsync``); prefill and rollbacks use the same setting. The machine is
shared and noisy, so the samples are interleaved: each round takes one sample
of every kind at every size. The stores are then reopened with ``sync=False``
for the same number of lmdb samples, which leaves out the disk flush (the
"no fsync" rows). Prefill writes no turn-log entries (that would need one
transaction per turn). Everything built up front is moved out of the garbage
collector's view (``gc.freeze``) so that collections of it do not land in
samples.

Load: the conversation of the largest size up to 10,000 blocks is loaded
with ``Store.load`` (``boundary_seq`` 0: the whole conversation is visible,
``Timeline.restore`` of every block) and read raw with
``list(Store.iter_blocks(cid))``; the loaded blocks must equal the built ones.

Growing pool: one conversation of ``--pool-turns`` turns (2,000) persisted with
``Store.persist_round`` after every turn, each turn adding 5 sources (10,000 by
the end) and either a new plan (every 4th turn: 500 plans) or a step
acknowledgement of the current one. Every round's bytes are counted: the stored
header, the header rows it wrote (key and msgpack value) and its blocks. Then
``--samples`` more rounds of the same kind are timed on it and, interleaved, on
a second conversation built the same way to 10 turns (``sync=True``, no
rollback: each sample is a real round).

Targets: persist cost flat (lmdb p50 at the largest size within 1.5x of the
smallest), lmdb at least 50x faster than the naive rewrite (p50 against
p50) at the largest size up to 10,000 blocks, and in the growing-pool case
the persist p50 at 2,000 turns within 1.5x of the one at 10 turns with the
header and row bytes of a round not growing with the pool (within 64 bytes).

The parts live in modules of their own: ``conversation`` (the synthetic conversation and
the measured turn), ``persist`` (the prefilled store, the samples and their rollback, the
load), ``pool`` (the growing-pool case), ``run`` (the run, the targets and the command
line) and ``report`` (the tables).

    python -m bench.storage [--sizes 100,10000,100000] [--samples 40]
        [--pool-turns 2000] [--out bench/results/storage.json]
"""

from bench.storage.conversation import (
    CID,
    TEXT_MAX,
    TEXT_MIN,
    TURN_BLOCKS,
    Conversation,
    add,
    build,
    sources,
)
from bench.storage.persist import Case, naive_samples, prepare, rollback
from bench.storage.pool import GrowingPool, growing_pool
from bench.storage.report import pool_table, table
from bench.storage.run import main, run

__all__ = [
    "CID",
    "TEXT_MAX",
    "TEXT_MIN",
    "TURN_BLOCKS",
    "Case",
    "Conversation",
    "GrowingPool",
    "add",
    "build",
    "growing_pool",
    "main",
    "naive_samples",
    "pool_table",
    "prepare",
    "rollback",
    "run",
    "sources",
    "table",
]
