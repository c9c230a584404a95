"""Turns per second and the node's CPU per turn, with the clients in a process of their own.

Part 3 of ``bench.loop`` (its throughput) runs the node and its clients on one event loop in one
process, so its CPU per turn also counts the clients' work (submitting, decoding every
card, delta and result), and that work delays the node's. In production the clients are
other processes (a Ray job's driver, ``actline ask``). Here the node runs in this process
and ``--conversations`` clients in a child process (``spawn``), on one embedded
nats-server: each client runs turns of 2 or 3 rounds in its own conversation, one after
another, until ``--total-turns`` turns are done, after a warm-up of a fifth as many. The
node's model is ``bench.loop.InstantModel`` (a turn's rounds are read from its id, since
the clients cannot reach the node's model), with ``storage_sync`` on.

Reported per run: turns/s over the measured window (the child's clock marks its start
and end; ``perf_counter`` is the system's monotonic clock, shared by both processes), the
node process's CPU time per turn over that window, and the client process's.

``--against DIR`` runs the same measurement on another checkout (say the pre-redesign
commit, extracted with ``git archive <commit> | tar -x -C DIR``): every run is a fresh
interpreter with one tree first on its path, this tree's runs and the other's
interleaved, so that both see the same machine. This file only uses what both trees
have (``actors.Node``, ``actors.Client``, ``bus.Bus``, ``bus.EmbeddedNats``,
``bench.loop``'s model and node settings), and it is copied whole into the run (see
``run_tree``): it imports nothing of ``bench`` at the top, and a child run parses its few
options itself (the other tree has no ``bench.harness``).

    python -m bench loop_split [--conversations 50] [--total-turns 1500] [--runs 3]
        [--against DIR] [--out bench/results/loop_split.json]
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import itertools
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
TREE = HERE.parents[2]
PREFIX = "bench-split"
TIMEOUT_S = 60.0
PROBE = "actline_split_probe"


def _rounds(turn_id: str) -> int:
    """The rounds a turn id asks for (``...-r3``)."""
    return int(turn_id.rsplit("-r", 1)[1])


def _client_main(url: str, conversations: int, total: int, conn: Connection) -> None:
    """The child: warm up, then the measured turns; sends ("start"|"end", perf_counter,
    process_time) and finally ("done", turns)."""

    async def go() -> None:
        from actline.actors import Client
        from actline.bus import Bus
        from actline.messages import Subjects

        bus = await Bus.connect(url, name="bench-split-client", subject_names=Subjects(PREFIX))
        client = Client(bus)

        async def one(cid: str, tid: str) -> None:
            handle = await client.submit("Which plan has SSO?", conversation_id=cid, turn_id=tid)
            result = await handle.wait(TIMEOUT_S)
            if result.status != "completed":
                raise RuntimeError(f"turn {tid} ended {result.status}: {result.error}")
            await handle.wait_for("complete", timeout=TIMEOUT_S)

        async def batch(phase: str, count: int) -> None:
            counter = itertools.count()

            async def worker(c: int) -> None:
                while (i := next(counter)) < count:
                    await one(f"c-{phase}-{c}", f"t-{phase}-{i}-r{2 + i % 2}")

            async with asyncio.TaskGroup() as tg:
                for c in range(conversations):
                    tg.create_task(worker(c))

        try:
            await one("c-warm", "t-warm-r2")
            await batch("w", max(conversations, total // 5))
            conn.send(("start", time.perf_counter(), time.process_time()))
            await batch("m", total)
            conn.send(("end", time.perf_counter(), time.process_time()))
            conn.send(("done", total))
        finally:
            await client.close()
            await bus.close()

    try:
        asyncio.run(go())
    except BaseException as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        raise


async def measure(url: str, root: Path, conversations: int, total: int) -> dict[str, Any]:
    """One run: the node here, the clients in a child process (see the docstring)."""
    from actline.actors import Node
    from actline.bus import Bus
    from actline.messages import Subjects
    from actline.tools import KnowledgeSpace
    from bench.loop import KB, InstantModel, Plan, node_settings

    class ByTurnId(InstantModel):
        def output(self, request: Any) -> str:
            self.plans.setdefault(request.turn_id, Plan(_rounds(request.turn_id)))
            return str(super().output(request))

    bus = await Bus.connect(url, name="bench-split-node", subject_names=Subjects(PREFIX))
    settings = node_settings(root, "n-split", True)
    try:  # BM25 alone, as in bench.loop (a tree with hybrid knowledge search)
        knowledge = KnowledgeSpace(KB, embedder=None)
    except TypeError:  # an older tree: its knowledge search is BM25 alone anyway
        knowledge = KnowledgeSpace(KB)
    node = Node(bus, settings, model=ByTurnId(), knowledge=knowledge)
    await node.start()
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe()
    child = ctx.Process(target=_client_main, args=(url, conversations, total, theirs))
    child.start()
    marks: dict[str, tuple[float, float, float]] = {}
    try:
        quiet = 0.0
        while "done" not in marks:
            if not await asyncio.to_thread(ours.poll, 1.0):
                quiet += 1.0
                if not child.is_alive() or quiet > 5 * TIMEOUT_S:
                    raise RuntimeError(f"the client process ended or hung (exit {child.exitcode})")
                continue
            quiet = 0.0
            kind, *values = ours.recv()
            if kind == "error":
                raise RuntimeError(f"the client process failed: {values[0]}")
            marks[kind] = (*values, time.process_time()) if kind != "done" else (0.0, 0.0, 0.0)
    finally:
        await asyncio.to_thread(child.join, TIMEOUT_S)
        await node.stop()
        await bus.close()
    (t0, c0, n0), (t1, c1, n1) = marks["start"], marks["end"]
    seconds = t1 - t0
    return {
        "conversations": conversations,
        "turns": total,
        "seconds": seconds,
        "turns_per_s": total / seconds,
        "node_cpu_ms_per_turn": (n1 - n0) / total * 1e3,
        "client_cpu_ms_per_turn": (c1 - c0) / total * 1e3,
    }


async def _one(conversations: int, total: int) -> dict[str, Any]:
    from actline.bus import EmbeddedNats

    # an older tree's EmbeddedNats has no ``insecure`` (its server had no authentication)
    known = inspect.signature(EmbeddedNats).parameters
    open_server: dict[str, Any] = {"insecure": True} if "insecure" in known else {}
    with tempfile.TemporaryDirectory(prefix="actline-bench-split-") as tmp:
        async with EmbeddedNats(**open_server) as server:
            return await measure(server.url, Path(tmp), conversations, total)


def run_tree(tree: Path, conversations: int, total: int) -> dict[str, Any]:
    """One run in a fresh interpreter with ``tree`` on the path. This file goes there as a
    module of a package of its own (``PROBE``), so that nothing in ``tree`` changes and the
    spawned client process finds it by name."""
    with tempfile.TemporaryDirectory(prefix="actline-bench-split-probe-") as probe:
        (Path(probe) / PROBE).mkdir()
        (Path(probe) / PROBE / "__init__.py").write_text("")
        (Path(probe) / PROBE / "split.py").write_text(HERE.read_text())
        (Path(probe) / PROBE / "__main__.py").write_text(
            "import sys\nfrom .split import main\nsys.exit(main())\n"
        )
        env = {**os.environ, "PYTHONPATH": os.pathsep.join((probe, str(tree)))}
        args = [sys.executable, "-m", PROBE, "--one", "--conversations", str(conversations)]
        done = subprocess.run(
            [*args, "--total-turns", str(total)],
            cwd=tree, env=env, capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"the run in {tree} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def med(key: str) -> float:
        return float(statistics.median(r[key] for r in runs))

    keys = ("turns_per_s", "node_cpu_ms_per_turn", "client_cpu_ms_per_turn")
    return {"runs": runs, **{k: med(k) for k in keys}}


def _child(argv: list[str]) -> int:
    """A child run (``--one``): one measurement, printed as one JSON line."""
    child = argparse.ArgumentParser(prog=PROBE)
    child.add_argument("--one", action="store_true")
    child.add_argument("--conversations", type=int, required=True)
    child.add_argument("--total-turns", type=int, required=True)
    args = child.parse_args(argv)
    print(json.dumps(asyncio.run(_one(args.conversations, args.total_turns))))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--one" in argv:
        return _child(argv)
    from rich.console import Console
    from rich.progress import Progress

    from bench.harness import add_counts, finish, new_table, parser, settle

    cli = parser("loop_split", __doc__)
    add_counts(
        cli,
        conversations="clients, each in its own conversation (50)",
        total_turns="measured turns per run (1500)",
        runs="runs per tree (3)",
    )
    cli.add_argument("--against", type=Path, default=None, help="another checkout")
    args = cli.parse_args(argv)
    options = settle(args, {"conversations": 50, "total_turns": 1500, "runs": 3})
    conversations, total = options["conversations"], options["total_turns"]
    trees = {"this tree": TREE}
    if args.against is not None:
        layouts = (("actors", "node", "node.py"), ("actors", "node.py"))  # today's, an older one
        if not any(args.against.joinpath(*parts).is_file() for parts in layouts):
            cli.error(
                f"--against {args.against}: not a checkout of actline (no actors/node/node.py)"
            )
        trees["against"] = args.against.resolve()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    with Progress(transient=True) as progress:
        task = progress.add_task("interleaved runs", total=options["runs"] * len(trees))
        for _ in range(options["runs"]):
            for name, tree in trees.items():
                runs[name].append(run_tree(tree, conversations, total))
                progress.advance(task)
    result: dict[str, Any] = {
        "benchmark": "loop.split_throughput",
        "conversations": conversations,
        "turns": total,
        "trees": {name: {"path": str(tree), **summary(runs[name])} for name, tree in trees.items()},
    }
    title = f"{conversations} conversations, {total} turns per run"
    table = new_table(
        title + ", the clients in a process of their own",
        ("tree", "turns/s (runs)", "node CPU/turn (runs)", "client CPU/turn"),
        left=("tree",),
    )
    for name, row in result["trees"].items():
        tps = ", ".join(f"{r['turns_per_s']:.0f}" for r in row["runs"])
        cpu = ", ".join(f"{r['node_cpu_ms_per_turn']:.2f}" for r in row["runs"])
        table.add_row(
            name,
            f"{row['turns_per_s']:.1f} ({tps})",
            f"{row['node_cpu_ms_per_turn']:.2f} ms ({cpu})",
            f"{row['client_cpu_ms_per_turn']:.2f} ms",
        )
    if "against" in result["trees"]:
        ours, theirs = result["trees"]["this tree"], result["trees"]["against"]
        result["ratios"] = {
            "turns_per_s": ours["turns_per_s"] / theirs["turns_per_s"],
            "node_cpu_ms_per_turn": ours["node_cpu_ms_per_turn"] / theirs["node_cpu_ms_per_turn"],
        }
        table.caption = (
            f"medians; this tree / against: turns/s {result['ratios']['turns_per_s']:.2f}x, "
            f"node CPU per turn {result['ratios']['node_cpu_ms_per_turn']:.2f}x"
        )
    console = Console()
    console.print(table)
    return finish(console, args.out, result)


if __name__ == "__main__":
    sys.exit(main())
