"""The decision loop's own cost per round, with an instant model, against the raw NATS floor.

Everything runs on one embedded nats-server, in this process but for the node of
part 4: ``actors.Node`` (its conversation, decision and streamer actors) on one
connection and an ``actors.Client`` on another. The model is ``InstantModel``: every
call answers at once, in one chunk, with a line of thinking and a decision calling
``react.search_knowledge`` (``top_k`` 1 over ``examples/kb`` by BM25: the tool's cost stays
a small constant, while a hybrid search embeds each new query, about 11 ms on two cores; a
new query each round, so the identical-call guard never fires) until the turn's last round, which
completes. A round then costs only the loop: the checkpoint (one LMDB commit,
fsync-ed with ``storage_sync=True``), the render, the model request to the node's
streamer and its reply, the thinking deltas and three progress cards published, the
tool call and result blocks appended and the tool itself (its own in-process cost is
reported apart, as ``tool``).

1. Per round. Conversations of ``N`` blocks (``--sizes``; turns of header, prompt, 1-6
   rounds of notes, tool call and result, and a completion; texts of 60-400
   characters; a day old; 50 sources) are written with ``Store.persist`` into the
   store handed to the node, before the node loads them: one conversation per
   measured turn, so that every turn starts near ``N`` blocks. Each size runs with
   ``storage_sync`` on and off, each case with its own store, node, client and subject
   prefix. A warm-up turn of two rounds loads and fully renders each conversation;
   then the ``--turns`` measured turns of ``--rounds`` rounds run, interleaved across
   the cases. A round is the time between the ``ts`` of consecutive ``thinking`` cards
   (stamped on the node, so delivery to the client is not in it): ``rounds - 1``
   samples per turn. Reported with it: the turn's wall time at the client (submit to
   result) over its rounds, its pickup (submit to the node's ``turn.accepted``), and
   the legs of a round: thinking card to ``tool_call`` card (checkpoint, render, model
   call, decision checked) and ``tool_call`` to ``tool_result`` (blocks appended, tool
   run). The nodes have a 1,000,000-token context window so that the prefilled blocks
   stay visible: compaction is not measured here.
2. Floor, in blocks between those turns: plain nats-py, no actline code. One publish
   of a progress card (to a subscriber on a second connection) and one request/reply
   to a trivial responder on the same connection (the node's streamer shares the
   node's connection), with the byte sizes of the loop's card, model request (a
   context reference) and model reply. The loop does more per round (three cards, a
   delta, the tool); the floor is what no runtime can avoid.
   The durable floor adds what no durable round can avoid either: one LMDB commit of
   the bytes a round persists, in an environment of its own per case (``sync`` and
   ``metasync`` as the case's ``storage_sync``; one write transaction putting that many
   bytes under a new key), sampled after every batch too. The bytes are measured, not
   assumed: after each measured turn, the msgpack of the block dicts the turn appended
   (read back from the node's store above the cursor recorded before it) over its
   rounds, plus the msgpack of the header rows (sources pool, plans) the turn added or
   changed (packed rows compared before and after it; a row changed by several rounds
   counts once) over its rounds, plus the header row and the turn record that every
   round rewrites.
   Durable floor = NATS floor p50 + commit p50 (likewise p90).
3. Throughput. ``--conversations`` new conversations on one node each run turns of 2
   or 3 rounds, one after another, until ``--total-turns`` turns are done
   (``followup_grace_s`` 0): turns per second over the wall time, and this process's
   CPU time per turn (the loop runs on one event loop, so that bounds the rate).
4. Memory. A node in a child process (fresh, so that memory freed by the parts before
   is not reused unseen) takes ``--waiting`` turns, each in a new conversation, whose
   model calls ``agent.send`` to an agent nobody answers (wait timeout one hour). The
   growth of that process's resident memory (``/proc/self/statm``, after
   ``gc.collect()``) from before the batch to when every turn has shown its ``waiting``
   card, over the count, is the memory per conversation waiting on a DONE. A first
   batch of a tenth as many turns warms the node up. Then every turn is cancelled and
   must end ``cancelled``.

Targets (``storage_sync=True``, as in production), in ``targets``: a round's p50 within
3x of the NATS floor's p50 at every size, and under 5 ms at the largest. In
``floor_targets``: a round's p50 within 2x of the durable floor's p50 at every size.

``--baseline PATH`` reads an earlier run's JSON (``bench/results/loop_baseline_main.json``
records main before the loop work) and reports this run beside it: round p50 per size and
mode, turns/s and CPU per turn per throughput run. Its targets (``baseline.targets``, sync
runs): CPU per turn at most half the baseline's, turns/s at least twice. They are judged
only when the baseline saw a machine of the same speed (its NATS floor p50 within
``MACHINE_DRIFT``, 1.25x, of this run's); otherwise its ratios are shown, its targets are
not judged, and the note names ``python -m bench loop_split --against`` for both trees in one run.
The exit status is 1 when any judged target is missed.

The parts live in modules of their own: ``model`` (the instant model, the prefilled
conversations, the node's settings), ``rounds`` (parts 1 and 2 interleaved, the targets),
``floor`` (the NATS floor and the durable floor), ``throughput`` (part 3 and the cost of
authentication), ``memory`` (part 4), ``run`` (the run and the command line), ``report``
(the table) and ``compare`` (``--baseline``). ``split`` runs part 3 with the clients in a
process of their own, ``trace_overhead`` and ``langgraph_side`` measure the same round
with tracing on and off and against LangGraph.

    python -m bench.loop [--quick] [--sizes 100,5000] [--rounds 10] [--turns 12]
        [--conversations 50] [--total-turns 1000] [--waiting 200] [--no-nosync]
        [--commit-block 25] [--baseline bench/results/loop_baseline_main.json]
        [--out bench/results/loop.json]
"""

from bench.loop.compare import MACHINE_DRIFT, baseline_table, compare, not_comparable
from bench.loop.floor import CommitFloor, Floor, floor_payloads, persisted_bytes
from bench.loop.memory import memory
from bench.loop.model import (
    AGE_S,
    KB,
    QUESTION,
    InstantModel,
    LoopCheckFailed,
    Plan,
    node_and_client,
    node_settings,
    prefill,
    query,
    role,
    rss_bytes,
)
from bench.loop.report import table
from bench.loop.rounds import Case, measure_turn, open_case, per_round, run_turn, warm_up
from bench.loop.run import QUICK, main, run, run_async
from bench.loop.throughput import auth_cost, throughput

__all__ = [
    "AGE_S",
    "KB",
    "MACHINE_DRIFT",
    "QUESTION",
    "QUICK",
    "Case",
    "CommitFloor",
    "Floor",
    "InstantModel",
    "LoopCheckFailed",
    "Plan",
    "auth_cost",
    "baseline_table",
    "compare",
    "floor_payloads",
    "main",
    "measure_turn",
    "memory",
    "node_and_client",
    "node_settings",
    "not_comparable",
    "open_case",
    "per_round",
    "persisted_bytes",
    "prefill",
    "query",
    "role",
    "rss_bytes",
    "run",
    "run_async",
    "run_turn",
    "table",
    "throughput",
    "warm_up",
]
