"""actline's round against LangGraph's on the same scripted work, as conversations grow.

Both sides run a turn of ``--rounds`` rounds in a conversation of ``N`` earlier blocks
(``--sizes``), with the same instant model and the same tool. Every round but the last,
the model calls the knowledge search (``top_k`` 1 over ``examples/kb``, a new query each
round, ``bench.loop.query``); the last round answers. Persistence is on and synced on
both sides: a round is stored before the next one acts on it.

- **actline**: ``bench.loop``'s part 1 as it is (``open_case``, ``warm_up``,
  ``measure_turn``): a node and a client on an embedded nats-server, ``storage_sync=True``,
  the conversations prefilled with ``bench.loop.prefill``. A round is the time between the
  node's ``thinking`` cards of consecutive rounds. The node does more than LangGraph here:
  it streams every card and delta to the client over NATS and writes the turn's trace.
- **LangGraph**: a ``StateGraph`` over ``MessagesState`` with an agent node and the
  prebuilt ``ToolNode`` (``tools_condition`` between them), checkpointed by
  ``SqliteSaver`` on a file (WAL, SQLite's default ``synchronous=FULL``) with
  ``durability="sync"``. The same prefilled blocks become its thread's messages (a prompt
  a ``HumanMessage``, a tool call an ``AIMessage`` with its ``tool_calls``, a tool result a
  ``ToolMessage``, notes and answers ``AIMessage``\\ s), stored as the thread's first
  checkpoint. The agent node builds the model's request from the whole history, as a chat
  model does (``convert_to_openai_messages``), then decides like ``InstantModel``. A round
  is the time between the agent node's calls.

Both sides warm up with a two-round turn in each conversation, then run ``--turns``
measured turns per size, one conversation each, the two sides interleaved.
``round p50`` per size and side, and LangGraph's over actline's (above 1: actline is
faster). LangGraph comes with the ``compare`` extra (``pip install 'actline[compare]'``),
not with the test install.

    python -m bench langgraph_side [--quick] [--sizes 100,1000,5000] [--rounds 10]
        [--turns 6] [--out bench/results/langgraph_side.json]
"""

from __future__ import annotations

import asyncio
import itertools
import json
import platform
import sqlite3
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from actline.bus import EmbeddedNats
from actline.timeline import Block
from actline.timeline.blocks import COMPLETION, REACT_NOTES, TOOL_CALL, TOOL_RESULT, USER_PROMPT
from actline.tools import KnowledgeSpace
from bench.harness import (
    SanityCheckFailed,
    add_counts,
    add_sizes,
    compare_module,
    finish,
    new_table,
    parser,
    settle,
    summary_ms,
)
from bench.loop.model import AGE_S, KB, QUESTION, prefill, query
from bench.loop.rounds import Case, open_case, warm_up
from bench.loop.rounds import measure_turn as actline_turn

SIZES = (100, 1_000, 5_000)
ROUNDS = 10
TURNS = 6
QUICK: dict[str, Any] = {"sizes": [100, 1_000], "rounds": 3, "turns": 2}
LIBRARIES = ("langgraph", "langgraph-checkpoint-sqlite", "langchain-core")


def _compare_module(name: str) -> Any:
    """A comparison-only library, or an exit that says how to install it."""
    return compare_module("bench.loop.langgraph_side", name)


# -- the prefilled blocks as LangGraph messages ---------------------------------------------------
def as_messages(blocks: Sequence[Block]) -> list[Any]:
    """``bench.loop.prefill``'s blocks as LangChain messages, in their order."""
    lc = _compare_module("langchain_core.messages")
    out: list[Any] = []
    for b in blocks:
        if b.type == USER_PROMPT:
            out.append(lc.HumanMessage(b.text or ""))
        elif b.type == TOOL_CALL:
            data = dict(b.data or {})
            call = {"name": "search_knowledge", "args": data.get("params", {}), "id": b.call_id}
            out.append(lc.AIMessage("", tool_calls=[call]))
        elif b.type == TOOL_RESULT:
            content = json.dumps(b.data, ensure_ascii=False)
            out.append(lc.ToolMessage(content, tool_call_id=b.call_id or ""))
        elif b.type in (REACT_NOTES, COMPLETION):
            out.append(lc.AIMessage(b.text or ""))
    return out


# -- the LangGraph side ----------------------------------------------------------------------------
@dataclass
class Graph:
    """A compiled graph on its SQLite checkpointer, and the agent node's call times."""

    app: Any
    conn: sqlite3.Connection
    plans: dict[str, int] = field(default_factory=dict)
    """Thread id -> the rounds of the turn it runs now."""
    calls: dict[str, list[float]] = field(default_factory=dict)
    """Thread id -> ``perf_counter`` at each agent node call of the turn it runs now."""
    current: str = ""
    """The thread whose turn runs (one at a time: ``invoke`` returns when it ends)."""

    def close(self) -> None:
        self.conn.close()


def build_graph(path: Path, knowledge: KnowledgeSpace, *, request: bool = True) -> Graph:
    """The agent and ``ToolNode`` graph, checkpointed to ``path`` (see the docstring);
    ``request=False``: the agent node does not build the model's request."""
    lc = _compare_module("langchain_core.messages")
    tools_mod = _compare_module("langchain_core.tools")
    graph_mod = _compare_module("langgraph.graph")
    prebuilt = _compare_module("langgraph.prebuilt")
    saver_mod = _compare_module("langgraph.checkpoint.sqlite")
    utils = _compare_module("langchain_core.messages.utils")

    def search_knowledge(query: str, top_k: int = 1) -> str:
        """Search the knowledge space."""
        hits = knowledge.search(query, top_k)
        return json.dumps([{"path": h.path, "snippet": h.snippet} for h in hits])

    conn = sqlite3.connect(str(path), check_same_thread=False)
    saver = saver_mod.SqliteSaver(conn)
    saver.setup()
    holder: dict[str, Graph] = {}

    def agent(state: dict[str, Any]) -> dict[str, Any]:
        g = holder["graph"]
        thread = g.current
        times = g.calls.setdefault(thread, [])
        times.append(time.perf_counter())
        if request:
            utils.convert_to_openai_messages(state["messages"])  # the model's request
        round_ = len(times)
        if round_ < g.plans[thread]:
            args = {"query": query(round_), "top_k": 1}
            call = {"name": "search_knowledge", "args": args, "id": f"r{round_}-{thread}"}
            reply = lc.AIMessage("Checking the docs.", tool_calls=[call])
        else:
            reply = lc.AIMessage("The Team plan; upgrade from the billing page.")
        return {"messages": [reply]}

    builder = graph_mod.StateGraph(graph_mod.MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", prebuilt.ToolNode([tools_mod.tool(search_knowledge)]))
    builder.add_edge(graph_mod.START, "agent")
    builder.add_conditional_edges("agent", prebuilt.tools_condition)
    builder.add_edge("tools", "agent")
    app = builder.compile(checkpointer=saver)
    graph = holder["graph"] = Graph(app, conn)
    return graph


def _config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def lg_prefill(graph: Graph, thread: str, messages: Sequence[Any]) -> None:
    """Store ``messages`` as the thread's first checkpoint."""
    graph.app.update_state(_config(thread), {"messages": list(messages)}, as_node="agent")


def lg_turn(graph: Graph, thread: str, rounds: int) -> list[float]:
    """One turn of ``rounds`` rounds in ``thread``: the seconds between its agent calls."""
    graph.plans[thread] = rounds
    graph.calls[thread] = []
    graph.current = thread
    human = _compare_module("langchain_core.messages").HumanMessage(QUESTION)
    out = graph.app.invoke({"messages": [human]}, _config(thread), durability="sync")
    times, messages = graph.calls[thread], out["messages"]
    if len(times) != rounds:
        what = f"LangGraph thread {thread} ran {len(times)} of {rounds} rounds"
        raise SanityCheckFailed(len(messages), what)
    last = messages[-1]
    if getattr(last, "tool_calls", None) or "Team plan" not in str(last.content):
        what = f"LangGraph thread {thread} did not answer: {last!r}"
        raise SanityCheckFailed(len(messages), what)
    return [b - a for a, b in itertools.pairwise(times)]


# -- both sides ------------------------------------------------------------------------------------
VARIANTS = ("langgraph", "langgraph_bare")
"""LangGraph's agent node with the model's request built from the history, and without."""


@dataclass
class Size:
    """One conversation size: actline's case, LangGraph's two graphs and their round samples."""

    blocks: int
    case: Case
    graphs: dict[str, Graph]
    messages: int
    """How many messages each thread is prefilled with."""
    lg_rounds: dict[str, list[float]] = field(default_factory=dict)

    def langgraph_turn(self, variant: str, i: int, rounds: int) -> None:
        thread = f"lg-{self.blocks}-{i}"
        samples = lg_turn(self.graphs[variant], thread, rounds)
        self.lg_rounds.setdefault(variant, []).extend(samples)


async def _prepare(
    url: str, root: Path, blocks: int, knowledge: KnowledgeSpace, rounds: int, turns: int
) -> Size:
    """Both sides prefilled and warmed up at ``blocks``."""
    case = await open_case(url, root, blocks, True, knowledge, rounds=rounds, conversations=turns)
    graphs = {
        variant: build_graph(
            root / f"{variant}-{blocks}.db", knowledge, request=variant == "langgraph"
        )
        for variant in VARIANTS
    }
    messages = as_messages(list(prefill(blocks, "lg", end=time.time() - AGE_S)))
    size = Size(blocks, case, graphs, len(messages))
    await warm_up(case)
    for graph in graphs.values():
        for k in range(1, turns + 1):
            lg_prefill(graph, f"lg-{blocks}-{k}", messages)
            lg_turn(graph, f"lg-{blocks}-{k}", 2)
    return size


async def _turns(size: Size, i: int, rounds: int) -> None:
    """Turn ``i`` at one size on every side, in an order that alternates with ``i``."""
    sides: list[str] = ["actline", *VARIANTS]
    for side in sides if i % 2 else sides[::-1]:
        if side == "actline":
            await actline_turn(size.case, f"c-loop-{i}", rounds)
        else:
            size.langgraph_turn(side, i, rounds)


async def run_async(sizes: Sequence[int], rounds: int, turns: int) -> dict[str, Any]:
    """Every size on both sides, the measured turns interleaved (see the docstring)."""
    started = time.perf_counter()
    rounds = max(2, rounds)
    knowledge = KnowledgeSpace(KB, embedder=None)
    with tempfile.TemporaryDirectory(prefix="actline-bench-langgraph-") as tmp:
        root = Path(tmp)
        async with EmbeddedNats() as server:
            prepared: list[Size] = []
            try:
                with Progress(transient=True) as progress:
                    task = progress.add_task("prefilling and warming up", total=len(sizes))
                    for blocks in sorted(set(sizes)):
                        prepared.append(
                            await _prepare(server.url, root, blocks, knowledge, rounds, turns)
                        )
                        progress.advance(task)
                    task = progress.add_task("turns, interleaved", total=turns)
                    for i in range(1, turns + 1):
                        for size in prepared:
                            await _turns(size, i, rounds)
                        progress.advance(task)
                rows = [_row(size) for size in prepared]
            finally:
                for size in prepared:
                    await size.case.close()
                    for graph in size.graphs.values():
                        graph.close()
    return {
        "benchmark": "langgraph_side.round",
        "rounds": rounds,
        "turns": turns,
        "tool": "knowledge search, top_k 1",
        "actline": {"storage_sync": True, "client": "in process, over NATS"},
        "langgraph": {
            "checkpointer": "SqliteSaver (WAL, synchronous FULL)",
            "durability": "sync",
            "langgraph_bare": "the agent node builds no model request",
            "versions": {name: version(name) for name in LIBRARIES},
        },
        "sizes": rows,
        "seconds": time.perf_counter() - started,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def _row(size: Size) -> dict[str, Any]:
    actline = summary_ms(size.case.rounds)
    row: dict[str, Any] = {
        "blocks": size.blocks,
        "langgraph_messages": size.messages,
        "actline_round": actline,
    }
    for variant in VARIANTS:
        figures = summary_ms(size.lg_rounds[variant])
        row[f"{variant}_round"] = figures
        row[f"{variant}_over_actline_p50"] = figures["p50_ms"] / actline["p50_ms"]
    return row


def run(**kwargs: Any) -> dict[str, Any]:
    """``run_async`` in a fresh event loop."""
    return asyncio.run(run_async(**kwargs))


def table(result: dict[str, Any]) -> Table:
    out = new_table(
        f"one round, {result['rounds']}-round turns: actline against LangGraph",
        ("blocks", "messages", "actline", "LangGraph", "ratio", "bare", "ratio"),
        caption="round p50 (p90); ratio: LangGraph's p50 over actline's (above 1: actline "
        "faster); bare: LangGraph's agent node builds no model request",
    )

    def cell(figures: dict[str, Any]) -> str:
        return f"{figures['p50_ms']:.2f} ms ({figures['p90_ms']:.2f})"

    for row in result["sizes"]:
        out.add_row(
            f"{row['blocks']:,}",
            f"{row['langgraph_messages']:,}",
            cell(row["actline_round"]),
            cell(row["langgraph_round"]),
            f"{row['langgraph_over_actline_p50']:.2f}x",
            cell(row["langgraph_bare_round"]),
            f"{row['langgraph_bare_over_actline_p50']:.2f}x",
        )
    return out


def main(argv: list[str] | None = None, *, console: Callable[[], Console] = Console) -> int:
    cli = parser("langgraph_side", __doc__, quick="small sizes, few rounds")
    add_sizes(cli, "earlier blocks of the conversations (100,1000,5000)")
    add_counts(cli, rounds=f"rounds per turn ({ROUNDS})", turns=f"measured turns ({TURNS})")
    args = cli.parse_args(argv)
    for name in ("langgraph", "langgraph.checkpoint.sqlite", "langchain_core"):
        _compare_module(name)
    defaults = {"sizes": list(SIZES), "rounds": ROUNDS, "turns": TURNS}
    result = run(**settle(args, defaults, QUICK))
    out = console()
    out.print(table(result))
    return finish(out, args.out, result)


if __name__ == "__main__":
    raise SystemExit(main())
