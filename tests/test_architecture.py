"""The shape of the code, from its import graph (DESIGN.md §1, CONVENTIONS 1-4).

Every ``import`` and ``from … import`` of the top-level packages counts: at module
level, deferred inside a function, and under ``if TYPE_CHECKING:`` (a cycle or a wrong
dependency is a wrong dependency even when only the type checker follows it). Tests,
``bench/`` and ``examples/`` are not scanned. Imports by name at run time
(``importlib.import_module``) cannot be seen here.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "actline",
    "actors",
    "bus",
    "channels",
    "llm",
    "messages",
    "storage",
    "timeline",
    "tools",
)

ALLOWED: dict[str, frozenset[str]] = {
    "actline": frozenset(
        {"actors", "tools", "llm", "channels", "timeline", "storage", "bus", "messages"}
    ),
    "actors": frozenset({"tools", "llm", "channels", "timeline", "storage", "bus", "messages"}),
    "tools": frozenset({"storage", "timeline", "messages"}),
    "llm": frozenset({"channels", "timeline", "messages"}),
    "storage": frozenset({"timeline", "messages"}),
    "bus": frozenset({"messages"}),
    "timeline": frozenset({"messages"}),
    "channels": frozenset({"messages"}),
    "messages": frozenset(),
}
"""The packages each package may import, besides itself.

DESIGN.md §1 draws ``actline -> actors -> {tools, llm, channels, timeline, storage, bus}
-> messages``: a package may use any layer below its own. Inside the middle layer DESIGN
names no edge; the code has these, allowed here and kept one way (``NOT_IN_DESIGN``)."""

NOT_IN_DESIGN = frozenset(
    {
        ("tools", "storage"),  # react.* tools and the workspace read and write the store
        ("tools", "timeline"),  # react.* tools read and write the timeline
        ("storage", "timeline"),  # the store persists Timeline snapshots and blocks
        ("llm", "timeline"),  # token counting, the summarizer's compaction
        ("llm", "channels"),  # not used today; a model client may parse the stream protocol
    }
)
PURE = ("timeline", "channels")
"""No I/O and no asyncio (DESIGN.md §1, CONVENTIONS 2)."""
MAX_ACTOR_MODULE_LINES = 500
LONG_ACTOR_MODULES = frozenset({"actors/turn/state.py"})
"""The one exception: the state machine's transition table reads best in one file."""


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
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
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


@pytest.fixture(scope="module")
def graph() -> list[Import]:
    modules = project_modules()
    known = set(modules)
    edges: list[Import] = []
    for name, path in modules.items():
        source = path.read_text(encoding="utf-8")
        edges += imports_of(source, name, is_package=path.name == "__init__.py", known=known)
    return edges


def top(name: str) -> str:
    return name.split(".")[0]


# --- the scanner itself --------------------------------------------------------------------


def test_the_scanner_sees_deferred_type_checking_and_relative_imports() -> None:
    source = "\n".join(
        [
            "from __future__ import annotations",
            "from typing import TYPE_CHECKING",
            "import nats.errors",
            "from . import events as ev",
            "from .base import Actor",
            "from ..storage import Store",
            "if TYPE_CHECKING:",
            "    from bus import Bus",
            "else:",
            "    import json",
            "def f():",
            "    from timeline import Block",
            "    return Block",
            "class C:",
            "    async def g(self):",
            "        import actline.cli.main",
        ]
    )
    known = {
        "actors",
        "actline.actors.turn.events",
        "actline.actors.base",
        "storage",
        "bus",
        "timeline",
        "actline",
    }
    found = imports_of(source, "actline.actors.turn.decision", is_package=False, known=known)
    got = {(i.target, i.how) for i in found}
    assert got == {
        ("__future__", "module"),
        ("typing", "module"),
        ("nats.errors", "module"),
        ("actline.actors.turn.events", "module"),
        ("actline.actors.base", "module"),
        ("storage", "module"),
        ("bus", "type_checking"),
        ("json", "module"),
        ("timeline", "deferred"),
        ("actline.cli.main", "deferred"),
    }
    in_package = imports_of("from . import x", "actors", is_package=True, known={"actors"})
    assert [i.target for i in in_package] == ["actors"]


def test_the_scan_covers_every_package_and_the_big_modules(graph: list[Import]) -> None:
    modules = project_modules()
    assert {top(m) for m in modules} == set(PACKAGES)
    for must in (
        "actline.actors.conversation.actor",
        "actline.actors.turn.decision",
        "actline.storage.committer",
        "actline.bus.bus",
    ):
        assert must in modules
    assert {i.source for i in graph} >= {
        "actline.actors.conversation.actor",
        "timeline",
        "actline.bus.bus",
    }


def test_the_allowed_table_points_one_way() -> None:
    assert set(ALLOWED) == set(PACKAGES)
    for a, b in NOT_IN_DESIGN:
        assert b in ALLOWED[a]
    order: list[str] = []
    pending = dict(ALLOWED)
    while pending:
        ready = [p for p, below in pending.items() if below <= set(order)]
        assert ready, f"the allowed table has a cycle among {sorted(pending)}"
        order += sorted(ready)
        for p in ready:
            del pending[p]


# --- (a) dependencies point one way ----------------------------------------------------


def test_every_package_imports_only_packages_below_it(graph: list[Import]) -> None:
    wrong = [
        str(i)
        for i in graph
        if top(i.target) in PACKAGES
        and top(i.target) != top(i.source)
        and top(i.target) not in ALLOWED[top(i.source)]
    ]
    assert not wrong, "imports against DESIGN.md §1:\n" + "\n".join(wrong)


def test_every_allowed_middle_layer_edge_not_in_design_is_listed(graph: list[Import]) -> None:
    """An edge inside the middle layer that the code grows must be named here, on purpose."""
    middle = {"tools", "llm", "channels", "timeline", "storage", "bus"}
    used = {
        (top(i.source), top(i.target))
        for i in graph
        if top(i.source) in middle and top(i.target) in middle and top(i.source) != top(i.target)
    }
    assert used <= NOT_IN_DESIGN


@pytest.mark.parametrize("package", PURE)
def test_the_pure_packages_import_no_io_package_and_no_asyncio(
    graph: list[Import], package: str
) -> None:
    banned = {"bus", "storage", "actors", "actline", "tools", "llm", "asyncio", "nats"}
    wrong = [str(i) for i in graph if top(i.source) == package and top(i.target) in banned]
    assert not wrong, "\n".join(wrong)


def test_messages_imports_none_of_the_other_packages(graph: list[Import]) -> None:
    others = set(PACKAGES) - {"messages"}
    wrong = [str(i) for i in graph if top(i.source) == "messages" and top(i.target) in others]
    assert not wrong, "\n".join(wrong)


def test_nothing_but_actline_imports_actline(graph: list[Import]) -> None:
    wrong = [str(i) for i in graph if top(i.target) == "actline" and top(i.source) != "actline"]
    assert not wrong, "\n".join(wrong)


# --- (b) no cycles -----------------------------------------------------------------------------


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


def test_the_cycle_finder_finds_a_cycle_through_a_deferred_import() -> None:
    edges = [
        Import("a", "b", 1, "module"),
        Import("b", "c", 1, "module"),
        Import("c", "a", 9, "deferred"),
        Import("c", "d", 1, "module"),
    ]
    assert cycles(edges, {"a", "b", "c", "d"}) == [["a", "b", "c"]]
    assert cycles(edges[:2], {"a", "b", "c"}) == []


def test_there_are_no_import_cycles_between_modules(graph: list[Import]) -> None:
    modules = set(project_modules())
    found = cycles(graph, modules)
    lines = []
    for component in found:
        members = set(component)
        lines += [str(i) for i in graph if i.source in members and i.target in members]
    lines = list(dict.fromkeys(lines))  # one line per import statement
    assert not found, "import cycles:\n" + "\n".join(lines)


# --- (c) NATS only through bus/ -----------------------------------------------------------


def test_nats_is_imported_only_under_bus(graph: list[Import]) -> None:
    users = {top(i.source) for i in graph if top(i.target) == "nats"}
    assert users == {"bus"}, users


# --- (d) small modules in actors/ ------------------------------------------------------------


def test_no_module_in_actors_is_over_500_lines_except_the_state_machine() -> None:
    sizes = {
        path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted((ROOT / "actors").rglob("*.py"))
    }
    long = {
        name: lines
        for name, lines in sizes.items()
        if lines > MAX_ACTOR_MODULE_LINES and name not in LONG_ACTOR_MODULES
    }
    assert not long, f"split these by responsibility (CONVENTIONS 1): {long}"
