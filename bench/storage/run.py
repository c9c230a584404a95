"""The storage benchmark's run over every size, its targets and its command line (the
package's docstring says what it measures)."""

from __future__ import annotations

import gc
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lmdb
from rich.console import Console
from rich.progress import Progress

from actline.storage import Store
from actline.storage.layout import pack
from bench.harness import (
    add_counts,
    add_sizes,
    checked,
    finish,
    judge,
    ms,
    parser,
    platform_info,
    settle,
    summary_ms,
)
from bench.storage.conversation import SEED, TURN_BLOCKS
from bench.storage.persist import (
    LOAD_BLOCKS,
    LOAD_RUNS,
    NAIVE_BUDGET_S,
    PREFILL_CHUNK,
    Case,
    _p50,
    _ratio,
    check_rolled_back,
    measure_load,
    naive_samples,
    prepare,
    sample_nosync,
    sample_sync,
)
from bench.storage.pool import POOL_TURNS, growing_pool
from bench.storage.report import pool_table, table

SIZES = (100, 10_000, 100_000)
SAMPLES = 40
TARGET_FLATNESS = 1.5
TARGET_RATIO = 50.0
RATIO_BLOCKS = 10_000


def _store_bytes(store: Store) -> int:
    return int(store.env.stat()["psize"]) * (int(store.env.info()["last_pgno"]) + 1)


def run(
    sizes: Sequence[int] = SIZES,
    samples: int = SAMPLES,
    *,
    nosync: bool = True,
    naive_budget: float = NAIVE_BUDGET_S,
    load_runs: int = LOAD_RUNS,
    pool_turns: int = POOL_TURNS,
) -> dict[str, Any]:
    """Measure every size (see the module docstring); targets at the largest and ~10,000.

    ``pool_turns`` > 0 also runs the growing-pool case (``growing_pool``).
    """
    started = time.perf_counter()
    sizes = sorted(set(sizes))
    samples = max(1, samples)
    load_size = max((s for s in sizes if s <= LOAD_BLOCKS), default=sizes[0])
    ratio_size = max((s for s in sizes if s <= RATIO_BLOCKS), default=sizes[0])
    cases: list[Case] = []
    load: dict[str, Any] = {}
    with (
        tempfile.TemporaryDirectory(prefix="actline-bench-storage-") as tmp,
        Progress(transient=True) as progress,
    ):
        try:
            task = progress.add_task("building", total=len(sizes))
            built = time.perf_counter()
            for blocks in sizes:
                progress.update(task, description=f"building and storing {blocks:,} blocks")
                root = Path(tmp) / f"n{blocks}"
                root.mkdir()
                cases.append(prepare(blocks, root))
                progress.advance(task)
            build_seconds = time.perf_counter() - built
            gc.collect()
            gc.freeze()
            naive_n = {c.blocks: naive_samples(c.blocks, samples) for c in cases}
            task = progress.add_task("persisting (sync=True)", total=samples)
            for i in range(samples):
                for case in cases:
                    sample_sync(case, i, naive_n[case.blocks], naive_budget)
                progress.advance(task)
            for case in cases:
                check_rolled_back(case, count=True)
            load_case = next(c for c in cases if c.blocks == load_size)
            load = measure_load(load_case, max(1, load_runs))
            if nosync:
                for case in cases:
                    case.close()
                    case.open(sync=False)
                task = progress.add_task("persisting (sync=False)", total=samples)
                for _ in range(samples):
                    for case in cases:
                        sample_nosync(case)
                    progress.advance(task)
                for case in cases:
                    check_rolled_back(case)
            rows = [_row(case, naive_n[case.blocks]) for case in cases]
        finally:
            for case in cases:
                case.close()
            gc.unfreeze()
        pool: dict[str, Any] | None = None
        if pool_turns > 0:
            progress.add_task(f"growing pool: {pool_turns:,} turns", total=None)
            pool = growing_pool(Path(tmp), pool_turns, samples)
    base = rows[0]
    for row in rows:
        for kind in ("lmdb", "lmdb_fixed", "persist", "nosync"):
            if row[kind] is not None:
                row[f"{kind}_flatness"] = row[kind]["p50_ms"] / base[kind]["p50_ms"]
            else:
                row[f"{kind}_flatness"] = None
    top = rows[-1]
    at_ratio = next(r for r in rows if r["blocks"] == ratio_size)
    targets: list[dict[str, Any]] = [
        {
            "blocks": top["blocks"],
            "against_blocks": base["blocks"],
            "figure": "lmdb_flatness",
            "maximum": TARGET_FLATNESS,
            "value": top["lmdb_flatness"],
        },
        {
            "blocks": at_ratio["blocks"],
            "figure": "ratio_naive_to_lmdb",
            "minimum": TARGET_RATIO,
            "value": at_ratio["ratio_naive_to_lmdb"],
        },
    ]
    judge(targets)
    return {
        "benchmark": "storage.persist_turn",
        "seed": SEED,
        "turn_blocks": TURN_BLOCKS,
        "samples": samples,
        "sync": True,
        "prefill_chunk": PREFILL_CHUNK,
        "sizes": rows,
        "load": load,
        "targets": targets,
        "targets_met": all(t["met"] for t in targets),
        "growing_pool": pool,
        "build_seconds": build_seconds,
        "seconds": time.perf_counter() - started,
        **platform_info(),
        "lmdb": lmdb.version(),
    }


def _row(case: Case, naive_n: int) -> dict[str, Any]:
    lmdb_p50 = _p50(case.lmdb)
    naive_p50 = None if case.naive_skipped else _p50(case.naive)
    return {
        "blocks": case.blocks,
        "turns": len(case.tl.turn_ids()) - 1,
        "header_bytes": len(pack(case.snapshot)),
        "fixed_header_bytes": len(pack(case.fixed)),
        "turn_bytes": sum(len(pack(b.to_dict())) for b in case.turn),
        "store_bytes": _store_bytes(case.opened),
        "naive_bytes": case.naive_bytes,
        "prefill_seconds": case.prefill_seconds,
        "lmdb": summary_ms(case.lmdb),
        "lmdb_fixed": summary_ms(case.lmdb_fixed),
        "persist": summary_ms(case.persist),
        "naive": None if case.naive_skipped or not case.naive else summary_ms(case.naive),
        "naive_planned": naive_n,
        "naive_skipped": case.naive_skipped,
        "nosync": summary_ms(case.nosync) if case.nosync else None,
        "ratio_naive_to_lmdb": _ratio(naive_p50, lmdb_p50),
        "ratio_naive_to_lmdb_fixed": _ratio(naive_p50, _p50(case.lmdb_fixed)),
        "ratio_naive_to_persist": _ratio(naive_p50, _p50(case.persist)),
    }


def main(argv: list[str] | None = None) -> int:
    cli = parser("storage", sys.modules[__package__].__doc__)
    add_sizes(cli, "stored blocks before the measured turn (100,10000,100000)")
    add_counts(
        cli,
        samples=f"lmdb samples per size ({SAMPLES})",
        load_runs=f"loads of the largest conversation up to 10,000 blocks ({LOAD_RUNS})",
        pool_turns=f"turns of the growing-pool case, 0 skips it ({POOL_TURNS})",
    )
    cli.add_argument(
        "--naive-budget", type=float, default=NAIVE_BUDGET_S, help="seconds of naive rewrites"
    )
    cli.add_argument("--no-nosync", action="store_true", help="skip the sync=False samples")
    args = cli.parse_args(argv)
    defaults = {
        "sizes": list(SIZES),
        "samples": SAMPLES,
        "load_runs": LOAD_RUNS,
        "pool_turns": POOL_TURNS,
    }
    options = settle(args, defaults)
    console = Console()
    result = checked(
        console,
        lambda: run(
            options["sizes"],
            options["samples"],
            nosync=not args.no_nosync,
            naive_budget=args.naive_budget,
            load_runs=options["load_runs"],
            pool_turns=options["pool_turns"],
        ),
    )
    if result is None:
        return 1
    console.print(table(result))
    pool = result["growing_pool"]
    if pool is not None:
        console.print(pool_table(pool))
    load = result["load"]
    console.print(
        f"load {load['blocks']:,} blocks (boundary_seq 0): Store.load p50 "
        f"{ms(load['load']['p50_ms'])} ms (p90 {ms(load['load']['p90_ms'])}), "
        f"list(iter_blocks) p50 {ms(load['iter_blocks']['p50_ms'])} ms; "
        f"{load['runs']} runs; the loaded blocks equal the stored ones"
    )
    for row in result["sizes"]:
        naive = (
            f"naive {row['naive']['n']} x {row['naive_bytes'] / 1e6:.1f} MB"
            if row["naive"]
            else f"naive skipped: {row['naive_skipped']}"
        )
        console.print(
            f"{row['blocks']:,} blocks ({row['turns']:,} turns): store "
            f"{row['store_bytes'] / 1e6:.1f} MB filled in {row['prefill_seconds']:.1f} s; "
            f"turn {row['turn_bytes'] / 1024:.1f} KB; {naive}"
        )
    console.print(
        f"every sample rolled back; {result['seconds']:.1f} s in all "
        f"({result['build_seconds']:.1f} s building and filling)"
    )
    met = result["targets_met"] and (pool is None or pool["met"])
    return finish(console, args.out, result, met)
