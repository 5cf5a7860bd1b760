"""`from tessera.transpile.lir import nodes as L` names the whole lowered IR: the expressions and
memory of lir/exprs.py and the statements of lir/stmts.py are re-exported by lir/nodes.py (its
`__all__`), the very same objects, so that a node added to either module is reachable as `L.Name`."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from tessera.base.irnode import is_ir_node
from tessera.transpile.lir import exprs, nodes, stmts


def _defined(module: object) -> set[str]:
    """The names a module defines at its top level (classes, functions, assignments), not its imports."""
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))  # type: ignore[attr-defined]
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return {n for n in out if not n.startswith("_")}


def assert_reexports(namespace: object, module: object) -> None:
    """Every name `module` defines is in `namespace`'s `__all__`, the very same object."""
    names = _defined(module)
    assert names, module
    missing = sorted(n for n in names if n not in namespace.__all__)  # type: ignore[attr-defined]
    assert missing == [], f"{module.__name__}: {missing} not in {namespace.__name__}.__all__"  # type: ignore[attr-defined]
    for n in names:
        assert getattr(namespace, n) is getattr(module, n), n


def test_nodes_reexports_every_name_of_exprs_and_stmts() -> None:
    for module in (exprs, stmts):
        assert_reexports(nodes, module)


def test_every_name_in_all_resolves_and_the_ir_classes_are_there() -> None:
    assert len(nodes.__all__) == len(set(nodes.__all__))
    for n in nodes.__all__:
        assert hasattr(nodes, n), n
    classes = {n for n in nodes.__all__ if inspect.isclass(getattr(nodes, n)) and is_ir_node(getattr(nodes, n))}
    assert {"Const", "Buffer", "View", "Decl", "For", "Mma", "Function", "Module"} <= classes
    assert len(classes) >= 55
