"""``actline demo``: three turns that show every capability once, on the embedded defaults.

An embedded nats-server (JetStream on), one node in this process with LMDB under ``./.actline``,
the offline ExtractiveModel answering over ``examples/kb`` (the Lumen Relay docs) behind a local
Messages API server (so prompt caching is accounted the way the real API does it, through the
real ``anthropic`` client), and an outside agent process, ``examples/reviewer.py``.

1. A rollout question that asks the reviewer to check the plan: a plan, a knowledge search and
   reads, an internal note, the hand-off to ``reviewer``, a Waiting card, the DONE arriving, an
   answer streamed with citations and follow-ups.
2. A question about what the reviewer said earlier: ``react.memsearch`` finds turn 1.
3. A pricing question with a followup that lands while the turn runs and joins it.

It ends with a summary table: rounds, tokens, cache reads, wall time, where the timeline is
stored and the command that shows it. ``--model``, ``--api`` and ``--base-url`` run the same
turns on that model instead (read with the environment's key, as ``actline ask`` does).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from actline.config import Config, ConfigError
from actline.llm import (
    AnthropicModel,
    ExtractiveModel,
    LLMSettings,
    ModelConfigError,
    check_servable,
    make_model,
)
from actline.llm.fake_anthropic import FakeAnthropicServer
from actline.llm.protocol import Model
from actline.llm.reachable import check_reachable
from actline.messages import ReActProgress, ReActResult, new_id
from actline.runtime import Runtime, follow
from actline.terminal.cards import TurnPrinter, TurnStats, stats_of, summary_table

ROOT = Path(__file__).resolve().parents[2]
KB = ROOT / "examples" / "kb"
REVIEWER = ROOT / "examples" / "reviewer.py"
TURNS = (
    (
        "Plan, search, read, note, hand off, wait",
        "We are rolling Lumen Relay out to production. How many cluster nodes do we need and "
        "how do we back them up? Ask reviewer to check the rollout plan.",
        None,
    ),
    (
        "Memory: recall an earlier turn",
        "What did the reviewer say earlier about our rollout plan?",
        None,
    ),
    (
        "A followup joins the running turn",
        "How do the pricing tiers differ?",
        "Also, which tier includes the support SLA?",
    ),
)


async def _reviewer(url: str, config: Config, console: Console) -> asyncio.subprocess.Process:
    env = dict(os.environ)
    creds = config.creds_for("agent", "reviewer")  # the agent's own role, not the node's
    if creds is not None:
        env["ACTLINE_NATS_CREDS"] = str(creds)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(REVIEWER),
        "--nats",
        url,
        "--delay",
        "1.5",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=str(ROOT),
        env=env,
    )
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 30)
    console.print(Text(line.decode().rstrip(), "dim magenta"))

    async def relay() -> None:
        assert process.stdout is not None
        async for raw in process.stdout:
            console.print(Text(raw.decode().rstrip(), "magenta"))

    asyncio.get_running_loop().create_task(relay())
    return process


def chosen_model(model: str | None, api: str | None, base_url: str | None) -> LLMSettings | None:
    """The settings of the model the flags name (None: none named, the offline demo model);
    ``ModelConfigError`` when it cannot run here."""
    if model is None and api is None and base_url is None:
        return None
    settings = LLMSettings.from_env(model=model, api=api, base_url=base_url)
    check_servable(settings)
    return settings


def own_command() -> str:
    """How this shell reaches the ``actline`` being run: ``.venv/bin/actline`` (relative to the
    working directory) when it is a virtual environment's script that is not on PATH, else
    ``actline``."""
    script = Path(sys.argv[0])
    on_path = shutil.which("actline")
    if script.name != "actline" or (on_path and Path(on_path).resolve() == script.resolve()):
        return "actline"
    with contextlib.suppress(ValueError):
        return str(script.resolve().relative_to(Path.cwd().resolve()))
    return str(script)


async def run_demo(
    nats_url: str | None = None,
    console: Console | None = None,
    home: Path | None = None,
    *,
    model: str | None = None,
    api: str | None = None,
    base_url: str | None = None,
) -> int:
    """Run the demo; returns the exit code (0 when every turn completed)."""
    out = console or Console()
    started = time.perf_counter()
    where = (home or Path(".actline")).resolve()
    try:
        chosen = chosen_model(model, api, base_url)
        if chosen is not None and not chosen.offline:
            await check_reachable(chosen)
    except ModelConfigError as exc:
        out.print(f"[red]{exc}[/red]")
        return 2
    serving = "offline model behind a local Messages API"
    if chosen is not None:
        at = f" at {chosen.base_url}" if chosen.base_url else ""
        serving = f"model {chosen.model} ({chosen.api} API{at})"
    out.print(
        Panel.fit(
            "[bold]actline demo[/bold]: a ReAct agent over the Lumen Relay docs (examples/kb)\n"
            f"{serving} · embedded NATS · LMDB in "
            f"{where}\noutside agent: examples/reviewer.py",
            border_style="cyan",
        )
    )
    try:
        config = Config.load(
            env={},
            nats_url=nats_url,
            home=where,
            knowledge_dir=KB,
            model=chosen.model if chosen is not None else None,
            # the offline demo model answers over the API but writes no titles: the
            # conversation keeps its first message's key phrase
            model_titles=chosen is not None,
            nats_creds=os.environ.get("ACTLINE_NATS_CREDS"),
            insecure=os.environ.get("ACTLINE_INSECURE", "") in ("1", "true", "yes", "on"),
        )
    except ConfigError as exc:
        out.print(f"[red]{exc}[/red]")
        return 2
    policy = ExtractiveModel(chunk_chars=24, delay=0.006)
    reviewer: asyncio.subprocess.Process | None = None
    stats: list[TurnStats] = []
    cid = new_id("demo-")
    async with contextlib.AsyncExitStack() as stack:
        served: Model
        if chosen is None:
            local = await stack.enter_async_context(FakeAnthropicServer(policy))
            settings = LLMSettings(
                model="extractive", api_key="local", base_url=local.base_url, max_retries=0
            )
            served = AnthropicModel(settings)
        else:
            served = make_model(chosen)
        try:
            with out.status("starting nats-server, the node and the reviewer agent..."):
                runtime = await Runtime(config, model=served).start()
            out.print(Text(f"nats-server ready at {runtime.nats_url} (JetStream on)", "dim"))
            reviewer = await _reviewer(runtime.nats_url, config, out)
        except ConfigError as exc:
            out.print(f"[red]{exc}[/red]")
            return 1
        try:
            for number, (title, text, followup) in enumerate(TURNS, 1):
                out.print()
                out.rule(f"[bold cyan]turn {number}: {title}")
                out.print(Text(f"you> {text}", "bold"))
                began = time.perf_counter()
                handle = await runtime.submit(text, cid)
                printer = TurnPrinter(out)
                sent = followup is None
                result: ReActResult | None = None
                async for event in follow(handle, timeout=120):
                    printer.show(event)
                    if (
                        not sent
                        and isinstance(event, ReActProgress)
                        and event.phase == "tool_call"
                        and "react.search_knowledge" in event.detail
                    ):  # lands after the first search: the model searches again for it
                        sent = True
                        verdict = await runtime.followup(handle, followup or "")
                        out.print(Text(f"you (while the turn runs)> {followup}", "bold"))
                        out.print(Text(f"followup: {getattr(verdict, 'detail', verdict)}", "dim"))
                    if isinstance(event, ReActResult):
                        result = event
                assert result is not None
                stats.append(stats_of(result, time.perf_counter() - began))
        finally:
            if reviewer is not None and reviewer.returncode is None:
                reviewer.terminate()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(reviewer.wait(), 5)
            await runtime.close()
            close = getattr(served, "aclose", None)
            if close is not None:
                await close()
    out.print()
    out.print(summary_table(stats, where=str(where), wall_s=time.perf_counter() - started))
    out.print(Text("see the timeline the model reads next:", "dim"))
    out.print(Text(f"{own_command()} timeline {cid} --rendered"), soft_wrap=True)  # never wrapped
    failed = [s for s in stats if s.status != "completed"]
    return 1 if failed else 0
