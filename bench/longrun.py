"""Long runs: 200 rounds in one conversation with large tool results, per runtime profile,
with the context watchdog and without it.

One conversation of ``--turns`` turns (20) of ``--rounds-per-turn`` rounds (10: nine tool
rounds, then an answer) runs on an in-process node over an embedded nats-server, against the
local Messages API server (``actline.llm.fake_anthropic``) through the real ``anthropic`` client, so
that usage, cache reads and writes are accounted (``actline.llm.cache_sim``). Only the
model's choices are scripted: each tool round fetches a new page from ``bench.fetch``
(``--result-tokens`` words of text, 2,500 by default), and every fourth round reads the
previous round's result again (as an agent does when it needs a detail back). A planted fact
(``PLANTED|code=F07|value=amber-4412``) sits in the middle of one page per turn.

Summary requests (the compaction's tool-free model call) are answered extractively: the
planted facts found in the request, as the structured summary's JSON.

Reported per profile and watchdog setting: the peak rendered context (the largest prompt in
tokens), compactions (and how many the watchdog asked for), all input tokens, the cache-read
share of them, the cost (in base-price input tokens: uncached + 1.25 x
cache writes + 0.1 x cache reads, summary calls included) and that cost against the same
run's tokens without caching, and the planted facts still recalled at the end:
the share of planted values present in the last prompt the model saw (in the context, a
summary or the memory hotset), which is what a model could answer from without a tool call.

    python -m bench.longrun [--turns 20] [--rounds-per-turn 10] [--profiles fast,balanced]
"""

from __future__ import annotations

import asyncio
import json
import platform
import random
import re
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from actline.actors import NodeSettings, ToolRegistry
from actline.actors.client.client import Client
from actline.actors.configuration.profiles import BUILTIN
from actline.actors.node.node import Node
from actline.bus import Bus, EmbeddedNats
from actline.llm.anthropic import AnthropicModel
from actline.llm.config import LLMSettings
from actline.llm.fake_anthropic import FakeAnthropicServer
from actline.llm.protocol import Chunk
from actline.messages import GenerateRequest
from actline.tools import KnowledgeSpace
from bench.harness import SanityCheckFailed, add_counts, corpus, finish, new_table, parser, settle

MODEL = "claude-sonnet-4-6"
KB = Path(__file__).parents[1] / "examples" / "kb"
FACT_RE = re.compile(r"PLANTED\|code=(F\d+)\|value=([a-z]+-\d+)")
REREAD_EVERY = 4
TURN_RE = re.compile(r"(?:ar|tc):(t-[0-9A-Z]+)\.")
ITERATION_RE = re.compile(r"iteration (\d+)/")


def fact(i: int) -> tuple[str, str]:
    rng = random.Random(i)
    word = rng.choice(["amber", "cobalt", "heron", "lichen", "quartz", "saffron", "tundra"])
    return f"F{i:02d}", f"{word}-{rng.randrange(1000, 9999)}"


def page_text(page: int, words: int, fact_page: dict[int, int]) -> str:
    """A large tool result: word salad, with a planted fact in the middle on some pages."""
    text = corpus(7)
    start = (page * 7919) % max(1, len(text) - words * 8)
    body = text[start : start + words * 6].split()[:words]
    lines = [f"page {page} of the bench corpus"]
    for at in range(0, len(body), 20):
        lines.append(" ".join(body[at : at + 20]))
    if page in fact_page:
        code, value = fact(fact_page[page])
        lines.insert(len(lines) // 2, f"PLANTED|code={code}|value={value}")
    return "\n".join(lines)


class ScriptedAgent:
    """The model's choices, scripted per turn; summary requests answered extractively."""

    name = "longrun"

    def __init__(self, rounds_per_turn: int) -> None:
        self.rounds_per_turn = rounds_per_turn
        self.rounds: dict[str, int] = defaultdict(int)
        self.page = 0
        self.summaries = 0
        self.last_prompt = ""

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        text = prompt_text(request)
        if "<channel:decision>" not in request.system:  # the compaction's tool-free call
            self.summaries += 1
            facts = dict(FACT_RE.findall(text))
            yield json.dumps(
                {
                    "stable_facts": [
                        {"key": f"planted.{code.lower()}.value", "value": v, "confidence": 0.9}
                        for code, v in sorted(facts.items())
                    ],
                    "active_goals": ["read the bench pages"],
                    "open_questions": [],
                    "discarded_obsolete": [],
                }
            )
            return
        self.last_prompt = text
        turn = TURN_RE.findall(text)[-1]  # the newest path's turn: the id does not cross HTTP
        r = int(ITERATION_RE.findall(text)[-1])  # ANNOUNCE's iteration: the turn's round
        self.rounds[turn] = r
        if r >= self.rounds_per_turn:
            done = {"action": "complete", "notes": f"turn {turn} done"}
            yield "<channel:thinking>Done reading.</channel:thinking>"
            yield f"<channel:decision>{json.dumps(done)}</channel:decision>"
            yield f"<channel:answer>Read {r - 1} rounds of pages.</channel:answer>"
            yield "<channel:followup>[]</channel:followup>"
            return
        call: dict[str, Any]
        if r % REREAD_EVERY == 0:
            call = {"tool": "react.read", "params": {"paths": [f"tc:{turn}.c{r - 1}-1.result"]}}
        else:
            self.page += 1
            call = {"tool": "bench.fetch", "params": {"page": self.page}}
        body = {"action": "call_tools", "calls": [call]}
        yield f"<channel:thinking>Round {r}.</channel:thinking>"
        yield f"<channel:decision>{json.dumps(body)}</channel:decision>"


def prompt_text(request: GenerateRequest) -> str:
    parts = [request.system]
    for block in request.blocks:
        parts.append(str(block.get("text", "")) if isinstance(block, dict) else str(block))
    return "\n".join(parts)


async def run_one(
    profile: str,
    watchdog: bool,
    *,
    turns: int,
    rounds_per_turn: int,
    result_tokens: int,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """One long conversation on a fresh node, store and Messages API server."""
    fetched = len([r for r in range(1, rounds_per_turn) if r % REREAD_EVERY])  # pages a turn
    fact_page = {t * fetched + (fetched + 1) // 2: t + 1 for t in range(turns)}
    agent = ScriptedAgent(rounds_per_turn)
    registry = ToolRegistry()

    @registry.tool("bench.fetch", description="fetch one page of the bench corpus")
    async def fetch(params: dict[str, Any], ctx: Any) -> str:
        return page_text(int(params["page"]), result_tokens, fact_page)

    task = None if progress is None else progress.add_task(f"{profile} wd={watchdog}", total=turns)
    with tempfile.TemporaryDirectory(prefix="actline-bench-longrun-") as tmp:
        nats_server = EmbeddedNats(store_dir=Path(tmp) / "nats")
        async with FakeAnthropicServer(agent) as server, nats_server as nats:
            llm = LLMSettings(model=MODEL, api_key="bench", base_url=server.base_url, max_retries=0)
            model = AnthropicModel(llm)
            bus = await Bus.connect(nats.url, name="bench-longrun")
            settings = NodeSettings(
                home=Path(tmp) / "home",
                node_id="bench",
                model=MODEL,
                storage_sync=False,
                followup_grace_s=0.0,
                builtin_tools=False,
                embeddings=False,
            )
            node = Node(
                bus, settings, model=model, registry=registry,
                knowledge=KnowledgeSpace(KB),
            )  # fmt: skip
            await node.start()
            client = Client(bus)
            table = {"extends": profile, "watchdog": watchdog}
            config = {"profile": table, "max_iterations": rounds_per_turn + 2}
            contexts = []
            started = time.perf_counter()
            try:
                for t in range(turns):
                    handle = await client.submit(
                        f"Read the next pages of the corpus (part {t + 1}).",
                        conversation_id="longrun",
                        config=config,
                    )
                    result = await handle.wait(300)
                    if result.status != "completed":
                        raise SanityCheckFailed(t, f"{profile}: turn {t + 1} {result.status}")
                    contexts.append(result.usage.context)
                    if progress is not None and task is not None:
                        progress.advance(task)
            finally:
                await client.close()
                await node.stop()
                await bus.close()
                await model.aclose()
            seconds = time.perf_counter() - started
            records = [r for r in server.requests if r.usage is not None]
    usage = server.usage_totals
    total = usage.total_input_tokens
    planted = [fact(t + 1)[1] for t in range(turns)]
    recalled = [v for v in planted if v in agent.last_prompt]
    written = usage.cache_write_5m_tokens + usage.cache_write_1h_tokens
    weighted = usage.input_tokens + 1.25 * written + 0.1 * usage.cache_read_tokens
    peaks = [r.usage.total_input_tokens for r in records if r.usage is not None]
    return {
        "profile": profile,
        "watchdog": watchdog,
        "turns": turns,
        "rounds": sum(agent.rounds.values()),
        "model_calls": len(records),
        "summary_calls": agent.summaries,
        "peak_context_tokens": max(peaks, default=0),
        "compactions": sum(c.compactions for c in contexts if c is not None),
        "watchdog_compactions": sum(c.watchdog_compactions for c in contexts if c is not None),
        "signals": _sum_signals(contexts),
        "input_tokens_total": total,
        "cache_read_pct": 100 * usage.cache_read_tokens / total if total else 0.0,
        "cost_vs_no_cache": weighted / total if total else 1.0,
        "cost_base_tokens": weighted,
        "facts_planted": len(planted),
        "facts_recalled": len(recalled),
        "recall_pct": 100 * len(recalled) / len(planted) if planted else 0.0,
        "seconds": seconds,
    }


def _sum_signals(contexts: list[Any]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for c in contexts:
        for name, n in (c.signals if c is not None else {}).items():
            out[name] += n
    return dict(out)


def run(
    turns: int, rounds_per_turn: int, result_tokens: int, profiles: list[str], console: Console
) -> dict[str, Any]:
    rows = []
    with Progress(console=console, transient=True) as progress:
        for profile in profiles:
            for watchdog in (True, False):
                row = asyncio.run(
                    run_one(
                        profile,
                        watchdog,
                        turns=turns,
                        rounds_per_turn=rounds_per_turn,
                        result_tokens=result_tokens,
                        progress=progress,
                    )
                )
                rows.append(row)
    return {
        "benchmark": "longrun",
        "machine": platform.platform(),
        "turns": turns,
        "rounds_per_turn": rounds_per_turn,
        "result_tokens": result_tokens,
        "runs": rows,
    }


def table(result: dict[str, Any]) -> Table:
    out = new_table(
        f"{result['turns'] * result['rounds_per_turn']} rounds in one conversation, "
        f"tool results of {result['result_tokens']:,} words",
        (
            "profile",
            "watchdog",
            "peak context",
            "compactions (watchdog)",
            "input tokens",
            "cache read",
            "cost",
            "cost vs none",
            "facts recalled",
            "s",
        ),
        left=("profile",),
    )
    for r in result["runs"]:
        out.add_row(
            r["profile"],
            "on" if r["watchdog"] else "off",
            f"{r['peak_context_tokens']:,}",
            f"{r['compactions']} ({r['watchdog_compactions']})",
            f"{r['input_tokens_total'] / 1e6:.2f} M",
            f"{r['cache_read_pct']:.1f} %",
            f"{r['cost_base_tokens'] / 1e6:.2f} M",
            f"{r['cost_vs_no_cache']:.3f}x",
            f"{r['facts_recalled']}/{r['facts_planted']}",
            f"{r['seconds']:.0f}",
        )
    return out


def main(argv: list[str] | None = None) -> int:
    cli = parser("longrun", __doc__)
    add_counts(
        cli,
        turns="turns in the conversation (20)",
        rounds_per_turn="rounds per turn (10)",
        result_tokens="words per fetched page (2500)",
    )
    cli.add_argument("--profiles", default=",".join(BUILTIN))
    args = cli.parse_args(argv)
    options = settle(args, {"turns": 20, "rounds_per_turn": 10, "result_tokens": 2500})
    profiles = [p.strip() for p in args.profiles.split(",") if p.strip()]
    unknown = [p for p in profiles if p not in BUILTIN]
    if unknown:
        cli.error(f"unknown profile(s) {', '.join(unknown)}: choose from {', '.join(BUILTIN)}")
    console = Console()
    result = run(
        options["turns"], options["rounds_per_turn"], options["result_tokens"], profiles, console
    )
    console.print(table(result))
    return finish(console, args.out, result)


if __name__ == "__main__":
    raise SystemExit(main())
