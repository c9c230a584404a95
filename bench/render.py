"""Timeline render time per round: incremental ``Renderer`` against a full render.

A deterministic multi-turn conversation (seeded ``random.Random``: turn
headers, user prompts, a plan now and then, decision rounds of notes, tool
call and tool result with ``call_id`` and ``tc:`` paths, the odd user
followup, assistant completions; text sizes varied from a few words to ~16 KB)
is built to exactly ``N`` blocks for N in ``--sizes``. TTL pruning and
compaction are off (``cache_ttl_seconds=0``, ``max_tokens=0``) so that what is
measured is rendering.

- full: a fresh ``Renderer`` renders the whole timeline, which is what a
  system without incremental rendering pays every round.
- incremental: a long-lived ``Renderer`` (the one that did the full render);
  each round appends one decision round (tool call and result, sometimes a
  notes block) to the current turn and only ``render`` is timed.
- hide: after the rounds, ``hide`` the newest tool result and time the next
  ``render`` (it rebuilds from the hidden block only).

The machine is shared and noisy, so full and incremental samples are taken in
the same process, interleaved: the timeline is rebuilt for every batch (a full
sample at exactly N blocks, then a few incremental rounds, then a hide round),
and a batch adds at most ~N/40 rounds so the timeline stays within a few
percent of N. After every batch the incremental stream (parts, paths, tokens,
cache marks) must equal a fresh renderer's, before and after the hide.

Targets at the largest size (10,000 blocks by default): an incremental round
at least 20x faster than a full render (p50 against p50), and under 2 ms p50.

    python -m bench.render [--sizes 100,1000,10000] [--rounds 200] [--out bench/results/render.json]
"""

from __future__ import annotations

import gc
import math
import random
import time
from collections.abc import Iterator, Sequence
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from actline.timeline import (
    AnnounceContext,
    Block,
    Renderer,
    RenderResult,
    Timeline,
    TimelineConfig,
)
from actline.timeline.blocks import (
    COMPLETION,
    PLAN,
    REACT_NOTES,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_HEADER,
    USER_FOLLOWUP,
    USER_PROMPT,
)
from actline.timeline.memory import Plan, PlanStep
from actline.timeline.paths import ar_path, tc_path
from bench.harness import (
    TOOLS,
    SanityCheckFailed,
    add_counts,
    add_sizes,
    checked,
    corpus,
    finish,
    judge,
    ms,
    new_table,
    parser,
    platform_info,
    settle,
    summary_ms,
    verdict,
)

SIZES = (100, 1_000, 10_000)
ROUNDS = 200
SEED = 7
ROUND_SEED = 1_000
"""Round ``i`` is drawn with seed ``ROUND_SEED + i``, so every size appends the same rounds."""
T0 = 1_800_000_000.0
TARGET_RATIO = 20.0
TARGET_INCREMENTAL_P50_MS = 2.0
GROWTH_DIVISOR = 40
"""A batch appends at most ``N // 40`` rounds (~2.3 blocks each) before the timeline is rebuilt."""

CONFIG = TimelineConfig(cache_ttl_seconds=0, max_tokens=0)


def full_samples(blocks: int) -> int:
    """How many full renders to time at a size: 7 at 10,000 blocks, up to 31 when cheap."""
    return max(7, min(31, 70_000 // max(1, blocks)))


# -- the synthetic conversation ---------------------------------------------------------------
class Conversation:
    """A deterministic stream of blocks; the same seed always gives equal blocks.

    Block ids are ``b<k>`` (``Block.new`` would draw time-based ids), and the plan
    snapshot block is the one ``Timeline.record_plan`` would append, with such an id.
    """

    def __init__(self, seed: int = SEED) -> None:
        self.rng = random.Random(seed)
        self.corpus = corpus(seed)
        self.clock = T0
        self.k = 0
        self.turns = 0
        self.calls = 0
        self.turn_id = ""

    def _tick(self) -> float:
        self.clock += round(self.rng.uniform(0.2, 20.0), 3)
        return self.clock

    def _text(self, low: int, high: int) -> str:
        size = self.rng.randint(low, high)
        start = self.rng.randrange(0, len(self.corpus) - size)
        return self.corpus[start : start + size]

    def _block(self, kind: str, path: str, **fields: Any) -> Block:
        self.k += 1
        return Block.new(kind, self.turn_id, self._tick(), path=path, id=f"b{self.k}", **fields)

    def _result_text(self) -> str:
        roll = self.rng.random()
        if roll < 0.6:
            return self._text(200, 2_000)
        if roll < 0.9:
            return self._text(2_000, 6_000)
        return self._text(6_000, 16_000)

    def round(self, seed: int | None = None) -> list[Block]:
        """One decision round in the current turn: notes sometimes, a tool call, its result.

        With ``seed`` the round's content (sizes, tool, times) depends on the seed only.
        """
        if seed is not None:
            self.rng.seed(seed)
        tid = self.turn_id
        self.calls += 1
        cid = f"c{self.calls}"
        out: list[Block] = []
        if self.rng.random() < 0.3:
            path = ar_path(tid, f"react.notes.{cid}")
            out.append(self._block(REACT_NOTES, path, call_id=cid, text=self._text(80, 400)))
        tool = self.rng.choice(TOOLS)
        params: dict[str, Any]
        if tool == "react.read":
            params = {"paths": [tc_path(tid, f"c{max(1, self.calls - 1)}", "result")]}
        elif tool == "exec_python":
            params = {"code": self._text(80, 600)}
        else:
            params = {"query": self._text(20, 80)}
        call = {"tool_id": tool, "params": params}
        out.append(self._block(TOOL_CALL, tc_path(tid, cid, "call"), call_id=cid, data=call))
        path = tc_path(tid, cid, "result")
        if tool in ("web_search", "fetch_url") and self.rng.random() < 0.5:
            hits = [
                {"sid": i, "title": self._text(20, 60), "url": f"https://example.com/{cid}/{i}"}
                for i in range(1, self.rng.randint(2, 8))
            ]
            out.append(self._block(TOOL_RESULT, path, call_id=cid, data={"hits": hits}))
        else:
            out.append(self._block(TOOL_RESULT, path, call_id=cid, text=self._result_text()))
        return out

    def blocks(self) -> Iterator[Block]:
        """Turns without end: header, prompt, maybe a plan, 1-12 rounds, a completion."""
        while True:
            self.turns += 1
            self.turn_id = tid = f"t{self.turns}"
            yield self._block(TURN_HEADER, ar_path(tid, "turn.header"), author="system")
            yield self._block(USER_PROMPT, ar_path(tid, "user.prompt"), text=self._text(40, 600))
            if self.rng.random() < 0.15:
                steps = tuple(
                    PlanStep(n, self._text(15, 60)) for n in range(1, self.rng.randint(2, 6))
                )
                plan = Plan(f"p{self.turns}", tid, steps)
                path = ar_path(tid, f"react.plan.{plan.plan_id}")
                yield self._block(PLAN, path, mime="application/json", data=plan.to_dict())
            for _ in range(self.rng.randint(1, 12)):
                yield from self.round()
                if self.rng.random() < 0.03:
                    path = ar_path(tid, f"user.followup.{self.k}")
                    yield self._block(USER_FOLLOWUP, path, text=self._text(20, 200))
            path = ar_path(tid, "assistant.completion")
            yield self._block(COMPLETION, path, text=self._text(300, 3_000))


def add(tl: Timeline, block: Block) -> None:
    """Append ``block``; a turn header also opens its turn (``begin_turn`` finds it there)."""
    tl.append(block)
    if block.type == TURN_HEADER:
        tl.begin_turn(block.turn_id, block.ts)


def build(blocks: int, seed: int = SEED) -> tuple[Timeline, Conversation]:
    """A timeline of exactly ``blocks`` blocks, and the conversation to continue it with."""
    conv = Conversation(seed)
    tl = Timeline("c-bench")
    stream = conv.blocks()
    for _ in range(blocks):
        add(tl, next(stream))
    return tl, conv


# -- measuring ----------------------------------------------------------------------------------
def _announce(iteration: int) -> AnnounceContext:
    return AnnounceContext(iteration=iteration, max_iterations=1_000, budget_tokens=200_000)


def _check(blocks: int, what: str, renderer: Renderer, got: RenderResult, now: float) -> None:
    """``got`` (from the long-lived renderer) must equal a fresh renderer's stable stream."""
    fresh = Renderer(renderer.timeline, CONFIG).render(now=now, announce=_announce(0))
    mismatches = [
        name
        for name, a, b in (
            ("parts", list(got.stable), list(fresh.stable)),
            ("paths", list(got.paths), list(fresh.paths)),
            ("stable_tokens", got.stable_tokens, fresh.stable_tokens),
            # CP1 may be the restore point after a change, which only a renderer with
            # history has (actline.timeline.cache); CP2 and CP3 follow from the stream
            # alone.
            ("marks", (got.points.cp2, got.points.cp3), (fresh.points.cp2, fresh.points.cp3)),
        )
        if a != b
    ]
    if mismatches:
        raise SanityCheckFailed(
            blocks, f"{what}: incremental {', '.join(mismatches)} differ from a full render"
        )


def measure(
    blocks: int, rounds: int, fulls: int, progress: Progress | None = None
) -> dict[str, Any]:
    """Full, incremental and hide samples at one size (see the module docstring)."""
    growth = max(1, blocks // GROWTH_DIVISOR)
    batches = max(fulls, math.ceil(rounds / growth))
    per_batch = math.ceil(rounds / batches)
    task = None if progress is None else progress.add_task(f"{blocks:,} blocks", total=batches)
    clock = time.perf_counter
    full: list[float] = []
    incremental: list[float] = []
    hide: list[float] = []
    first: RenderResult | None = None
    largest = blocks
    done = 0
    for _ in range(batches):
        tl, conv = build(blocks)
        gc.collect()
        # Full: a fresh Renderer over fresh Block objects. The renderer caches nothing on the
        # blocks: _add re-renders every block's text (iso() times, json.dumps of data) and counts
        # the rendered text itself; Block.tokens is used only by TTL pruning and compaction, both
        # off here. Every sample builds new blocks anyway, so nothing carries across samples
        # except the module-level text corpus the block texts are sliced from.
        t0 = clock()
        renderer = Renderer(tl, CONFIG)
        result = renderer.render(now=conv.clock, announce=_announce(0))
        full.append(clock() - t0)
        if first is None:
            first = result
        # Incremental: the same (now warm) renderer, one appended round per render.
        for iteration in range(1, min(per_batch, rounds - done) + 1):
            for block in conv.round(ROUND_SEED + done):
                add(tl, block)
            now = conv.clock
            announce = _announce(iteration)
            t0 = clock()
            result = renderer.render(now=now, announce=announce)
            incremental.append(clock() - t0)
            done += 1
        _check(blocks, "after the incremental rounds", renderer, result, conv.clock)
        # Hide: the newest tool result goes; the next render rebuilds from it.
        newest = next(b for b in reversed(tl.blocks) if b.type == TOOL_RESULT)
        outcome = renderer.hide(newest.path, "junk")
        if outcome.status != "ok":
            raise SanityCheckFailed(blocks, f"hide {newest.path} refused: {outcome.to_dict()}")
        t0 = clock()
        result = renderer.render(now=conv.clock, announce=_announce(0))
        hide.append(clock() - t0)
        _check(blocks, "after the hide", renderer, result, conv.clock)
        largest = max(largest, len(tl))
        del tl, conv, renderer, result
        if progress is not None and task is not None:
            progress.advance(task)
    assert first is not None
    full_s, inc_s, hide_s = summary_ms(full), summary_ms(incremental), summary_ms(hide)
    return {
        "blocks": blocks,
        "blocks_max": largest,
        "batches": batches,
        "parts": len(first.parts()),
        "stable_parts": len(first.stable),
        "stable_tokens": first.stable_tokens,
        "tail_tokens": first.tail_tokens,
        "marks": list(first.marks),
        "full": full_s,
        "incremental": inc_s,
        "hide": hide_s,
        "ratio_full_to_incremental": full_s["p50_ms"] / inc_s["p50_ms"],
        "ratio_full_to_hide": full_s["p50_ms"] / hide_s["p50_ms"],
        "incremental_matches_full": True,
    }


def run(
    sizes: Sequence[int] = SIZES, rounds: int = ROUNDS, fulls: int | None = None
) -> dict[str, Any]:
    """Measure every size; the targets are checked at the largest."""
    started = time.perf_counter()
    # Warm-up (imports, first-call caches) outside every sample.
    tl, conv = build(50)
    Renderer(tl, CONFIG).render(now=conv.clock, announce=_announce(0))
    rows: list[dict[str, Any]] = []
    with Progress(transient=True) as progress:
        for blocks in sorted(sizes):
            count = fulls if fulls is not None else full_samples(blocks)
            rows.append(measure(blocks, rounds, max(1, count), progress))
    top = rows[-1]
    targets: list[dict[str, Any]] = [
        {
            "blocks": top["blocks"],
            "figure": "ratio_full_to_incremental",
            "minimum": TARGET_RATIO,
            "value": top["ratio_full_to_incremental"],
        },
        {
            "blocks": top["blocks"],
            "figure": "incremental_p50_ms",
            "maximum": TARGET_INCREMENTAL_P50_MS,
            "value": top["incremental"]["p50_ms"],
        },
    ]
    judge(targets, strict=True)
    return {
        "benchmark": "timeline.render_round",
        "config": {"cache_ttl_seconds": CONFIG.cache_ttl_seconds, "max_tokens": CONFIG.max_tokens},
        "seed": SEED,
        "rounds": rounds,
        "sizes": rows,
        "targets": targets,
        "targets_met": all(t["met"] for t in targets),
        "seconds": time.perf_counter() - started,
        **platform_info(),
    }


# -- report -----------------------------------------------------------------------------------
def _verdict(targets: list[dict[str, Any]]) -> str:
    if all(t["met"] for t in targets):
        return verdict(True)
    missed = ", ".join(t["figure"] for t in targets if not t["met"])
    return f"[red]missed: {missed}[/]"


def table(result: dict[str, Any]) -> Table:
    rows = result["sizes"]
    top = rows[-1]
    columns = ("blocks", "full p50", "full p90", "incr p50", "incr p90", "full/incr", "parts")
    out = new_table(
        f"timeline render, ms per render call, {result['rounds']} rounds per size",
        (*columns, "tokens", "verdict"),
        left=("verdict",),
        caption=(
            "full: fresh Renderer, whole timeline; incr: long-lived Renderer after appending one "
            "round (call + result, sometimes notes); hide: the render after hiding the newest "
            "result; parts and tokens: the full render at N blocks (tokens: stable stream); "
            f"targets at {top['blocks']:,} blocks: full/incr ≥{TARGET_RATIO:.0f}x and "
            f"incr p50 <{TARGET_INCREMENTAL_P50_MS:.0f} ms"
        ),
    )
    for row in rows:
        full, inc = row["full"], row["incremental"]
        out.add_row(
            f"{row['blocks']:,}",
            ms(full["p50_ms"]),
            ms(full["p90_ms"]),
            ms(inc["p50_ms"]),
            ms(inc["p90_ms"]),
            f"{row['ratio_full_to_incremental']:.0f}x",
            f"{row['parts']:,}",
            f"{row['stable_tokens']:,}",
            _verdict(result["targets"]) if row is top else "",
        )
    hide = top["hide"]
    out.add_row(
        f"{top['blocks']:,} hide",
        ms(top["full"]["p50_ms"]),
        ms(top["full"]["p90_ms"]),
        ms(hide["p50_ms"]),
        ms(hide["p90_ms"]),
        f"{top['ratio_full_to_hide']:.0f}x",
    )
    return out


def main(argv: list[str] | None = None) -> int:
    cli = parser("render", __doc__)
    add_sizes(cli, "timeline sizes in blocks (100,1000,10000)")
    add_counts(
        cli,
        rounds=f"incremental rounds per size ({ROUNDS})",
        full_samples="full renders per size (default: by size)",
    )
    args = cli.parse_args(argv)
    options = settle(args, {"sizes": list(SIZES), "rounds": ROUNDS, "full_samples": None})
    console = Console()
    result = checked(
        console, lambda: run(options["sizes"], max(1, options["rounds"]), options["full_samples"])
    )
    if result is None:
        return 1
    console.print(table(result))
    samples = ", ".join(
        f"{row['blocks']:,}: {row['full']['n']} full / {row['incremental']['n']} incr / "
        f"{row['hide']['n']} hide (up to {row['blocks_max']:,} blocks)"
        for row in result["sizes"]
    )
    console.print(f"samples {samples}; {result['seconds']:.1f} s in all")
    console.print("the incremental stream equals a fresh full render after every batch")
    return finish(console, args.out, result, result["targets_met"])


if __name__ == "__main__":
    raise SystemExit(main())
