"""``python -m bench [NAME ...]`` runs the named benchmarks (all by default)."""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = [
    "cluster",
    "eval",
    "bus",
    "cache",
    "channels",
    "console_list",
    "longrun",
    "loop",
    "loop_split",
    "memsearch",
    "render",
    "resume",
    "storage",
    "trace_overhead",
    "waiting",
]


def main(argv: list[str]) -> int:
    names = argv or BENCHMARKS
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
        return 2
    status = 0
    for name in names:
        module = importlib.import_module(f"bench.{name}")
        status = max(status, int(module.main([])))
    return status


raise SystemExit(main(sys.argv[1:]))
