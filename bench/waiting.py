"""Turns waiting on outside agents: what they cost a node, and what is left for new turns.

One node in this process (single mode, or with ``--cluster`` cluster mode: a lease per
conversation, kept while the node beats, and every round copied to JetStream; an
embedded nats-server, LMDB in a temp dir, ``max_active_turns`` 64 unless ``--slots``,
synced commits). Waiting turns are turn
requests published straight to the queue (no client handle each, so that this process's
memory is the node's), each in a new conversation whose model (``bench.loop``'s
``InstantModel``) calls ``agent.send`` to the agent ``nobody`` on its first round; nobody
answers during the measurement (wait timeout one hour). A waiting turn is parked
(``actline.actors.services.parking``): it holds no work slot.

For each size (``--sizes``, cumulative: more turns are parked on top of the ones before),
after the waiting turns are all parked:

- the time to park the new ones (first request published to the last one parked);
- this process's resident memory (``/proc/self/statm`` after ``gc.collect()``, once the
  ordinary turns' conversations of the row before were evicted as idle), its growth per
  waiting turn over the size-0 figure taken after that row's batch (the heap keeps what
  a batch allocated: taken before it, the first batch's high-water mark would be
  charged to the waiting turns), and the marginal growth per turn from the row before;
- the turns/s of a batch of ``--new-turns`` ordinary turns, each in a new conversation,
  ``--workers`` at a time, answered by the offline model (``ExtractiveModel``: plan,
  search, read, note, answer), the better of two batches, against the same with 0
  waiting (the baseline, same process, measured first and again once every waiting turn
  was answered: the ratio is against the better of the two) is the target (at least
  0.8x). The better of two runs, against the better idle figure: a machine shared with
  other work lowers a figure, never raises it.

Then every waiting turn gets its DONE (``Client.send_done`` with its turn id) and must
complete with the signal applied. Prints a table and writes ``bench/results/waiting.json``.

    python -m bench.waiting [--sizes 0,1000,5000,10000] [--new-turns 200] [--quick] [--cluster]
"""

from __future__ import annotations

import asyncio
import gc
import platform
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from actline.actors import Client, Node
from actline.bus import Bus, EmbeddedNats
from actline.llm import ExtractiveModel
from actline.llm.protocol import Chunk
from actline.messages import Ack, GenerateRequest, TurnRequest
from actline.timeline.blocks import SIGNAL_DONE
from actline.tools import KnowledgeSpace
from bench.harness import (
    add_counts,
    add_sizes,
    checked,
    finish,
    new_table,
    parser,
    result_path,
    settle,
)
from bench.loop import KB, InstantModel, Plan, node_settings, rss_bytes

SIZES = (0, 1_000, 5_000, 10_000)
NEW_TURNS = 200
WORKERS = 16
QUICK: dict[str, Any] = {
    "sizes": (0, 20),
    "new_turns": 8,
    "workers": 4,
    "slots": 4,
    "evict_s": 1.0,
}
AGENT = "nobody"
WAITING = "c-wait-"
"""Conversation ids of waiting turns start with this."""
QUESTION = "Check the rollout plan."
NEW_QUESTION = "What are the retention settings?"
TARGET_RSS_BYTES = 1 << 30
TARGET_RATIO = 0.8
PARK_TIMEOUT_S = 1_800.0
TURN_TIMEOUT_S = 120.0
SUBMIT_BATCH = 100
DONE_CONCURRENCY = 64
EVICT_S = 10.0
"""Idle conversations leave memory after this (the new turns' between rows)."""
BATCHES = 2
"""Idle conversations leave memory after this (``idle_evict_s``): RSS is the waiting turns'."""


class WaitingCheckFailed(Exception):
    """The node did not do what the runtime promises: the figures mean nothing."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what

    def __str__(self) -> str:
        return self.what


class BenchModel:
    """Waiting conversations call ``agent.send`` at once (``InstantModel``); the others get
    the offline model."""

    name = "bench-waiting"

    def __init__(self) -> None:
        self.waiting = InstantModel(Plan(2, AGENT))
        self.offline = ExtractiveModel()

    def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        if request.conversation_id.startswith(WAITING):
            return self.waiting.stream(request)
        return self.offline.stream(request)


async def poll(check: Callable[[], bool], timeout: float, what: str) -> None:
    """Wait (polling, this is a benchmark) until ``check()``, at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise WaitingCheckFailed(f"{what}: not within {timeout:.0f} s")
        await asyncio.sleep(0.05)


async def gather_bounded(jobs: Sequence[Callable[[], Awaitable[Any]]], limit: int) -> list[Any]:
    """Run ``jobs`` at most ``limit`` at a time; their results in order."""
    room = asyncio.Semaphore(limit)

    async def one(job: Callable[[], Awaitable[Any]]) -> Any:
        async with room:
            return await job()

    return list(await asyncio.gather(*(one(j) for j in jobs)))


class Bench:
    """One node and one client connection, the waiting turns parked so far."""

    def __init__(self, node: Node, bus: Bus, client: Client) -> None:
        self.node = node
        self.evict_s = node.settings.idle_evict_s
        self.bus = bus
        self.client = client
        self.waiting: list[tuple[str, str]] = []
        """(conversation id, turn id) of each waiting turn."""
        self.new_done = 0

    async def park(self, count: int) -> float:
        """Park ``count`` more waiting turns; the seconds it took."""
        target = len(self.node.queue.parked) + count
        first = len(self.waiting)
        turns = [(f"{WAITING}{i}", f"t-wait-{i}") for i in range(first, first + count)]
        t0 = time.perf_counter()
        for at in range(0, count, SUBMIT_BATCH):
            await asyncio.gather(
                *(
                    self.bus.publish_stored(
                        self.bus.subjects.turn_submit,
                        TurnRequest(conversation_id=cid, turn_id=tid, text=QUESTION),
                    )
                    for cid, tid in turns[at : at + SUBMIT_BATCH]
                )
            )
        queue = self.node.queue
        await poll(lambda: len(queue.parked) >= target, PARK_TIMEOUT_S, f"{count} turns parked")
        self.waiting.extend(turns)
        return time.perf_counter() - t0

    async def evicted(self) -> None:
        """Wait until the ordinary turns' conversations were evicted (idle)."""
        node = self.node
        await poll(
            lambda: not any(c.startswith("c-new-") for c in node.conversations),
            self.evict_s * 10 + 10,
            "idle conversations evicted",
        )

    async def best_rate(self, tag: str, count: int, workers: int) -> float:
        """The better turns/s of ``BATCHES`` batches of ``count`` new turns (the machine may
        be shared: the best run is the node's own rate)."""
        rates = [await self.new_turns(f"{tag}-{b}", count, workers) for b in range(BATCHES)]
        return max(rates)

    async def new_turns(self, tag: str, count: int, workers: int) -> float:
        """Turns/s of ``count`` ordinary turns, each in a new conversation."""
        order = iter(range(count))

        async def worker() -> None:
            for i in order:
                handle = await self.client.submit(NEW_QUESTION, conversation_id=f"c-new-{tag}-{i}")
                result = await handle.wait(TURN_TIMEOUT_S)
                if result.status != "completed":
                    raise WaitingCheckFailed(f"new turn {i} ended {result.status}: {result.error}")
                self.new_done += 1

        t0 = time.perf_counter()
        async with asyncio.TaskGroup() as tg:
            for _ in range(workers):
                tg.create_task(worker())
        return count / (time.perf_counter() - t0)

    async def answer_all(self) -> tuple[float, int]:
        """DONE every waiting turn; the seconds until all completed, and how many did."""
        t0 = time.perf_counter()
        jobs = [
            (lambda tid=tid: self.client.send_done(AGENT, "rollout ok", turn_id=tid, timeout=60))
            for _, tid in self.waiting
        ]
        replies = await gather_bounded(jobs, DONE_CONCURRENCY)
        refused = [r for r in replies if not isinstance(r, Ack) or r.detail != "applied"]
        if refused:
            raise WaitingCheckFailed(f"{len(refused)} DONEs not applied, e.g. {refused[0]}")
        store, queue = self.node.store, self.node.queue
        await poll(lambda: not queue.parked and queue.active == 0, TURN_TIMEOUT_S, "answered turns")
        seconds = time.perf_counter() - t0
        completed = 0
        for cid, tid in self.waiting:
            record = store.turn_record(cid, tid) or {}
            signals = [b for b in store.iter_blocks(cid) if b["type"] == SIGNAL_DONE]
            if record.get("status") != "completed" or len(signals) != 1:
                raise WaitingCheckFailed(f"turn {tid} ended {record.get('status')}, {signals}")
            completed += 1
        return seconds, completed


async def measure(
    sizes: Sequence[int],
    new_turns: int,
    workers: int,
    slots: int,
    console: Console,
    evict_s: float = EVICT_S,
    cluster: bool = False,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="actline-bench-waiting-") as tmp:
        async with EmbeddedNats(insecure=True) as server:
            node_bus = await Bus.connect(server.url, name="bench-waiting-node")
            client_bus = await Bus.connect(server.url, name="bench-waiting-client")
            settings = node_settings(
                Path(tmp),
                "n-waiting",
                True,
                max_active_turns=slots,
                wait_timeout_s=3600.0,
                idle_evict_s=evict_s,  # the new turns' conversations leave memory between rows
                cluster=cluster,  # leases and the durable copy in JetStream
            )
            node = Node(node_bus, settings, model=BenchModel(), knowledge=KnowledgeSpace(KB))
            await node.start()
            client = Client(client_bus)
            bench = Bench(node, client_bus, client)
            rows: list[dict[str, Any]] = []
            try:
                await bench.new_turns("warm", max(workers, 4), workers)
                for size in sizes:
                    parked = size - len(bench.waiting)
                    if parked < 0:
                        raise WaitingCheckFailed(f"sizes must grow: {list(sizes)}")
                    park_s = await bench.park(parked) if parked else 0.0
                    await bench.evicted()
                    gc.collect()
                    rss, source = rss_bytes()
                    reparked = node.queue.parked.reparked
                    rate = await bench.best_rate(str(size), new_turns, workers)
                    gc.collect()
                    after, _ = rss_bytes()
                    row = {
                        "waiting": size,
                        "park_s": park_s,
                        "parked_per_s": parked / park_s if park_s else None,
                        "rss_bytes": rss,
                        "rss_source": source,
                        "rss_after_batch_bytes": after,
                        "new_turns_per_s": rate,
                        "reparked_during_batch": node.queue.parked.reparked - reparked,
                        "active_after_batch": node.queue.active,
                    }
                    rows.append(row)
                    console.print(
                        f"{size:,} waiting: {rss / 2**20:.0f} MiB, {rate:.1f} new turns/s"
                        + (f", parked in {park_s:.1f} s" if parked else "")
                    )
                done_s, completed = await bench.answer_all()
                await bench.evicted()
                idle_after = await bench.best_rate("after", new_turns, workers)
                new_done = bench.new_done
            finally:
                await client.close()
                await node.stop()
                await client_bus.close()
                await node_bus.close()
    base = rows[0]
    idle = max(base["new_turns_per_s"], idle_after)
    for before, row in zip([None, *rows], rows, strict=False):
        row["new_turns_ratio"] = row["new_turns_per_s"] / idle
        # growth over the baseline after its batch (the heap keeps what a batch allocated)
        grown = row["rss_bytes"] - base["rss_after_batch_bytes"]
        row["rss_per_waiting_bytes"] = grown / row["waiting"] if row["waiting"] else None
        row["rss_marginal_per_waiting_bytes"] = (
            (row["rss_bytes"] - before["rss_after_batch_bytes"])
            / (row["waiting"] - before["waiting"])
            if before is not None and row["waiting"] > before["waiting"]
            else None
        )
    return {
        "rows": rows,
        "waiting_completed": completed,
        "waiting_total": len(bench.waiting),
        "answer_all_s": done_s,
        "idle_turns_per_s_before": base["new_turns_per_s"],
        "idle_turns_per_s_after": idle_after,
        "idle_turns_per_s": idle,
        "new_turns_completed": new_done,
        "max_active_turns": slots,
        "cluster": cluster,
    }


def table(result: dict[str, Any]) -> Table:
    title = (
        f"turns waiting on an agent, one node ({result['max_active_turns']} slots; idle: "
        f"{result['idle_turns_per_s_before']:.1f} new turns/s before, "
        f"{result['idle_turns_per_s_after']:.1f} after)"
    )
    columns = ("waiting", "parked in", "RSS", "per waiting", "marginal", "new turns/s", "vs 0")
    out = new_table(title, columns)
    for row in result["rows"]:
        per, marginal = row["rss_per_waiting_bytes"], row["rss_marginal_per_waiting_bytes"]
        out.add_row(
            f"{row['waiting']:,}",
            f"{row['park_s']:.1f} s" if row["park_s"] else "-",
            f"{row['rss_bytes'] / 2**20:.0f} MiB",
            f"{per / 1024:.1f} KiB" if per is not None else "-",
            f"{marginal / 1024:.1f} KiB" if marginal is not None else "-",
            f"{row['new_turns_per_s']:.1f}",
            f"{row['new_turns_ratio']:.2f}x",
        )
    return out


def main(argv: list[str] | None = None) -> int:
    cli = parser("waiting", __doc__, results=None, quick="a short run (tests)")
    add_sizes(cli, "waiting turns, growing from 0")
    add_counts(
        cli,
        new_turns=f"new turns per size ({NEW_TURNS})",
        workers=f"clients running the new turns ({WORKERS})",
        slots="max_active_turns (default 64)",
    )
    cli.add_argument(
        "--cluster", action="store_true", help="cluster mode: leases and the durable copy"
    )
    args = cli.parse_args(argv)
    defaults = {
        "sizes": list(SIZES),
        "new_turns": NEW_TURNS,
        "workers": WORKERS,
        "slots": 64,
        "evict_s": EVICT_S,
    }
    options = settle(args, defaults, QUICK)
    sizes, new_turns, workers = options["sizes"], options["new_turns"], options["workers"]
    if not sizes or sizes[0] != 0:
        cli.error("--sizes must start with 0 (the baseline)")
    console = Console()
    result = checked(
        console,
        lambda: asyncio.run(
            measure(
                sizes,
                new_turns,
                workers,
                options["slots"],
                console,
                options["evict_s"],
                args.cluster,
            )
        ),
        WaitingCheckFailed,
    )
    if result is None:
        return 1
    console.print(table(result))
    last = result["rows"][-1]
    target = last["rss_bytes"] < TARGET_RSS_BYTES and last["new_turns_ratio"] >= TARGET_RATIO
    result |= {
        "benchmark": "waiting",
        "machine": platform.platform(),
        "sizes": list(sizes),
        "new_turns": new_turns,
        "workers": workers,
        "target_rss_bytes": TARGET_RSS_BYTES,
        "target_ratio": TARGET_RATIO,
        "target_met": target,
    }
    out = result_path(args.out, "waiting-cluster.json" if args.cluster else "waiting.json")
    return finish(console, out, result, target or args.quick)


if __name__ == "__main__":
    raise SystemExit(main())
