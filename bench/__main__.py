"""``python -m bench [NAME ...]`` runs the named benchmarks (all by default);
``python -m bench NAME [OPTIONS]`` runs one with its options (``--help`` lists them)."""

from __future__ import annotations

import importlib
import itertools
import sys

BENCHMARKS = {
    "cluster": "bench.cluster",
    "eval": "bench.eval",
    "bus": "bench.bus",
    "cache": "bench.cache",
    "channels": "bench.channels",
    "console_list": "bench.console_list",
    "conversations": "bench.storage.manage",
    "longrun": "bench.longrun",
    "loop": "bench.loop",
    "loop_split": "bench.loop.split",
    "memsearch": "bench.memsearch",
    "render": "bench.render",
    "resume": "bench.resume",
    "start_together": "bench.cluster.start_together",
    "storage": "bench.storage",
    "trace_overhead": "bench.loop.trace_overhead",
    "waiting": "bench.waiting",
}
"""Name -> module of every benchmark ``python -m bench`` runs."""
COMPARE = {
    "langgraph_side": "bench.loop.langgraph_side",
    "memsearch_libs": "bench.memsearch_libs",
}
"""Benchmarks against comparison-only libraries (``pip install 'actline[compare]'``): run
only when named."""


def main(argv: list[str]) -> int:
    names = list(itertools.takewhile(lambda arg: not arg.startswith("-"), argv))
    options = argv[len(names) :]
    if options and len(names) != 1:
        print("options go to one benchmark: python -m bench NAME [OPTIONS]")
        return 2
    known = BENCHMARKS | COMPARE
    names = names or list(BENCHMARKS)
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; choose from {', '.join(known)}")
        return 2
    status = 0
    for name in names:
        module = importlib.import_module(known[name])
        status = max(status, int(module.main(options)))
    return status


raise SystemExit(main(sys.argv[1:]))
