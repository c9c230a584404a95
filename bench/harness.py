"""The bench harness: what every benchmark shares, so that none keeps a copy of its own.

- The command line. ``parser`` gives every benchmark the same start: ``prog`` ``python -m
  bench NAME``, the docstring's first line as the description (the rest as the epilog),
  ``--out`` (the JSON result, ``bench/results/NAME.json`` by default) and ``--quick`` when
  the benchmark has a quick mode. ``add_sizes`` adds ``--sizes`` (comma-separated counts),
  ``add_counts`` integer options such as ``--rounds``, ``--turns``, ``--samples``,
  ``--repeat`` or ``--conversations`` that default to None, and ``settle`` resolves them:
  a value given on the command line, else the quick mode's value (with ``--quick``), else
  the benchmark's default.
- Timing summaries. ``percentile`` (nearest rank) and ``summary``: count, percentiles,
  minimum, maximum and mean of samples taken in seconds, reported in ``ms``, ``us`` or
  ``s`` (``summary_ms``: p50, p90, min and mean in milliseconds); ``median_ms``.
- Targets. ``judge`` sets each target's ``met`` from its ``maximum`` or ``minimum``;
  ``verdict`` prints it.
- Output. ``new_table`` (a rich table, numbers right-aligned), ``ms`` and ``times`` (figures
  for its cells), ``checked`` (a run whose own correctness check failed prints why, and the
  benchmark exits 1), ``write_result`` and ``finish`` (the JSON under ``bench/results/``, and
  exit status 1 when a target is missed), ``platform_info``.
- Synthetic data and comparisons: ``WORDS``, ``TOOLS``, ``corpus``, ``SanityCheckFailed``,
  ``compare_module``.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import platform
import random
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.table import Table

RESULTS = Path(__file__).parent / "results"
COMPARE_HINT = "pip install 'actline[compare]'"
"""How to install the libraries a benchmark compares actline with (not in the test install)."""

WORDS = (
    "the a of to in for with by from as that this which when after before service request "
    "reply cache token prompt timeline block render round result query source file config "
    "deploy version update change value field record index error retry latency budget plan "
    "step check build test read write search fetch parse returns keeps sends shows finds "
    "quickly only always never again first last every other same new old user model tool"
).split()
TOOLS = ("web_search", "react.read", "exec_python", "fetch_url", "list_files")
SCALE = {"s": 1.0, "ms": 1e3, "us": 1e6}
"""Units of ``summary``: samples are taken in seconds."""

T = TypeVar("T")


class SanityCheckFailed(Exception):
    """A benchmark's own correctness check failed at a size: its numbers mean nothing."""

    def __init__(self, blocks: int, what: str) -> None:
        super().__init__(blocks, what)
        self.blocks = blocks
        self.what = what

    def __str__(self) -> str:
        return f"at {self.blocks:,} blocks: {self.what}"


# -- the command line -----------------------------------------------------------------------------
def parser(
    name: str,
    doc: str | None,
    *,
    results: str | None = "",
    out: bool = True,
    quick: str | None = None,
) -> argparse.ArgumentParser:
    """The parser of benchmark ``name``, described by its docstring ``doc``.

    ``--out`` defaults to ``bench/results/<results>`` (``results`` "": ``NAME.json``; None:
    no default, the benchmark picks the file after parsing, see ``result_path``); ``out``
    False leaves it out (a benchmark that writes no JSON). ``quick``: the help of ``--quick``.
    """
    first, _, rest = (doc or "").strip().partition("\n")
    made = argparse.ArgumentParser(
        prog=f"python -m bench {name}",
        description=first or None,
        epilog=rest.strip() or None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if quick is not None:
        made.add_argument("--quick", action="store_true", help=quick)
    if out:
        default = None if results is None else RESULTS / (results or f"{name}.json")
        where = f"the JSON result (default {default})" if default else "the JSON result"
        made.add_argument("--out", type=Path, default=default, help=where)
    return made


def int_list(text: str) -> list[int]:
    """``"100,1000"`` -> ``[100, 1000]`` (the type of ``--sizes``)."""
    return [int(part) for part in text.split(",") if part.strip()]


def add_sizes(
    made: argparse.ArgumentParser, help: str, default: Sequence[int] | None = None
) -> None:
    """``--sizes``: comma-separated counts (blocks, rows, waiting turns)."""
    made.add_argument(
        "--sizes",
        type=int_list,
        default=None if default is None else list(default),
        help=f"{help}, comma-separated",
    )


def add_counts(made: argparse.ArgumentParser, **counts: str) -> None:
    """Integer options, each with its help (``total_turns="..."`` adds ``--total-turns``),
    defaulting to None so that ``settle`` can tell a value given from a default."""
    for name, help in counts.items():
        made.add_argument(f"--{name.replace('_', '-')}", type=int, default=None, help=help)


def settle(
    args: argparse.Namespace,
    defaults: Mapping[str, Any],
    quick: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Every option of ``defaults``: its value on the command line, else (with ``--quick``)
    its quick value, else its default. Keys of ``quick`` that are no option are kept too."""
    chosen = dict(defaults)
    if quick is not None and getattr(args, "quick", False):
        chosen.update(quick)
    for key in defaults:
        given = getattr(args, key, None)
        if given is not None:
            chosen[key] = given
    return chosen


def result_path(given: Path | None, name: str) -> Path:
    """``--out`` if given, else ``bench/results/<name>``."""
    return given if given is not None else RESULTS / name


# -- timing summaries -----------------------------------------------------------------------------
def percentile(samples: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of ``samples`` (0 <= q <= 1)."""
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def summary(
    samples: Sequence[float],
    *,
    unit: str = "ms",
    points: Iterable[int] = (50, 90),
    low: bool = True,
    high: bool = False,
    mean: bool = True,
) -> dict[str, Any]:
    """Timings in seconds, summarised in ``unit`` (``ms``, ``us`` or ``s``): ``n``, the
    ``points`` percentiles (``p50_ms``, ...), ``min_`` (``low``), ``max_`` (``high``) and
    ``mean_`` (``mean``). Without samples every figure is None."""
    scale = SCALE[unit]
    out: dict[str, Any] = {"n": len(samples)}
    for point in points:
        out[f"p{point}_{unit}"] = percentile(samples, point / 100) * scale if samples else None
    if low:
        out[f"min_{unit}"] = min(samples) * scale if samples else None
    if high:
        out[f"max_{unit}"] = max(samples) * scale if samples else None
    if mean:
        out[f"mean_{unit}"] = statistics.fmean(samples) * scale if samples else None
    return out


def summary_ms(samples: Sequence[float]) -> dict[str, Any]:
    """Count, p50, p90, min and mean of timings in seconds, reported in milliseconds."""
    return summary(samples)


def median_ms(samples: Sequence[float]) -> float:
    """The median of timings in seconds, in milliseconds."""
    return float(statistics.median(samples)) * 1e3


# -- targets --------------------------------------------------------------------------------------
def judge(targets: list[dict[str, Any]], *, strict: bool = False) -> list[dict[str, Any]]:
    """Each target with ``met``: its ``value`` at most its ``maximum`` (below it when
    ``strict``), or at least its ``minimum``; a target without a value is missed."""
    for target in targets:
        value = target["value"]
        if value is None:
            target["met"] = False
        elif "maximum" in target:
            bound = target["maximum"]
            target["met"] = value < bound if strict else value <= bound
        else:
            target["met"] = value >= target["minimum"]
    return targets


def verdict(met: bool | None) -> str:
    """A target's verdict for a table cell (None: not judged)."""
    if met is None:
        return "[yellow]not judged[/]"
    return "[green]met[/]" if met else "[red]missed[/]"


# -- output ---------------------------------------------------------------------------------------
def new_table(
    title: str, columns: Iterable[str], *, left: Iterable[str] = (), caption: str | None = None
) -> Table:
    """A rich table with ``columns``, right-aligned but for those in ``left``."""
    out = Table(title=title, caption=caption)
    lefts = set(left)
    for column in columns:
        out.add_column(column, justify="left" if column in lefts else "right")
    return out


def ms(value: float | None, *, unit: bool = False, missing: str = "-") -> str:
    """Milliseconds with three significant-ish digits (``0.123``, ``1.23``, ``12.3``)."""
    if value is None:
        return missing
    text = f"{value:.1f}" if value >= 10 else f"{value:.2f}" if value >= 1 else f"{value:.3f}"
    return f"{text} ms" if unit else text


def times(value: float | None, digits: int = 2, *, missing: str = "-") -> str:
    """A ratio as ``1.23x``."""
    return missing if value is None else f"{value:.{digits}f}x"


def checked(console: Console, run: Callable[[], T], *errors: type[Exception]) -> T | None:
    """``run()``; None after saying why when its sanity check (``SanityCheckFailed`` or one of
    ``errors``) failed: its numbers mean nothing, and the benchmark exits 1."""
    caught: tuple[type[Exception], ...] = (SanityCheckFailed, *errors)
    try:
        return run()
    except caught as exc:
        console.print(f"[red]sanity check failed:[/] {exc}")
        return None


def write_result(console: Console, out: Path, result: dict[str, Any]) -> None:
    """Write a benchmark's JSON result and say where."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {out}")


def finish(console: Console, out: Path, result: dict[str, Any], met: bool = True) -> int:
    """Write the JSON result; the exit status: 0, or 1 when a target was missed."""
    write_result(console, out, result)
    return 0 if met else 1


def platform_info() -> dict[str, str]:
    """The Python version and the machine, for a result's JSON."""
    return {"python": platform.python_version(), "machine": platform.machine()}


# -- synthetic data and comparison libraries ------------------------------------------------------
@functools.cache
def corpus(seed: int) -> str:
    """About 400 KB of word salad that synthetic block texts are sliced from."""
    rng = random.Random(seed)
    return "\n".join(" ".join(rng.choices(WORDS, k=rng.randint(4, 16))) for _ in range(6_000))


def compare_module(benchmark: str, name: str) -> Any:
    """A comparison-only library, or an exit that names ``benchmark`` and how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise SystemExit(f"{benchmark}: {name} is missing: {COMPARE_HINT}") from exc
