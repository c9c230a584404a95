"""The import graph of the project's modules, for the architecture tests.

``project_modules`` finds the modules of the installed packages and names them as they install;
``imports_of`` reads every import of one module (at module level, deferred inside a function, and
under ``if TYPE_CHECKING:``) as ``Import`` edges; ``top`` names the layer of a module or an
imported name; ``cycles`` finds the strongly connected components of the graph.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from actline import _layout

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = tuple(sorted(_layout.FOLDERS))
"""The repository's top-level folders that install as ``actline.<folder>``."""
PACKAGES = ("actline", *FOLDERS)
"""The layers: ``actline`` is the facade (``actline/`` less the mapped folders)."""


@dataclass(frozen=True, slots=True)
class Import:
    """One edge of the graph: ``source`` imports ``target`` (a module or a package)."""

    source: str
    target: str
    line: int
    how: str
    """``module`` (top level), ``deferred`` (inside a function) or ``type_checking``."""

    def __str__(self) -> str:
        return f"{self.source}:{self.line} -> {self.target} ({self.how})"


def module_name(path: Path, root: Path) -> str:
    """The name a module installs under: ``actors/turn/decision.py`` is
    ``actline.actors.turn.decision``, ``actline/cli/main.py`` is ``actline.cli.main``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    if parts[0] in FOLDERS:
        parts.insert(0, "actline")
    return ".".join(parts)


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                found[module_name(path, root)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Collector(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool, known: set[str]) -> None:
        self.module = module
        self.package = module.split(".") if is_package else module.split(".")[:-1]
        self.known = known
        self.context: list[str] = []
        self.found: list[Import] = []

    def _how(self) -> str:
        if "type_checking" in self.context:
            return "type_checking"
        return "deferred" if "function" in self.context else "module"

    def _add(self, target: str, node: ast.stmt) -> None:
        self.found.append(Import(self.module, target, node.lineno, self._how()))

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self.context.append("type_checking")
            for child in node.body:
                self.visit(child)
            self.context.pop()
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        self.context.append("function")
        self.generic_visit(node)
        self.context.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function
    visit_Lambda = _function

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package[: len(self.package) - node.level + 1]
            prefix = ".".join([*base, *([node.module] if node.module else [])])
        else:
            prefix = node.module or ""
        for alias in node.names:
            candidate = f"{prefix}.{alias.name}"
            self._add(candidate if candidate in self.known else prefix, node)


def imports_of(source: str, module: str, *, is_package: bool, known: set[str]) -> list[Import]:
    """Every import in ``source`` (the text of ``module``), relative ones made absolute; a
    ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``."""
    collector = _Collector(module, is_package, known)
    collector.visit(ast.parse(source))
    return collector.found


def top(name: str) -> str:
    """The layer of a module or an imported name: one of ``PACKAGES`` for the project's
    (``actline.actors.turn.state`` -> ``actors``, ``actline.cli.main`` -> ``actline``),
    else the first part (``nats.errors`` -> ``nats``)."""
    parts = name.split(".")
    if parts[0] != "actline":
        return parts[0]
    return parts[1] if len(parts) > 1 and parts[1] in FOLDERS else "actline"


def cycles(edges: list[Import], modules: set[str]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    succ: dict[str, set[str]] = defaultdict(set)
    for e in edges:
        if e.target in modules and e.target != e.source:
            succ[e.source].add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(modules):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(succ[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(succ[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)
