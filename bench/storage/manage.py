"""Conversation management as what grows in production grows: fork and delete as a
conversation gets longer, list and search as a node holds more conversations.

Every conversation is written the way a node writes one: turn after turn into a real
``Store`` (LMDB in a temp dir, ``sync=False``: no disk flush in any figure), each turn
persisted with its blocks, its memsearch rows (``index_rows``, as the node's commit does)
and its final turn record (a ``ReActResult`` dump with its usage). A turn holds a prompt
(60-400 characters), 1-4 tool rounds (a call of 100-300 bytes of parameters, a result of
300 bytes to 4 KB, the first citing a new source of the pool), an answer (200-1,500
characters); the first turn also the title gate's ``stage.gate`` block, and every fifth a
workspace file of 2-8 KB (its bytes stored once, as ``artifacts``). Texts are slices of a
seeded word salad: the same store every run.

Fork and delete, per size of ``--turns`` (turns in the conversation), in one store:

- load (the baseline): ``Store.load(cid)``, what opening the conversation costs.
- fork at the last turn / at the middle turn: ``storage.forks.fork_conversation``, what the
  node's ``conv.manage`` handler calls. Bytes written: keys and values of every row the fork
  got (its workspace files' bytes are shared by reference, never copied).
- delete: ``storage.manage.delete_conversation`` of a fork made at the last turn (the same
  rows as the original but for its management row; its files' bytes stay, the original
  holds them). The original itself is deleted once at the end (one sample, its files'
  bytes freed too).

A fork and a delete are also given as a ratio to the load of the same size, medians
against medians taken in the same process: "a fork costs X loads".

List and search, per count of ``--conversations`` (conversations of ``LIST_TURNS`` turns):
the node's list (``Management._list``, the body of its ``list`` answer: every
conversation's outline, management row, turn order and turn records), a search for a
word in the title of a tenth of the conversations and in the first question of another
tenth, and a search for a word that occurs nowhere (the worst case: every conversation's
turns are read). Each also per conversation.

Round trip: at the smallest ``--turns`` size, one conversation is written into the store
of a real in-process ``Runtime`` (embedded NATS, its node) and forked at its last turn
three ways: ``fork_conversation`` on that store, ``rt.conversations.fork`` (the node's
handler called in process: the local shortcut, the default) and the same facade with no
node of its own, so the request goes over NATS to the node. The differences are what the
handler (a worker thread, the new conversation's summary) and the bus add.

The machine is shared and noisy: at each size the samples of the kinds are interleaved
(each round takes one of every kind, in a rotated order), a full collection runs before
each, and medians are reported. Sanity checks (a failure exits 1): each fork holds
exactly the original's blocks up to its turn and loads with those turns; the original's
rows are unchanged by the forks; a delete removes rows and leaves none of the
conversation; the list shows every conversation and each search finds the expected ones.

    python -m bench.storage.manage [--quick] [--turns 10,100,1000]
        [--conversations 10,100,1000] [--samples 15] [--out bench/results/conversations.json]
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import itertools
import random
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from rich.console import Console
from rich.progress import Progress, TaskID

from actline.actors import NodeSettings
from actline.actors.conversation.title import gate_block
from actline.actors.node.holding import Holds
from actline.actors.node.manage import Management
from actline.bus import Bus
from actline.config import Config
from actline.conversations import Connected, Conversations
from actline.messages import ReActResult, Usage
from actline.runtime import Runtime
from actline.storage import Store, Workspace
from actline.storage.forks import ForkPoint, fork_conversation
from actline.storage.layout import DATABASES
from actline.storage.manage import Removed, delete_conversation
from actline.timeline import SourceRow, Timeline
from actline.timeline.blocks import TOOL_CALL, TOOL_RESULT
from actline.timeline.paths import tc_path
from actline.tools.react.memsearch import index_rows
from bench.harness import (
    TOOLS,
    SanityCheckFailed,
    add_counts,
    checked,
    corpus,
    finish,
    int_list,
    median_ms,
    ms,
    new_table,
    parser,
    platform_info,
    settle,
    times,
)
from tests.timeline.builders import Build

SEED = 4_620
SOURCE = "c-original"
"""The conversation forked and deleted."""
LIST_TURNS = 5
"""Turns of each conversation of the list stores."""
FILE_EVERY = 5
"""Every so many turns write a workspace file."""
TOPICS = (
    "pricing", "backups", "quotas", "invoices", "webhooks",
    "migrations", "sandboxes", "dashboards", "archives", "permissions",
)  # fmt: skip
"""Title words, none a part of the salad's words (a search for one reads no body match)."""
HIT = "backups"
"""The search that finds conversations: the title of ``k % 10 == 1``, a question of ``k % 10
== 6``."""
MISS = "xylographs"
"""The search that finds nothing."""
DEFAULTS: dict[str, Any] = {
    "turns": [10, 100, 1000],
    "conversations": [10, 100, 1000],
    "samples": 15,
}
QUICK: dict[str, Any] = {"turns": [5, 20], "conversations": [5, 20], "samples": 3}
FORK_KINDS = ("load", "fork_last", "fork_mid", "delete")
LIST_KINDS = ("list", "search_hit", "search_miss")
TRIP_KINDS = ("store", "shortcut", "nats")


# -- the conversations -----------------------------------------------------------------------------
@dataclass
class Salad:
    """Seeded slices of the harness's word salad."""

    rng: random.Random
    text: str

    @classmethod
    def of(cls, seed: int) -> Salad:
        return cls(random.Random(seed), corpus(SEED))

    def words(self, low: int, high: int) -> str:
        size = self.rng.randint(low, high)
        start = self.rng.randrange(0, len(self.text) - size)
        return self.text[start : start + size]


def write_conversation(
    store: Store, cid: str, turns: int, *, seed: int, topic: str, asks: str = ""
) -> None:
    """``turns`` turns of ``cid``, each persisted as the node persists a finished turn
    (module docstring); ``asks``: a word put in the first question."""
    salad = Salad.of(seed)
    tl = Timeline(cid)
    b = Build(tl)
    ws = Workspace(store, cid)
    for n in range(1, turns + 1):
        tid = f"t{n}"
        prompt = salad.words(60, 400)
        b.turn(tid, f"{prompt} {asks}?" if n == 1 and asks else prompt)
        if n == 1:
            tl.append(gate_block(tid, b.at(), f"{topic.capitalize()} questions", "model"))
        rounds = salad.rng.randint(1, 4)
        for r in range(rounds):
            call = f"c{n}x{r}"
            tool = salad.rng.choice(TOOLS)
            params = {"query": salad.words(100, 300), "top_k": 3}
            b.add(
                TOOL_CALL,
                path=tc_path(tid, call, "call"),
                call_id=call,
                mime="application/json",
                data={"tool": tool, "params": params},
            )
            data: dict[str, Any] = {"status": "ok", "content": salad.words(300, 4000)}
            if r == 0:
                url = f"https://docs.example/{topic}/{n}"
                [row] = [s for s in tl.sources.add_rows([SourceRow(0, url=url, title=tid)]) if s]
                data["sources"] = [{"sid": row.sid}]
            b.add(
                TOOL_RESULT,
                path=tc_path(tid, call, "result"),
                call_id=call,
                mime="application/json",
                data=data,
                meta={"tool": tool, "ok": True},
            )
        if n % FILE_EVERY == 0:
            body = salad.words(2000, 8000).encode()
            ws.write(tid, "files", f"notes-{n}.md", body, ts=b.at())
        answer = salad.words(200, 1500)
        b.completion(answer)
        usage = Usage(input_tokens=2000 + 400 * n, output_tokens=300, model="bench-model")
        result = ReActResult(
            conversation_id=cid,
            turn_id=tid,
            status="completed",
            answer=answer,
            usage=usage,
            rounds=rounds + 1,
        )
        record = {"status": "completed", "turn_id": tid, "result": result.model_dump(mode="json")}
        store.persist(tl, turn_records={tid: record}, index=index_rows)


@dataclass(frozen=True, slots=True)
class Census:
    """Every row of a conversation, in every database: how many, their keys and values'
    bytes, and a digest of them all."""

    rows: int
    bytes: int
    digest: str


def census(store: Store, cid: str) -> Census:
    heads = (f"{cid}/".encode(), cid.encode() + b"\x00")
    digest = hashlib.sha256()
    rows = size = 0

    def fn(txn: Any) -> None:
        nonlocal rows, size
        for name in DATABASES:
            for key, value in txn.cursor(db=store.db[name]):
                k = bytes(key)
                if k == cid.encode() or k.startswith(heads):
                    rows += 1
                    size += len(k) + len(value)
                    digest.update(name.encode() + k + bytes(value))

    store.read(fn)
    return Census(rows, size, digest.hexdigest())


def file_bytes(store: Store) -> int:
    """The stored bytes of every workspace file (the ``artifacts`` database's values)."""

    def fn(txn: Any) -> int:
        return sum(len(value) for _, value in txn.cursor(db=store.db["artifacts"]))

    return int(store.read(fn))


def blocks_per_turn(store: Store, cid: str) -> list[tuple[str, int]]:
    """(turn id, its stored blocks) in the order the turns started."""
    counts = Counter(str(raw["turn_id"]) for raw in store.iter_blocks(cid))
    return list(counts.items())


# -- timing ----------------------------------------------------------------------------------------
def rotated(kinds: Sequence[str], i: int) -> list[str]:
    k = i % len(kinds)
    return [*kinds[k:], *kinds[:k]]


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


# -- fork and delete -------------------------------------------------------------------------------
def check_fork(
    store: Store, point: ForkPoint, turns: list[tuple[str, int]], at: int, turns_total: int
) -> dict[str, Any]:
    """The fork's figures (blocks, rows, bytes), after checking it holds the original's
    blocks up to turn ``at`` and loads with those turns."""
    cid = point.conversation_id
    expected = sum(n for _, n in turns[:at])
    blocks = sum(1 for _ in store.iter_blocks(cid))
    kept = [tid for tid, _ in turns[:at]]
    loaded = store.load(cid).timeline.turn_ids()
    if blocks != expected or point.blocks != expected or loaded != kept:
        raise SanityCheckFailed(
            blocks,
            f"{turns_total} turns, fork at {at}: {blocks} blocks stored, {point.blocks} said, "
            f"{expected} expected; turns {loaded[-3:]} loaded, {kept[-3:]} expected",
        )
    rows = census(store, cid)
    return {
        "at_turn": at,
        "blocks": blocks,
        "expected_blocks": expected,
        "block_bytes": point.block_bytes,
        "rows": rows.rows,
        "bytes_written": rows.bytes,
        "files_shared": point.files,
        "index_rows": point.index_rows,
        "exact": point.exact,
    }


def measure_fork(turns: int, samples: int, progress: Progress) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="actline-bench-conv-") as tmp:
        with Store(Path(tmp) / "db", sync=False) as store:
            task = progress.add_task(f"writing {turns:,} turns", total=None)
            write_conversation(store, SOURCE, turns, seed=SEED + turns, topic=TOPICS[0])
            per_turn = blocks_per_turn(store, SOURCE)
            original = census(store, SOURCE)
            files = file_bytes(store)
            mid = max(1, turns // 2)
            made = (f"c-fork-{n:06d}" for n in itertools.count())
            pending = [next(made)]  # forks at the last turn waiting for a delete sample
            fork_conversation(store, SOURCE, pending[0], str(turns))
            samples_of: dict[str, list[float]] = {kind: [] for kind in FORK_KINDS}
            figures: dict[str, dict[str, Any]] = {}
            removed: list[Removed] = []
            progress.update(task, description=f"forking {turns:,} turns", total=samples)

            def sample(kind: str) -> None:
                if kind == "load":
                    spent, _ = timed(lambda: store.load(SOURCE))
                elif kind == "delete":
                    cid = pending.pop(0)
                    spent, out = timed(lambda: delete_conversation(store, cid))
                    if not removed:
                        gone = census(store, cid)
                        if out.rows <= 0 or gone.rows or store.header(cid) is not None:
                            raise SanityCheckFailed(out.blocks, f"{cid}: {gone.rows} rows left")
                    removed.append(out)
                else:
                    cid, at = next(made), turns if kind == "fork_last" else mid
                    spent, point = timed(lambda: fork_conversation(store, SOURCE, cid, str(at)))
                    if kind not in figures:
                        figures[kind] = check_fork(store, point, per_turn, at, turns)
                    if kind == "fork_last":
                        pending.append(cid)
                    else:
                        delete_conversation(store, cid)
                samples_of[kind].append(spent)

            for i in range(samples):
                for kind in rotated(FORK_KINDS, i):
                    sample(kind)
                progress.advance(task)
            if census(store, SOURCE) != original:
                raise SanityCheckFailed(original.rows, "the forks changed the original's rows")
            for cid in pending:
                delete_conversation(store, cid)
            spent, last = timed(lambda: delete_conversation(store, SOURCE))
            if last.rows != original.rows or file_bytes(store) != 0:
                raise SanityCheckFailed(last.blocks, f"the original's delete removed {last}")
            progress.remove_task(task)
    load = median_ms(samples_of["load"])
    out: dict[str, Any] = {
        "turns": turns,
        "original": {
            "blocks": sum(n for _, n in per_turn),
            "rows": original.rows,
            "bytes": original.bytes,
            "file_bytes": files,
        },
        "load_p50_ms": load,
    }
    for kind in ("fork_last", "fork_mid"):
        p50 = median_ms(samples_of[kind])
        out[kind] = {**figures[kind], "p50_ms": p50, "loads": p50 / load}
    deleted = median_ms(samples_of["delete"])
    first = removed[0]
    out["delete"] = {
        "p50_ms": deleted,
        "loads": deleted / load,
        "rows": first.rows,
        "blocks": first.blocks,
        "turns": first.turns,
        "files": first.files,
    }
    out["delete_original"] = {
        "ms": spent * 1e3,
        "rows": last.rows,
        "artifacts": last.artifacts,
        "artifact_bytes": last.artifact_bytes,
    }
    out["samples"] = samples
    return out


# -- list and search -------------------------------------------------------------------------------
async def _release(cid: str) -> None:
    return None


def measure_list(count: int, samples: int, progress: Progress) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="actline-bench-list-") as tmp:
        home = Path(tmp) / "home"
        with Store(home, sync=False) as store:
            task = progress.add_task(f"writing {count:,} conversations", total=count)
            expected_hits = 0
            for k in range(count):
                asks = HIT if k % 10 == 6 else ""
                expected_hits += k % 10 in (1, 6)
                cid = f"c-list-{k:05d}"
                write_conversation(
                    store, cid, LIST_TURNS, seed=SEED + k, topic=TOPICS[k % 10], asks=asks
                )
                progress.advance(task)
            management = Management(
                cast(Bus, None),  # the list needs no bus
                store,
                NodeSettings(home=home),
                actors={},
                loading={},
                holds=Holds(),
                release=_release,
            )
            words = {"list": "", "search_hit": HIT, "search_miss": MISS}
            found = {kind: len(management._list(w, None)) for kind, w in words.items()}
            wanted = {"list": count, "search_hit": expected_hits, "search_miss": 0}
            if found != wanted:
                raise SanityCheckFailed(count * LIST_TURNS, f"found {found}, expected {wanted}")
            samples_of: dict[str, list[float]] = {kind: [] for kind in LIST_KINDS}
            progress.update(task, description=f"listing {count:,}", completed=0, total=samples)
            for i in range(samples):
                for kind in rotated(LIST_KINDS, i):
                    spent, _ = timed(partial(management._list, words[kind], None))
                    samples_of[kind].append(spent)
                progress.advance(task)
            progress.remove_task(task)
    out: dict[str, Any] = {"conversations": count, "turns_each": LIST_TURNS, "samples": samples}
    for kind in LIST_KINDS:
        p50 = median_ms(samples_of[kind])
        out[kind] = {"p50_ms": p50, "per_conversation_us": p50 * 1e3 / count, "found": found[kind]}
    return out


# -- the round trip through a runtime --------------------------------------------------------------
async def round_trip(turns: int, samples: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="actline-bench-rt-") as tmp:
        env = {
            "ACTLINE_HOME": str(Path(tmp) / "home"),
            "ACTLINE_FOLLOWUP_GRACE": "0",
            "ACTLINE_SYNC": "0",
        }
        async with Runtime(Config.load(env=env)) as rt:
            store = rt.store
            if store is None:
                raise SanityCheckFailed(0, "the runtime has no store")
            write_conversation(store, SOURCE, turns, seed=SEED + turns, topic=TOPICS[0])
            blocks = sum(1 for _ in store.iter_blocks(SOURCE))
            client = cast(Connected, SimpleNamespace(node=None, bus=rt.bus, nats_url=rt.nats_url))
            over_nats = Conversations(client)
            made = (f"c-trip-{n:06d}" for n in itertools.count())
            samples_of: dict[str, list[float]] = {kind: [] for kind in TRIP_KINDS}
            for i in range(samples):
                for kind in rotated(TRIP_KINDS, i):
                    gc.collect()
                    t0 = time.perf_counter()
                    if kind == "store":
                        cid = fork_conversation(
                            store, SOURCE, next(made), str(turns)
                        ).conversation_id
                    else:
                        facade = rt.conversations if kind == "shortcut" else over_nats
                        info = await facade.fork(SOURCE, at=turns)
                        cid = info.conversation_id
                        if info.turns != turns or info.forked_from != (SOURCE, f"t{turns}"):
                            raise SanityCheckFailed(blocks, f"{kind}: the fork is {info}")
                    samples_of[kind].append(time.perf_counter() - t0)
                    delete_conversation(store, cid)
    p50 = {kind: median_ms(samples_of[kind]) for kind in TRIP_KINDS}
    return {
        "turns": turns,
        "blocks": blocks,
        "samples": samples,
        "store_p50_ms": p50["store"],
        "shortcut_p50_ms": p50["shortcut"],
        "nats_p50_ms": p50["nats"],
        "shortcut_overhead_ms": p50["shortcut"] - p50["store"],
        "nats_overhead_ms": p50["nats"] - p50["store"],
    }


# -- the run and its report ------------------------------------------------------------------------
def run(turns: Sequence[int], counts: Sequence[int], samples: int, quick: bool) -> dict[str, Any]:
    started = time.perf_counter()
    with Progress(transient=True) as progress:
        forks = [measure_fork(n, samples, progress) for n in turns]
        lists = [measure_list(n, samples, progress) for n in counts]
        task: TaskID = progress.add_task("a fork through a runtime", total=None)
        trip = asyncio.run(round_trip(turns[0], samples))
        progress.remove_task(task)
    smallest, largest = forks[0], forks[-1]
    per_block = {
        kind: [f[kind]["p50_ms"] * 1e3 / f[kind]["blocks"] for f in (smallest, largest)]
        for kind in ("fork_last", "fork_mid")
    }
    return {
        "benchmark": "conversations",
        "quick": quick,
        "seed": SEED,
        "sync": False,
        "samples": samples,
        "forks": forks,
        "lists": lists,
        "round_trip": trip,
        "fork_us_per_block": per_block,
        "seconds": time.perf_counter() - started,
        **platform_info(),
    }


def report(console: Console, result: dict[str, Any]) -> None:
    table = new_table(
        "fork as the conversation grows (medians; x load: against Store.load of it)",
        ("turns", "blocks", "stored", "load", "fork @last", "x load", "fork @mid", "x load",
         "written @last"),
    )  # fmt: skip
    for f in result["forks"]:
        last, mid = f["fork_last"], f["fork_mid"]
        table.add_row(
            f"{f['turns']:,}",
            f"{f['original']['blocks']:,}",
            mb(f["original"]["bytes"]),
            ms(f["load_p50_ms"], unit=True),
            ms(last["p50_ms"], unit=True),
            times(last["loads"]),
            ms(mid["p50_ms"], unit=True),
            times(mid["loads"]),
            mb(last["bytes_written"]),
        )
    console.print(table)
    deletes = new_table(
        "delete as the conversation grows (medians; a fork at the last turn, then the original "
        "once)",
        ("turns", "load", "delete", "x load", "rows removed", "delete original", "its rows"),
    )
    for f in result["forks"]:
        gone, original = f["delete"], f["delete_original"]
        deletes.add_row(
            f"{f['turns']:,}",
            ms(f["load_p50_ms"], unit=True),
            ms(gone["p50_ms"], unit=True),
            times(gone["loads"]),
            f"{gone['rows']:,}",
            ms(original["ms"], unit=True),
            f"{original['rows']:,}",
        )
    console.print(deletes)
    lists = new_table(
        f"list and search as conversations grow ({LIST_TURNS} turns each; medians, and per "
        "conversation)",
        ("conversations", "list", "per conv", f"search {HIT!r}", "found", "per conv",
         "search, no match", "per conv"),
    )  # fmt: skip
    for row in result["lists"]:
        hit, miss = row["search_hit"], row["search_miss"]
        lists.add_row(
            f"{row['conversations']:,}",
            ms(row["list"]["p50_ms"], unit=True),
            f"{row['list']['per_conversation_us']:.0f} µs",
            ms(hit["p50_ms"], unit=True),
            f"{hit['found']:,}",
            f"{hit['per_conversation_us']:.0f} µs",
            ms(miss["p50_ms"], unit=True),
            f"{miss['per_conversation_us']:.0f} µs",
        )
    console.print(lists)
    trip = result["round_trip"]
    trips = new_table(
        f"a fork at the last turn of {trip['turns']} turns ({trip['blocks']} blocks) through a "
        "runtime",
        ("fork_conversation", "rt.conversations.fork (in process)", "over NATS"),
    )
    trips.add_row(
        ms(trip["store_p50_ms"], unit=True),
        f"{ms(trip['shortcut_p50_ms'], unit=True)} (+{ms(trip['shortcut_overhead_ms'])})",
        f"{ms(trip['nats_p50_ms'], unit=True)} (+{ms(trip['nats_overhead_ms'])})",
    )
    console.print(trips)
    per_block = result["fork_us_per_block"]
    console.print(
        "fork per kept block, smallest -> largest: at the last turn "
        f"{per_block['fork_last'][0]:.1f} -> {per_block['fork_last'][1]:.1f} µs, at the "
        f"middle {per_block['fork_mid'][0]:.1f} -> {per_block['fork_mid'][1]:.1f} µs"
    )


def mb(size: int) -> str:
    return f"{size / 1e6:.2f} MB" if size >= 1e5 else f"{size / 1e3:.1f} KB"


def main(argv: list[str] | None = None) -> int:
    cli = parser(
        "conversations",
        __doc__,
        quick="5 and 20 turns, 5 and 20 conversations, 3 samples (seconds)",
    )
    cli.add_argument("--turns", type=int_list, default=None, help="turns per conversation")
    cli.add_argument(
        "--conversations", type=int_list, default=None, help="conversations for list and search"
    )
    add_counts(cli, samples="samples of each kind at each size (15)")
    args = cli.parse_args(argv)
    options = settle(args, DEFAULTS, QUICK)
    turns = sorted(set(options["turns"]))
    counts = sorted(set(options["conversations"]))
    samples = max(1, options["samples"])
    console = Console()
    result = checked(console, lambda: run(turns, counts, samples, bool(args.quick)))
    if result is None:
        return 1
    report(console, result)
    return finish(console, args.out, result)


if __name__ == "__main__":
    raise SystemExit(main())
