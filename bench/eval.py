"""Answer quality of the offline model: the shipped eval cases, scored as ``actline eval`` does.

Runs ``examples/eval/kb.jsonl`` (cases over ``examples/kb``) with the ExtractiveModel on an
in-process node behind an embedded nats-server, and writes the per-case figures and the
aggregate score (``actline.eval_cases``) to ``bench/results/eval.json``.
A change to the offline model, the render or the tools that changes what the model finds or
how many tokens it spends shows up here as a score. Nothing is timed and no target is
enforced: the score is a measurement to compare between commits.

    python -m bench eval
    python -m bench.eval [--cases examples/eval/kb.jsonl] [--limit N] [--profile NAME]
        [--out bench/results/eval.json]
"""

from __future__ import annotations

import asyncio
import os
import platform
import time
from pathlib import Path

from rich.console import Console

from actline.cli.evaluate import evaluate
from actline.config import Config
from actline.eval_cases import WEIGHTS, load_cases
from actline.tools.embeddings.embedders import default_embedder
from bench.harness import add_counts, finish, parser

ROOT = Path(__file__).parents[1]
CASES = ROOT / "examples" / "eval" / "kb.jsonl"
KB = ROOT / "examples" / "kb"
MODEL = "extractive"


def main(argv: list[str] | None = None) -> int:
    cli = parser("eval", __doc__)
    cli.add_argument("--cases", type=Path, default=CASES, help="the case file (JSONL)")
    add_counts(cli, limit="only the first N cases")
    cli.add_argument("--profile", default=None, help="the turns' profile (default: the node's)")
    args = cli.parse_args(argv)
    console = Console()
    cases = load_cases(args.cases)[: args.limit]
    config = Config.load(None, env={}, model=MODEL, knowledge_dir=KB)
    started = time.perf_counter()
    report = asyncio.run(
        evaluate(
            console,
            config,
            cases,
            profile=args.profile,
            timeout=120.0,
            home=None,
            cases_file=os.path.relpath(args.cases.resolve(), ROOT),
        )
    )
    report = {
        "benchmark": "eval",
        "python": platform.python_version(),
        "seconds": round(time.perf_counter() - started, 1),
        "weights": WEIGHTS,
        "embeddings": "on" if default_embedder() is not None else "off (BM25 memsearch)",
        **report,
    }
    return finish(console, args.out, report)


if __name__ == "__main__":
    raise SystemExit(main())
