"""Running the long conversations: one per profile and variant, and the command line."""

from __future__ import annotations

import asyncio
import platform
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from actline.actors import NodeSettings, ToolRegistry
from actline.actors.client.client import Client
from actline.actors.configuration import profiles
from actline.actors.configuration.profiles import BUILTIN
from actline.actors.node.node import Node
from actline.bus import Bus, EmbeddedNats
from actline.llm.anthropic import AnthropicModel
from actline.llm.config import LLMSettings, model_spec
from actline.llm.fake_anthropic import FakeAnthropicServer
from actline.tools import KnowledgeSpace
from bench.harness import SanityCheckFailed, add_counts, finish, parser, settle
from bench.longrun.floor import answered, run_floor, turn_costs, usage_cost
from bench.longrun.report import flatness, table, targets, targets_table
from bench.longrun.scenario import KB, MODEL, ScriptedAgent, fact, fact_pages, page_text

DEFAULTS = {
    "turns": 20,
    "rounds_per_turn": 10,
    "result_tokens": 2500,
    "long_turns": 60,
}
QUICK = {"turns": 3, "rounds_per_turn": 5, "result_tokens": 300, "long_turns": 4}
VARIANTS = (("policy", True), ("policy", False), ("baseline", False))
"""The runs of a profile: (variant, watchdog)."""


def profile_table(profile: str, variant: str, watchdog: bool) -> dict[str, Any]:
    """The turn's profile table of a run. The baseline turns the smart layer off: the
    append-only context policy (when the profiles know the key ``context_policy``), no
    tool-response retention, no TTL pruning, no watchdog."""
    if variant == "policy":
        return {"extends": profile, "watchdog": watchdog}
    out: dict[str, Any] = {"extends": profile}
    if "context_policy" in profiles.KEYS:
        out["context_policy"] = "append"
    out.update({"retention": False, "ttl_pruning": False, "watchdog": False})
    return out


async def run_one(
    profile: str,
    variant: str = "policy",
    watchdog: bool = True,
    *,
    turns: int,
    rounds_per_turn: int,
    result_tokens: int,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """One long conversation on a fresh node, store and Messages API server."""
    fact_page = fact_pages(turns, rounds_per_turn)
    agent = ScriptedAgent(rounds_per_turn)
    registry = ToolRegistry()

    @registry.tool("bench.fetch", description="fetch one page of the bench corpus")
    async def fetch(params: dict[str, Any], ctx: Any) -> str:
        return page_text(int(params["page"]), result_tokens, fact_page)

    label = f"{profile} {variant}" + (" wd" if watchdog else "") + f" x{turns}"
    task = None if progress is None else progress.add_task(label, total=turns)
    profile_config = profile_table(profile, variant, watchdog)
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
            config = {"profile": profile_config, "max_iterations": rounds_per_turn + 2}
            contexts = []
            windows: list[tuple[int, int]] = []
            started = time.perf_counter()
            try:
                for t in range(turns):
                    before = len(server.requests)
                    handle = await client.submit(
                        f"Read the next pages of the corpus (part {t + 1}).",
                        conversation_id="longrun",
                        config=config,
                    )
                    result = await handle.wait(300)
                    windows.append((before, len(server.requests)))
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
            requests = list(server.requests)
    records = answered(requests)
    usage = server.usage_totals
    total = usage.total_input_tokens
    cost = usage_cost(usage)
    floor = run_floor(requests, min_cache_tokens=model_spec(MODEL).min_cache_tokens)
    per_turn = turn_costs(requests, windows)
    planted = [fact(t + 1)[1] for t in range(turns)]
    recalled = [v for v in planted if v in agent.last_prompt]
    peaks = [r.usage.total_input_tokens for r in records if r.usage is not None]
    compacted = [t + 1 for t, c in enumerate(contexts) if c is not None and c.compactions]
    return {
        "profile": profile,
        "run": variant,
        "watchdog": watchdog,
        "profile_table": profile_config,
        "turns": turns,
        "rounds": sum(agent.rounds.values()),
        "model_calls": len(records),
        "summary_calls": agent.summaries,
        "peak_context_tokens": max(peaks, default=0),
        "compactions": sum(c.compactions for c in contexts if c is not None),
        "watchdog_compactions": sum(c.watchdog_compactions for c in contexts if c is not None),
        "first_compaction_turn": compacted[0] if compacted else None,
        "signals": _sum_signals(contexts),
        "input_tokens_total": total,
        "cache_read_pct": 100 * usage.cache_read_tokens / total if total else 0.0,
        "cost_vs_no_cache": cost / total if total else 1.0,
        "cost_base_tokens": cost,
        "floor_base_tokens": floor,
        "cost_vs_floor": cost / floor if floor else None,
        "turn_costs": per_turn,
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


def run_all(
    profile_names: Sequence[str],
    console: Console,
    *,
    turns: int,
    rounds_per_turn: int,
    result_tokens: int,
    long_turns: int,
    baseline: bool = True,
    long: bool = True,
) -> dict[str, Any]:
    """Every run of every profile: the policy with the watchdog and without it, the baseline
    (unless ``baseline`` is False), and the policy with the watchdog over ``long_turns``
    turns (unless ``long`` is False)."""
    rows: list[dict[str, Any]] = []
    long_rows: list[dict[str, Any]] = []
    with Progress(console=console, transient=True) as progress:
        for profile in profile_names:
            for variant, watchdog in VARIANTS:
                if variant == "baseline" and not baseline:
                    continue
                one = run_one(
                    profile,
                    variant,
                    watchdog,
                    turns=turns,
                    rounds_per_turn=rounds_per_turn,
                    result_tokens=result_tokens,
                    progress=progress,
                )
                rows.append(asyncio.run(one))
            if long:
                one = run_one(
                    profile,
                    turns=long_turns,
                    rounds_per_turn=rounds_per_turn,
                    result_tokens=result_tokens,
                    progress=progress,
                )
                row = asyncio.run(one)
                row["flatness"] = flatness(row["turn_costs"])
                long_rows.append(row)
    result = {
        "benchmark": "longrun",
        "machine": platform.platform(),
        "turns": turns,
        "rounds_per_turn": rounds_per_turn,
        "result_tokens": result_tokens,
        "long_turns": long_turns if long else None,
        "context_policy_key": "context_policy" in profiles.KEYS,
        "runs": rows,
        "long_runs": long_rows,
    }
    result["targets"] = targets(result)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    cli = parser("longrun", sys.modules[__package__].__doc__, quick="a tiny scenario (tests)")
    add_counts(
        cli,
        turns="turns in the conversation (20)",
        rounds_per_turn="rounds per turn (10)",
        result_tokens="words per fetched page (2500)",
        long_turns="turns of the long run (60)",
    )
    cli.add_argument(
        "--profiles", default=",".join(BUILTIN), help="built-in profiles, comma-separated (all)"
    )
    cli.add_argument("--no-baseline", action="store_true", help="skip the baseline runs")
    cli.add_argument("--no-long", action="store_true", help="skip the long run")
    args = cli.parse_args(None if argv is None else list(argv))
    options = settle(args, DEFAULTS, QUICK)
    names = [p.strip() for p in args.profiles.split(",") if p.strip()]
    unknown = [p for p in names if p not in BUILTIN]
    if unknown:
        cli.error(f"unknown profile(s) {', '.join(unknown)}: choose from {', '.join(BUILTIN)}")
    console = Console()
    result = run_all(
        names, console, baseline=not args.no_baseline, long=not args.no_long, **options
    )
    console.print(table(result))
    console.print(targets_table(result))
    return finish(console, args.out, result)
