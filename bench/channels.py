"""Streaming channel parser throughput against a one-pass regex reference.

A deterministic synthetic model stream (``--mb`` million ASCII characters, so
bytes and characters agree) has a short thinking channel of prose, a long
markdown answer where about 30% of the bytes are citation tokens (``[[S:n]]``,
``[[S:n,m]]``, ``[[S:a-b]]``) and a JSON follow-up channel. It is fed to a
fresh ``ChannelStream`` in chunks of 16 B, 64 B, 1 KB and 4 KB. The naive
reference joins the whole stream and replaces the citations of the answer
body with one ``replace_citations`` pass (one ``TOKEN_RE.sub``): the least
work that gives the same answer text, with none of the streaming
guarantees. Before any figure counts, the answer deltas of every chunked
run must equal the reference's rendering.

Throughput is the best of ``--repeat`` untimed-per-call passes (feed over all
chunks plus finish); a separate pass times each ``feed`` call for the p50 and
p99 per chunk. Targets: at 4 KB chunks at least 0.5x the reference
throughput; at 16 B chunks at least 4 MB/s (MB = 10^6 bytes).

    python -m bench.channels [--mb 10] [--repeat 3] [--out bench/results/channels.json]
"""

from __future__ import annotations

import functools
import gc
import random
import re
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import Progress, TaskID

from actline.channels import ChannelSpec, ChannelStream, citation_map, replace_citations
from actline.channels.citations import CitationSource
from bench.harness import (
    add_counts,
    checked,
    finish,
    judge,
    new_table,
    parser,
    percentile,
    platform_info,
    settle,
    verdict,
)

CHUNK_SIZES = (16, 64, 1024, 4096)
NAIVE_RUNS = 3
SIDS = 50
CITATION_SHARE = 0.30
THINKING_FRACTION = 0.03
TARGET_RATIO_4K = 0.5
TARGET_MBPS_16B = 4.0

_ANSWER_RE = re.compile(r"<channel:answer>(.*?)</channel:answer>", re.DOTALL)
_WORDS = (
    "the a an of to in on for with by from as that this which when where while after before "
    "model stream parser channel token source answer result client server buffer chunk delta "
    "citation release latency throughput cache prompt timeline block snapshot request reply "
    "returns keeps holds emits reads writes sends builds checks replaces renders streams "
    "quickly safely only always never often again first last every each other same new old "
    "configuration deployment version update change note example value field record index"
).split()
_IDENTIFIERS = (
    "feed()",
    "finish()",
    "ChannelStream",
    "TOKEN_RE",
    "max_tokens",
    "--timeout",
    "sid",
    "config.yaml",
    "x = 1",
    "None",
)


class SanityCheckFailed(Exception):
    """The chunked parser's answer text differs from the naive reference's rendering."""

    def __init__(self, chunk_bytes: int, offset: int, expected: str, got: str) -> None:
        super().__init__(chunk_bytes, offset, expected, got)
        self.chunk_bytes = chunk_bytes
        self.offset = offset
        self.expected = expected
        self.got = got

    def __str__(self) -> str:
        return (
            f"answer deltas at {self.chunk_bytes} B chunks differ from the naive reference "
            f"at character {self.offset}: expected {self.expected!r}, got {self.got!r}"
        )


# -- the synthetic stream ---------------------------------------------------------------------
def sources() -> list[dict[str, Any]]:
    """The 50 sources every citation in the stream resolves to."""
    return [
        {"sid": sid, "title": f"Source {sid}: release notes", "url": f"https://example.com/{sid}"}
        for sid in range(1, SIDS + 1)
    ]


def specs() -> list[ChannelSpec]:
    """The channels of the synthetic stream."""
    return [
        ChannelSpec("thinking", replace_citations=False),
        ChannelSpec("answer", format="markdown"),
        ChannelSpec("followup", format="json", replace_citations=False),
    ]


def _words(rng: random.Random, low: int, high: int) -> str:
    text = " ".join(rng.choices(_WORDS, k=rng.randint(low, high)))
    return text[0].upper() + text[1:]


def _sentence(rng: random.Random) -> str:
    """A sentence without its final period, sometimes with an inline code span."""
    text = _words(rng, 6, 14)
    if rng.random() < 0.15:
        text += f" with `{rng.choice(_IDENTIFIERS)}`"
    return text


def _token(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.6:
        return f"[[S:{rng.randint(1, SIDS)}]]"
    if kind < 0.85:
        a, b = rng.sample(range(1, SIDS + 1), 2)
        return f"[[S:{a},{b}]]"
    a = rng.randint(1, SIDS - 4)
    return f"[[S:{a}-{a + rng.randint(1, 4)}]]"


def _fence(rng: random.Random) -> str:
    lines = [f"    value_{i} = compute({rng.randint(0, 99)}, key='k{i}')" for i in range(4)]
    body = "\n".join(["def handler(event):", *lines, "    return value_0"])
    return f"```python\n{body}\n```\n\n"


def make_stream(mb: float) -> tuple[str, int]:
    """The synthetic stream of about ``mb`` million characters, and its citation bytes."""
    rng = random.Random(0)
    total = max(1, int(mb * 1_000_000))
    parts = ["<channel:thinking>\n"]
    size = 0
    while size < total * THINKING_FRACTION:
        paragraph = ". ".join(_words(rng, 6, 14) for _ in range(rng.randint(3, 6))) + ".\n\n"
        parts.append(paragraph)
        size += len(paragraph)
    parts.append("</channel:thinking>\n<channel:answer>\n")
    answer_target = total - size
    # The answer's own share is a little higher, so the whole stream lands on CITATION_SHARE.
    share = CITATION_SHARE * total / answer_target
    cited = written = 0

    def cite(text: str) -> str:
        nonlocal cited
        tokens = ""
        while cited + len(tokens) < share * (written + len(text) + len(tokens) + 1):
            tokens += _token(rng)
        cited += len(tokens)
        return f"{text} {tokens}." if tokens else f"{text}."

    while written < answer_target:
        kind = rng.random()
        if kind < 0.08:
            block = f"## {_words(rng, 2, 5)}\n\n"
        elif kind < 0.12:
            block = _fence(rng)
        elif kind < 0.25:
            items = []
            for _ in range(rng.randint(2, 5)):
                items.append(f"- {cite(_sentence(rng))}\n")
                written += len(items[-1])
            parts.extend(items)
            block = "\n"
        else:
            sentences = []
            for _ in range(rng.randint(2, 5)):
                sentences.append(cite(_sentence(rng)) + " ")
                written += len(sentences[-1])
            parts.extend(sentences)
            block = "\n\n"
        parts.append(block)
        written += len(block)
    parts.append('</channel:answer>\n<channel:followup>["a", "b"]</channel:followup>\n')
    return "".join(parts), cited


def split(text: str, size: int) -> list[str]:
    """``text`` in chunks of exactly ``size`` characters (the last may be shorter)."""
    return [text[i : i + size] for i in range(0, len(text), size)]


# -- the two contenders --------------------------------------------------------------------------
def naive(chunks: list[str], cmap: dict[int, CitationSource]) -> str:
    """Join the whole stream, find the answer body, replace its citations in one regex pass.

    It uses the same public ``replace_citations`` (one ``TOKEN_RE.sub`` with the
    same rendering) so the comparison measures streaming, not rendering.
    """
    body = _ANSWER_RE.search("".join(chunks))
    return replace_citations(body.group(1), cmap, "markdown") if body is not None else ""


def _naive_pass(chunks: list[str], cmap: dict[int, CitationSource]) -> float:
    gc.collect()
    t0 = time.perf_counter()
    naive(chunks, cmap)
    return time.perf_counter() - t0


def _timed_pass(chunks: list[str]) -> float:
    stream = ChannelStream(specs(), sources=sources())
    feed = stream.feed
    gc.collect()
    t0 = time.perf_counter()
    for chunk in chunks:
        feed(chunk)
    stream.finish()
    return time.perf_counter() - t0


def _per_call_pass(chunks: list[str]) -> tuple[list[float], str]:
    """Time each ``feed`` call; also collect the answer deltas (outside the timed calls)."""
    stream = ChannelStream(specs(), sources=sources())
    feed = stream.feed
    clock = time.perf_counter
    samples: list[float] = []
    answer: list[str] = []
    gc.collect()
    for chunk in chunks:
        t0 = clock()
        deltas = feed(chunk)
        samples.append(clock() - t0)
        answer.extend(d.text for d in deltas if d.channel == "answer")
    answer.extend(d.text for d in stream.finish() if d.channel == "answer")
    return samples, "".join(answer)


def _first_difference(a: str, b: str) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def _best(runs: int, once: Callable[[], float], advance: Callable[[], None]) -> float:
    best = float("inf")
    for _ in range(runs):
        best = min(best, once())
        advance()
    return best


def run(mb: float, repeat: int) -> dict[str, Any]:
    """Build the stream, measure the reference and every chunk size, check the answers agree."""
    stream, cited = make_stream(mb)
    stream_mb = len(stream) / 1_000_000
    cmap = citation_map(sources())
    rows: list[dict[str, Any]] = []
    with Progress(transient=True) as progress:
        task: TaskID = progress.add_task(
            "channels", total=NAIVE_RUNS + len(CHUNK_SIZES) * (repeat + 1)
        )

        def advance() -> None:
            progress.advance(task)

        big = split(stream, max(CHUNK_SIZES))
        expected = naive(big, cmap)

        naive_mbps = stream_mb / _best(
            NAIVE_RUNS, functools.partial(_naive_pass, big, cmap), advance
        )
        del big
        for size in CHUNK_SIZES:
            progress.update(task, description=f"{size} B chunks")
            chunks = split(stream, size)
            best = _best(repeat, functools.partial(_timed_pass, chunks), advance)
            samples, answer = _per_call_pass(chunks)
            advance()
            if answer != expected:
                at = _first_difference(expected, answer)
                raise SanityCheckFailed(size, at, expected[at : at + 40], answer[at : at + 40])
            mbps = stream_mb / best
            rows.append(
                {
                    "chunk_bytes": size,
                    "chunks": len(chunks),
                    "mb_per_s": mbps,
                    "ratio_to_naive": mbps / naive_mbps,
                    "seconds": best,
                    "p50_us": percentile(samples, 0.50) * 1e6,
                    "p99_us": percentile(samples, 0.99) * 1e6,
                    "answer_chars": len(answer),
                    "answer_matches_naive": True,
                }
            )
            del chunks, samples, answer
    by_size = {row["chunk_bytes"]: row for row in rows}
    targets = [
        {
            "chunk_bytes": 4096,
            "figure": "ratio_to_naive",
            "minimum": TARGET_RATIO_4K,
            "value": by_size[4096]["ratio_to_naive"],
        },
        {
            "chunk_bytes": 16,
            "figure": "mb_per_s",
            "minimum": TARGET_MBPS_16B,
            "value": by_size[16]["mb_per_s"],
        },
    ]
    judge(targets)
    return {
        "benchmark": "channels.stream_throughput",
        "stream_bytes": len(stream),
        "citation_bytes": cited,
        "citation_share": cited / len(stream),
        "answer_chars": len(expected),
        "repeat": repeat,
        "naive_mb_per_s": naive_mbps,
        "chunked": rows,
        "targets": targets,
        "targets_met": all(t["met"] for t in targets),
        **platform_info(),
    }


def _target_text(target: dict[str, Any] | None) -> tuple[str, str]:
    if target is None:
        return "", ""
    if target["figure"] == "ratio_to_naive":
        text = f"≥{target['minimum']:.1f}x naive"
    else:
        text = f"≥{target['minimum']:.0f} MB/s"
    return text, verdict(target["met"])


def main(argv: list[str] | None = None) -> int:
    cli = parser("channels", __doc__)
    cli.add_argument("--mb", type=float, default=10.0, help="stream size, 10^6 characters")
    add_counts(cli, repeat="timed passes per chunk size (3)")
    args = cli.parse_args(argv)
    repeat = settle(args, {"repeat": 3})["repeat"]
    console = Console()
    result = checked(console, lambda: run(args.mb, max(1, repeat)), SanityCheckFailed)
    if result is None:
        return 1

    table = new_table(
        (
            f"channel parser, {result['stream_bytes'] / 1e6:.1f} MB stream, "
            f"{result['citation_share']:.1%} citation bytes, best of {result['repeat']}"
        ),
        ("chunk", "MB/s", "vs naive", "p50 µs", "p99 µs", "target", "verdict"),
        left=("chunk", "target"),
        caption="naive: join + one regex pass; p50/p99: µs per feed call (one chunk)",
    )
    table.add_row("naive", f"{result['naive_mb_per_s']:.1f}", "1.00x")
    targets = {t["chunk_bytes"]: t for t in result["targets"]}
    for row in result["chunked"]:
        size = row["chunk_bytes"]
        label = f"{size // 1024} KB" if size >= 1024 else f"{size} B"
        target, verdict = _target_text(targets.get(size))
        table.add_row(
            label,
            f"{row['mb_per_s']:.1f}",
            f"{row['ratio_to_naive']:.2f}x",
            f"{row['p50_us']:.1f}",
            f"{row['p99_us']:.1f}",
            target,
            verdict,
        )
    console.print(table)
    console.print(
        f"citation share {result['citation_share']:.1%} of {result['stream_bytes']:,} bytes; "
        "answer deltas equal the naive rendering at every chunk size"
    )
    return finish(console, args.out, result, result["targets_met"])


if __name__ == "__main__":
    raise SystemExit(main())
