"""The package's structure, from its own imports (docs/architecture.md, "Layers"): each layer
imports only the layers below it, the compiler's subpackages import downward in pipeline order,
no module import cycle, no folder with more than 20 modules.

An import counts wherever it is written (at the top of a module or inside a function); one under
`if TYPE_CHECKING:` does not (it never runs). The checks run on the real package and, to show
that they can fail, on a small planted package with an upward import and a cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

from tests.conftest import ROOT, load_script

# Each layer: the package prefixes it owns, and the layers it may import (its own included).
LAYERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "base": (("tessera.base",), ("base",)),
    "front end": (("tessera.frontend", "tessera.grammar"), ("base", "front end")),
    "compiler": (("tessera.transpile", "tessera.templates"), ("base", "front end", "compiler")),
    "runtime": (("tessera.runtime",), ("base", "runtime")),
    "autotuner": (("tessera.autotune",), ("base", "front end", "compiler", "runtime", "autotuner")),
    # The API, the command line and the distributed layer: everything else of the package.
    "top": (("tessera",), ("base", "front end", "compiler", "runtime", "autotuner", "top")),
}

# The compiler's parts in pipeline order: each imports only its own and earlier ones.
COMPILER = (
    ("shared tables", ("tessera.transpile.builtins", "tessera.transpile.consts", "tessera.transpile.const_eval",
                       "tessera.transpile.names")),
    ("lowered IR", ("tessera.transpile.lir",)),
    ("checks", ("tessera.transpile.checks",)),
    ("passes", ("tessera.transpile.passes",)),
    ("C emission", ("tessera.transpile.emit",)),
    ("CPU rendering", ("tessera.transpile.cpu",)),
    ("driver", ("tessera.transpile",)),  # render, pipeline, driver
)

MAX_MODULES_PER_FOLDER = 20


def _typecheck_script():
    return load_script("scripts/typecheck.py", "tessera_typecheck")


def package_modules() -> dict[str, Path]:
    """Module name -> file of every module of the package (pyproject.toml's package-dir mapping)."""
    tc = _typecheck_script()
    return {m: ROOT / p for m, p in tc.module_files(tc.package_dirs(ROOT / "pyproject.toml")).items()}


def imports_of(name: str, path: Path, modules: Mapping[str, Path]) -> set[str]:
    """The package's modules that module `name` imports (see the module docstring)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(x) for stmt in node.body for x in ast.walk(stmt)}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}
    return {m for m in found if m in modules and m != name}


def import_graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def _owner(name: str, parts: Mapping[str, tuple[str, ...]]) -> str:
    """The part whose longest prefix names module `name`."""
    best = max(((p, prefix) for p, prefixes in parts.items() for prefix in prefixes
                if name == prefix or name.startswith(prefix + ".")), key=lambda x: len(x[1]))
    return best[0]


def upward_imports(graph: Mapping[str, set[str]]) -> list[str]:
    """Every import that goes against the layers or the compiler's order, in words."""
    layer_of = {m: _owner(m, {k: v[0] for k, v in LAYERS.items()}) for m in graph}
    order = [name for name, _ in COMPILER]
    part_of = {m: _owner(m, dict(COMPILER)) for m in graph if layer_of[m] == "compiler" and
               m.startswith("tessera.transpile.")}
    bad = []
    for m, targets in sorted(graph.items()):
        for t in sorted(targets):
            if layer_of[t] not in LAYERS[layer_of[m]][1]:
                bad.append(f"{m} ({layer_of[m]}) imports {t} ({layer_of[t]})")
            elif m in part_of and t in part_of and order.index(part_of[t]) > order.index(part_of[m]):
                bad.append(f"{m} ({part_of[m]}) imports {t} ({part_of[t]}), which comes later in the compiler")
    return bad


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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


def test_layers_import_downward_only() -> None:
    graph = import_graph(package_modules())
    assert len(graph) > 100
    assert upward_imports(graph) == []


def test_no_module_import_cycles() -> None:
    assert cycles(import_graph(package_modules())) == []


def test_no_folder_holds_more_than_20_modules() -> None:
    folders: dict[Path, int] = {}
    for path in package_modules().values():
        if path.name != "__init__.py":
            folders[path.parent] = folders.get(path.parent, 0) + 1
    crowded = {str(f.relative_to(ROOT)): n for f, n in folders.items() if n > MAX_MODULES_PER_FOLDER}
    assert crowded == {}
    tests: dict[Path, int] = {}
    for path in (ROOT / "tests").rglob("test_*.py"):
        tests[path.parent] = tests.get(path.parent, 0) + 1
    assert max(tests.values()) <= MAX_MODULES_PER_FOLDER


def test_every_module_has_a_layer_and_the_compiler_parts_are_its_folders() -> None:
    modules = package_modules()
    compiler_folders = {p.relative_to(ROOT / "transpile").parts[0] for m, p in modules.items()
                        if m.startswith("tessera.transpile.") and p.parent != ROOT / "transpile"}
    assert compiler_folders == {prefix.rpartition(".")[2] for _, prefixes in COMPILER[1:-1] for prefix in prefixes}
    for name in modules:
        assert _owner(name, {k: v[0] for k, v in LAYERS.items()})


def _planted(tmp_path: Path) -> dict[str, Path]:
    files = {
        "tessera.base.errors": "import os\n",
        "tessera.runtime.cuda": "def f():\n    from tessera.transpile.lir import nodes\n",  # runtime -> compiler
        "tessera.transpile.lir.nodes": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                       "    from tessera.transpile.emit import exprs\n",     # not counted
        "tessera.transpile.emit.exprs": "from tessera.transpile.cpu.regions import x\n",    # emit -> cpu: later
        "tessera.transpile.cpu.regions": "from tessera.transpile.emit import exprs\nx = 1\n",  # and a cycle
        "tessera.base.dtypes": "from ..frontend import nodes\n",                              # relative, upward
        "tessera.frontend.nodes": "from tessera.base import errors\n",
    }
    out = {}
    for name, text in files.items():
        path = tmp_path / (name.replace(".", "_") + ".py")
        path.write_text(text)
        out[name] = path
    return out


def test_the_checks_find_planted_upward_imports_and_cycles(tmp_path: Path) -> None:
    modules = _planted(tmp_path)
    graph = import_graph(modules)
    assert graph["tessera.transpile.lir.nodes"] == set()
    assert graph["tessera.base.dtypes"] == {"tessera.frontend.nodes"}
    assert upward_imports(graph) == [
        "tessera.base.dtypes (base) imports tessera.frontend.nodes (front end)",
        "tessera.runtime.cuda (runtime) imports tessera.transpile.lir.nodes (compiler)",
        "tessera.transpile.emit.exprs (C emission) imports tessera.transpile.cpu.regions (CPU rendering), "
        "which comes later in the compiler",
    ]
    assert cycles(graph) == [["tessera.transpile.cpu.regions", "tessera.transpile.emit.exprs"]]
