"""No import circle between orch's modules (module-level imports; TYPE_CHECKING blocks and imports
inside functions do not run at import time). The CLI's commands register themselves on the app in
cli/__init__, a circle inside that package by design, which nothing else imports."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import ROOT


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    modules = {_name(p): p for p in (ROOT / "orchestrator").rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for me, path in modules.items():
        for stmt in ast.parse(path.read_text(), str(path)).body:
            if isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test):
                continue
            if not isinstance(stmt, ast.Import | ast.ImportFrom):
                continue
            if isinstance(stmt, ast.ImportFrom):
                if stmt.level or not stmt.module:
                    continue
                targets = [stmt.module, *(f"{stmt.module}.{a.name}" for a in stmt.names)]
            else:
                targets = [a.name for a in stmt.names]
            graph[me].update(t for t in targets if t in modules and t != me)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_outside_the_cli() -> None:
    circles = [c for c in cycles(import_graph()) if not all(m.startswith("orchestrator.cli") for m in c)]
    assert circles == []


def test_the_check_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
