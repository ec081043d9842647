"""The import graph of src/gpubw: no circles (imports inside functions count) and the layer
rules of docs/architecture.md."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "gpubw"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest known module that ``name`` (a module or a name in one) refers to."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every gpubw module ``module`` imports, at any depth of its code (functions too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from pkg import sub`` is an edge to the submodule; ``from mod import name``
            # an edge to the module
            names = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            ]
        for name in names:
            if name.split(".")[0] != "gpubw":
                continue
            target = _resolve(name, modules)
            if target is not None and target != module:
                found.add(target)
    return found


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Module → the gpubw modules it imports."""
    modules = _modules()
    return {m: _imports(m, p, modules) for m, p in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles() -> None:
    """No two gpubw modules import each other, directly or through others."""
    cycles = _cycles(import_graph())
    assert cycles == [], "import circles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The checker itself reports a planted circle (so the test above can fail)."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


#: layer rules (docs/architecture.md): a module matching the left may not import the right
FORBIDDEN = [
    ("gpubw.buffers", "gpubw.system"),
    ("gpubw.backend", "gpubw.system"),
    ("gpubw.backend", "gpubw.runner"),
    ("gpubw.backend", "gpubw.cli"),
    ("gpubw.writers", "gpubw.runner"),
    ("gpubw.writers", "gpubw.cli"),
    ("gpubw.runner", "gpubw.writers"),
    ("gpubw.runner", "gpubw.cli"),
    ("gpubw.results", "gpubw.writers"),
    ("gpubw.testcases", "gpubw.runner"),
    ("gpubw.testcases", "gpubw.cli"),
    ("gpubw.measurement", "gpubw.runner"),
    ("gpubw.report_io", "gpubw.writers"),
    ("gpubw.report_io", "gpubw.runner"),
    ("gpubw.world", "gpubw.system"),
    ("gpubw.world", "gpubw.backend"),
    ("gpubw.world", "gpubw.runner"),
    ("gpubw.backend", "gpubw.buffers"),
    ("gpubw.backend", "gpubw.gate"),
    ("gpubw.backend", "gpubw.shared"),
    ("gpubw.backend", "gpubw.ranks"),
    ("gpubw.shared", "gpubw.system"),
    ("gpubw.measurement", "gpubw.ranks"),
    ("gpubw.rank_gate", "gpubw.runner"),
    ("gpubw.rank_gate", "gpubw.ranks"),
    ("gpubw.rank_gate", "gpubw.measurement"),
    ("gpubw.kernels", "gpubw.backend"),
    ("gpubw.kernels", "gpubw.buffers"),
    ("gpubw.patterns", "gpubw.backend"),
    ("gpubw.patterns", "gpubw.buffers"),
    ("gpubw.nvml", "gpubw.backend"),
    ("gpubw.nvml_read", "gpubw.backend"),
    ("gpubw.launch_env", "gpubw"),
]


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


@pytest.mark.parametrize(("lower", "higher"), FORBIDDEN)
def test_layer_rule(lower: str, higher: str) -> None:
    """A lower layer never imports a higher one, even inside a function."""
    graph = import_graph()
    bad = sorted(
        f"{m} imports {t}"
        for m, targets in graph.items()
        if _under(m, lower)
        for t in targets
        if _under(t, higher)
    )
    assert bad == []
