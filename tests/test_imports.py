"""The import graph of src/gpubw: no circles (imports inside functions count), and the edges
of docs/architecture.md's table: every module in a listed package, every import between
packages an edge of the table (and every edge used), every edge to a lower layer, the rules
inside a package kept, the page's drawing made from the same table."""

from __future__ import annotations

import ast
import functools
import re
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


# -- the layer table (docs/architecture.md) -------------------------------------------------

ARCHITECTURE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
#: a row of the layer table: | layer | `package` | may import | its job |
_ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*`([\w.]+)`\s*\|([^|]*)\|\s*(.+?)\s*\|\s*$")
#: a row of the table "Inside a package": | `module` | `never imports` | why |
_WITHIN_ROW = re.compile(r"^\|\s*`([\w.]+)`\s*\|\s*`([\w.]+)`\s*\|")
DRAWING_START = (
    "<!-- the drawing: made from the table by `python tests/test_imports.py --write` -->"
)
DRAWING_END = "<!-- end of the drawing -->"


@functools.cache
def layer_table() -> dict[str, tuple[int, str]]:
    """Package (or top-level module) -> (layer, job), from docs/architecture.md's table."""
    rows = {}
    for line in ARCHITECTURE.read_text(encoding="utf-8").splitlines():
        found = _ROW.match(line)
        if found:
            rows[found[2]] = (int(found[1]), found[4])
    return rows


@functools.cache
def edge_table() -> dict[str, frozenset[str]]:
    """Package -> the packages it may import (the column "may import"; ``model`` stands for
    ``gpubw.model``, a dash for none)."""
    rows = {}
    for line in ARCHITECTURE.read_text(encoding="utf-8").splitlines():
        found = _ROW.match(line)
        if found:
            names = re.findall(r"`([\w.]+)`", found[3])
            rows[found[2]] = frozenset(n if n == "gpubw" else f"gpubw.{n}" for n in names)
    return rows


def package_edges(
    graph: dict[str, set[str]], table: dict[str, tuple[int, str]]
) -> dict[str, dict[str, str]]:
    """Package -> each package it imports -> one import that makes the edge (for messages)."""
    edges: dict[str, dict[str, str]] = {}
    for module, targets in sorted(graph.items()):
        own = package_of(module, table)
        for target in sorted(targets):
            theirs = package_of(target, table)
            if own is not None and theirs is not None and theirs != own:
                edges.setdefault(own, {}).setdefault(theirs, f"{module} imports {target}")
    return edges


def edge_violations(
    graph: dict[str, set[str]],
    table: dict[str, tuple[int, str]],
    allowed: dict[str, frozenset[str]],
) -> list[str]:
    """Every import between packages that is not an edge of the table, and every edge of the
    table that no import uses."""
    used = package_edges(graph, table)
    bad = [
        f"{why}: {theirs} is not in {own}'s 'may import'"
        for own, targets in sorted(used.items())
        for theirs, why in sorted(targets.items())
        if theirs not in allowed.get(own, frozenset())
    ]
    bad += [
        f"{own} may import {theirs}, but no module of it does: take it out of the table"
        for own, names in sorted(allowed.items())
        for theirs in sorted(names)
        if theirs not in used.get(own, {})
    ]
    return bad


def package_of(module: str, table: dict[str, tuple[int, str]]) -> str | None:
    """The table's package that ``module`` belongs to (the longest prefix; the row ``gpubw``
    is the package's own ``__init__`` only), or None."""
    best = None
    for package in table:
        inside = module.startswith(package + ".") and package != "gpubw"
        if (module == package or inside) and (best is None or len(package) > len(best)):
            best = package
    return best


def layer_violations(graph: dict[str, set[str]], table: dict[str, tuple[int, str]]) -> list[str]:
    """Every import of a module from its own layer's other packages or a higher layer."""
    bad = []
    for module, targets in sorted(graph.items()):
        own = package_of(module, table)
        for target in sorted(targets):
            theirs = package_of(target, table)
            if own is None or theirs is None or theirs == own:
                continue
            if table[theirs][0] >= table[own][0]:
                bad.append(f"{module} (layer {table[own][0]}) imports {target} "
                           f"(layer {table[theirs][0]})")  # fmt: skip
    return bad


def test_every_module_belongs_to_a_package_of_the_table() -> None:
    """Each module of src/gpubw is in a package (or is a module) the layer table lists."""
    table = layer_table()
    assert len(table) >= 15
    orphans = sorted(m for m in import_graph() if package_of(m, table) is None)
    assert orphans == []


def test_every_package_of_the_table_exists() -> None:
    """No row of the table names a package that is not there."""
    modules = _modules()
    missing = [p for p in layer_table() if not any(_under(m, p) for m in modules)]
    assert missing == []


def test_no_module_imports_its_own_layer_or_above() -> None:
    """A module imports only its own package and packages of lower layers (imports inside
    functions and under TYPE_CHECKING count)."""
    assert layer_violations(import_graph(), layer_table()) == []


def test_every_import_between_packages_is_an_edge_of_the_table() -> None:
    """Imports between packages follow the table's "may import" column exactly: none that
    the column lacks, none of the column unused."""
    assert edge_violations(import_graph(), layer_table(), edge_table()) == []


def test_every_edge_of_the_table_goes_down() -> None:
    """The "may import" column names only packages of lower layers that the table lists."""
    table, edges = layer_table(), edge_table()
    assert set(edges) == set(table)
    bad = sorted(
        f"{own} -> {theirs}"
        for own, names in edges.items()
        for theirs in names
        if theirs not in table or table[theirs][0] >= table[own][0]
    )
    assert bad == []


def test_writers_import_only_the_data_model_and_hardware_facts() -> None:
    """A writer formats: it never reaches the backend, memory or the measurement."""
    assert edge_table()["gpubw.writers"] <= {"gpubw.model", "gpubw.hw"}


def test_the_edge_check_finds_a_missing_and_an_unused_edge() -> None:
    """The checker itself reports an import the table lacks and an edge nothing uses."""
    table = {"gpubw.model": (0, ""), "gpubw.hw": (0, ""), "gpubw.writers": (1, "")}
    graph = {"gpubw.writers.x": {"gpubw.hw.y"}, "gpubw.hw.y": set()}
    allowed = {"gpubw.writers": frozenset({"gpubw.model"})}
    assert edge_violations(graph, table, allowed) == [
        "gpubw.writers.x imports gpubw.hw.y: gpubw.hw is not in gpubw.writers's 'may import'",
        "gpubw.writers may import gpubw.model, but no module of it does: take it out of the table",
    ]


def test_the_layer_check_finds_an_upward_import() -> None:
    """The checker itself reports a planted upward and a same-layer import."""
    table = {"gpubw.model": (0, ""), "gpubw.hw": (1, ""), "gpubw.world": (1, "")}
    graph = {"gpubw.model.x": {"gpubw.hw.y"}, "gpubw.hw.y": {"gpubw.world", "gpubw.model.x"}}
    assert layer_violations(graph, table) == [
        "gpubw.hw.y (layer 1) imports gpubw.world (layer 1)",
        "gpubw.model.x (layer 0) imports gpubw.hw.y (layer 1)",
    ]


@functools.cache
def within_rules() -> list[tuple[str, str]]:
    """(module, what it never imports), from docs/architecture.md's "Inside a package"."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text[text.index("## Inside a package") : text.index("## The drawing")]
    return [(m[1], m[2]) for m in map(_WITHIN_ROW.match, section.splitlines()) if m]


def test_the_rules_inside_packages_are_read() -> None:
    """The doc's "Inside a package" table is found and names modules that exist."""
    rules, modules = within_rules(), _modules()
    assert len(rules) >= 5
    assert [r for r in rules if not any(_under(m, r[0]) for m in modules)] == []


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_within_a_package() -> None:
    """A module inside a package never imports the ones it sits below, even in a function."""
    assert within_violations(import_graph(), within_rules()) == []


def within_violations(graph: dict[str, set[str]], rules: list[tuple[str, str]]) -> list[str]:
    """Every import that breaks a rule (module, what it never imports)."""
    return sorted(
        f"{m} imports {t}"
        for lower, higher in rules
        for m, targets in graph.items()
        if _under(m, lower)
        for t in targets
        if _under(t, higher) and not _under(t, lower)
    )


def test_the_within_check_finds_a_broken_rule() -> None:
    """The checker itself reports a planted import against a rule, in a submodule too."""
    graph = {"p.low.x": {"p.high"}, "p.low": {"p.other"}, "p.high": {"p.low"}}
    assert within_violations(graph, [("p.low", "p.high")]) == ["p.low.x imports p.high"]


def test_only_the_mpi_world_imports_mpi4py() -> None:
    """mpi4py is imported by gpubw.world.mpi alone (a run without a launcher never loads it)."""
    users = sorted(
        m
        for m, path in _modules().items()
        if re.search(r"^\s*(from|import) mpi4py", path.read_text(encoding="utf-8"), re.M)
    )
    assert users == ["gpubw.world.mpi"]


# -- the drawing ----------------------------------------------------------------------------

_WIDTH = 92


def drawing(table: dict[str, tuple[int, str]]) -> str:
    """The boxes of docs/architecture.md: one per layer, the highest first, each package with
    its job (wrapped), made from the table alone."""
    layers: dict[int, list[str]] = {}
    for package, (layer, _job) in table.items():
        layers.setdefault(layer, []).append(package)
    name_width = max(len(p) for p in table) + 5  # "12 " + the name + two spaces
    text_width = _WIDTH - 4 - name_width
    edge = "─" * (_WIDTH - 2)
    lines = ["```", f"┌{edge}┐"]
    for i, layer in enumerate(sorted(layers, reverse=True)):
        if i:
            lines.append(f"├{edge}┤")
        for package in layers[layer]:
            words = table[package][1].replace("`", "").split()
            chunks, line = [], ""
            for word in words:
                if line and len(line) + 1 + len(word) > text_width:
                    chunks.append(line)
                    line = word
                else:
                    line = f"{line} {word}" if line else word
            chunks.append(line)
            for j, chunk in enumerate(chunks):
                name = f"{layer:>2} {package}" if j == 0 else ""
                lines.append(f"│ {name:<{name_width}}{chunk:<{text_width}} │")
    lines += [f"└{edge}┘", "```"]
    return "\n".join(lines)


def _drawn(text: str) -> str:
    start = text.index(DRAWING_START) + len(DRAWING_START)
    return text[start : text.index(DRAWING_END)].strip("\n")


def test_the_drawing_is_made_from_the_table() -> None:
    """docs/architecture.md's drawing is what the table gives (run
    ``python tests/test_imports.py --write`` after changing the table)."""
    assert _drawn(ARCHITECTURE.read_text(encoding="utf-8")) == drawing(layer_table())


if __name__ == "__main__":  # python tests/test_imports.py --write: redraw the drawing
    import sys

    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_imports.py --write")
    text = ARCHITECTURE.read_text(encoding="utf-8")
    start = text.index(DRAWING_START) + len(DRAWING_START)
    end = text.index(DRAWING_END)
    new = f"{text[:start]}\n{drawing(layer_table())}\n{text[end:]}"
    ARCHITECTURE.write_text(new, encoding="utf-8")


def test_every_package_below_the_runner_is_strictly_typed() -> None:
    """mypy's strict flags (pyproject.toml) cover every package of the table below
    gpubw.runner, whole (issue 19)."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11's")
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    overrides = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["mypy"]["overrides"]
    strict = {m for o in overrides if o.get("disallow_any_generics") for m in o["module"]}
    table = layer_table()
    below = {name for name, (layer, _) in table.items() if layer < table["gpubw.runner"][0]}
    missing = sorted(
        n for n in below if n not in strict or (n != "gpubw.version" and f"{n}.*" not in strict)
    )
    assert missing == []
