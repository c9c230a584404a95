"""Prompt caching: what a multi-turn agent conversation costs under four mark strategies.

One conversation of ``--turns`` turns (20 by default) of 6 rounds each is run
with the ExtractiveModel behind the local Messages API server
(``llm.fake_anthropic``), through the real ``anthropic`` client
(``AnthropicModel``), once per strategy, each against a fresh server (a cold
cache). The server accounts usage by CACHE_RULES.md (prefix hashes per block,
writes only at marks, a 20-position lookback, the model's minimum, a 5-minute
TTL on an injected clock that the loop advances by ``--round-seconds`` per
round and ``--gap-seconds`` between turns). The questions alternate between
handing the draft to an outside agent and recalling earlier turns, so every
turn has the same six rounds. Strategies:

- none: no cache_control at all.
- last block: one mark on the last block of the request (common practice:
  mark the end of the prompt). Here that block is ANNOUNCE, which changes
  every round.
- last stable block: one mark on the last block before SOURCES POOL and
  ANNOUNCE (the best single-mark placement).
- actline: the system prompt plus the renderer's CP1/CP2/CP3.

Every strategy must see the same conversation (the answers are compared); only
the accounting differs. Cost relative to no caching follows CACHE_RULES.md:
``(input + 1.25*write_5m + 2*write_1h + 0.1*read) / total input``.

Targets: actline reads at least 85% of input tokens from cache, costs at most
0.3x of no caching, and costs less than the single mark on the last block.

    python -m bench.cache [--turns 20] [--gap-seconds 45] [--out bench/results/cache.json]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from bench.common import RESULTS, SanityCheckFailed, write_result
from bench.driver import Driver
from llm.anthropic import AnthropicModel
from llm.config import LLMSettings
from llm.extractive import ExtractiveModel
from llm.fake_anthropic import FakeAnthropicServer
from llm.protocol import Chunk, Model
from messages import GenerateRequest, Usage
from tools import KnowledgeSpace

KB = Path(__file__).parents[1] / "examples" / "kb"
MODEL = "claude-sonnet-4-6"
T0 = 1_800_000_000.0
STRATEGIES = ("none", "last block", "last stable block", "actline")
TOPICS = (
    "the default retention",
    "the price of the Team tier",
    "how to rotate the signing key",
    "the delivery guarantees",
    "the SLA of the Enterprise tier",
    "how to back up and restore a relay",
    "the Kafka bridge",
    "webhook retries",
    "the system requirements",
    "what changed in 3.2.0",
)


def questions(turns: int) -> list[str]:
    """Turn texts: odd turns ask the reviewer to check, even turns recall an earlier one."""
    out = []
    for i in range(turns):
        topic = TOPICS[(i // 2) % len(TOPICS)]
        if i % 2 == 0:
            out.append(f"What does the documentation say about {topic}? Ask reviewer to check it.")
        else:
            out.append(f"Remind me what you told me earlier about {topic}, with sources.")
    return out


@dataclass
class Marking:
    """A model wrapper that rewrites a request's timeline marks for one strategy."""

    inner: AnthropicModel
    strategy: str

    @property
    def name(self) -> str:
        return self.inner.name

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        marks = list(request.cache_marks)
        stable = len(request.blocks) - 2  # SOURCES POOL and ANNOUNCE close every request
        if self.strategy == "none":
            marks = []
        elif self.strategy == "last block":
            marks = [len(request.blocks) - 1]
        elif self.strategy == "last stable block":
            marks = [stable - 1]
        async for chunk in self.inner.stream(request.model_copy(update={"cache_marks": marks})):
            yield chunk


SCENARIOS: dict[str, dict[str, int]] = {
    "standard": {"top_k": 5, "max_read": 3},
    "wide": {"top_k": 24, "max_read": 22},
}
"""standard: reads of 3 documents; wide: reads of 22 documents, so a read round adds more
than 20 blocks and a single mark falls out of the lookback window."""


async def run_strategy(
    strategy: str,
    texts: list[str],
    kb: KnowledgeSpace,
    *,
    scenario: str = "standard",
    round_seconds: float,
    gap_seconds: float,
    on_turn: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """One conversation under ``strategy`` against a fresh local server."""
    now = [T0]

    def advance(seconds: float) -> None:
        now[0] += seconds

    shape = SCENARIOS[scenario]
    policy = ExtractiveModel(top_k=shape["top_k"], max_read=shape["max_read"])
    async with FakeAnthropicServer(policy, clock=lambda: now[0]) as server:
        settings = LLMSettings(
            model=MODEL,
            api_key="bench",
            base_url=server.base_url,
            max_retries=0,
            cache_system=strategy == "actline",
        )
        client = AnthropicModel(settings)
        model: Model = Marking(client, strategy)
        driver = Driver(
            model,
            kb,
            clock=lambda: now[0],
            advance=advance,
            round_seconds=round_seconds,
            agents={"reviewer": lambda text: "Checked against the documentation: correct."},
        )
        usage = Usage()
        rounds: list[int] = []
        answers: list[str] = []
        started = time.perf_counter()
        for text in texts:
            out = await driver.turn(text)
            if out.status != "completed":
                raise SanityCheckFailed(
                    len(driver.tl.blocks), f"{strategy}: turn ended {out.status}"
                )
            usage = usage + out.total
            rounds.append(out.rounds)
            answers.append(out.answer)
            advance(gap_seconds)
            on_turn()
        seconds = time.perf_counter() - started
        await client.aclose()
        server_total = server.usage_totals
        blocks = len(driver.tl.blocks)
    if server_total.total_input_tokens != usage.total_input_tokens:
        raise SanityCheckFailed(blocks, f"{strategy}: client usage differs from the server's")
    total = usage.total_input_tokens
    written = usage.cache_write_5m_tokens + usage.cache_write_1h_tokens
    weighted = (
        usage.input_tokens
        + 1.25 * usage.cache_write_5m_tokens
        + 2 * usage.cache_write_1h_tokens
        + 0.1 * usage.cache_read_tokens
    )
    return {
        "scenario": scenario,
        "strategy": strategy,
        "turns": len(texts),
        "rounds": sum(rounds),
        "rounds_per_turn": sorted(set(rounds)),
        "blocks": blocks,
        "input_tokens_total": total,
        "uncached_input_tokens": usage.input_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": written,
        "output_tokens": usage.output_tokens,
        "read_pct": 100 * usage.cache_read_tokens / total if total else 0.0,
        "written_pct": 100 * written / total if total else 0.0,
        "cost_vs_no_cache": weighted / total if total else 1.0,
        "seconds": seconds,
        "answers": answers,
    }


def run(
    turns: int = 20,
    *,
    round_seconds: float = 3.0,
    gap_seconds: float = 45.0,
    strategies: tuple[str, ...] = STRATEGIES,
    scenarios: tuple[str, ...] = tuple(SCENARIOS),
) -> dict[str, Any]:
    """Every strategy over the same conversation; raises SanityCheckFailed on a mismatch."""
    kb = KnowledgeSpace(KB)
    texts = questions(turns)
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    with Progress(transient=True) as progress:
        task = progress.add_task("conversations", total=turns * len(strategies) * len(scenarios))
        for scenario in scenarios:
            found = []
            for strategy in strategies:
                row = asyncio.run(
                    run_strategy(
                        strategy,
                        texts,
                        kb,
                        scenario=scenario,
                        round_seconds=round_seconds,
                        gap_seconds=gap_seconds,
                        on_turn=lambda: progress.advance(task),
                    )
                )
                found.append(row)
            reference = found[0]["answers"]
            for row in found:
                if row.pop("answers") != reference:
                    what = f"{scenario}/{row['strategy']}: the conversation differs"
                    raise SanityCheckFailed(row["blocks"], what)
            rows += found
    return {
        "benchmark": "llm.prompt_cache",
        "model": MODEL,
        "turns": turns,
        "round_seconds": round_seconds,
        "gap_seconds": gap_seconds,
        "strategies": rows,
        **evaluate(rows),
        "seconds": time.perf_counter() - started,
        "python": platform.python_version(),
    }


def evaluate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The targets on the standard scenario, and actline against single marks on the wide one."""
    by = {(r["scenario"], r["strategy"]): r for r in rows}
    targets: list[dict[str, Any]] = []

    def target(figure: str, value: float, goal: str, met: bool) -> None:
        targets.append({"figure": figure, "value": value, "target": goal, "met": met})

    ours = by.get(("standard", "actline"))
    if ours is not None:
        target("standard: actline read %", ours["read_pct"], ">= 85", ours["read_pct"] >= 85)
        cost = ours["cost_vs_no_cache"]
        target("standard: actline cost vs none", cost, "<= 0.3", cost <= 0.3)
        single = by.get(("standard", "last block"))
        if single is not None:
            ratio = cost / single["cost_vs_no_cache"]
            target("standard: actline / last-block cost", ratio, "< 1", ratio < 1)
    wide, best = by.get(("wide", "actline")), by.get(("wide", "last stable block"))
    if wide is not None and best is not None:
        ratio = wide["cost_vs_no_cache"] / best["cost_vs_no_cache"]
        target("wide: actline / last-stable-block cost", ratio, "< 1", ratio < 1)
    return {"targets": targets, "targets_met": all(t["met"] for t in targets)}


def table(result: dict[str, Any]) -> Table:
    t = Table(title=f"prompt caching, {result['turns']} turns x 6 rounds ({result['model']} rules)")
    for column in ("scenario", "strategy", "input tokens", "read %", "written %", "cost vs none"):
        t.add_column(column, justify="left" if column in ("scenario", "strategy") else "right")
    for row in result["strategies"]:
        t.add_row(
            row["scenario"],
            row["strategy"],
            f"{row['input_tokens_total']:,}",
            f"{row['read_pct']:.1f}",
            f"{row['written_pct']:.1f}",
            f"{row['cost_vs_no_cache']:.3f}x",
        )
    return t


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.cache", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--round-seconds", type=float, default=3.0)
    parser.add_argument("--gap-seconds", type=float, default=45.0)
    parser.add_argument("--out", type=Path, default=RESULTS / "cache.json")
    args = parser.parse_args(argv)
    console = Console()
    try:
        result = run(
            max(1, args.turns), round_seconds=args.round_seconds, gap_seconds=args.gap_seconds
        )
    except SanityCheckFailed as exc:
        console.print(f"[red]sanity check failed:[/] {exc}")
        return 1
    console.print(table(result))
    for target in result["targets"]:
        mark = "[green]met[/]" if target["met"] else "[red]missed[/]"
        console.print(
            f"{target['figure']} = {target['value']:.3f} (target {target['target']}): {mark}"
        )
    write_result(console, args.out, result)
    return 0 if result["targets_met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
