"""`from tessera.frontend import nodes as N` names the whole syntax tree: the expressions and their
types of frontend/exprs.py are re-exported by frontend/nodes.py (its `__all__`), the very same
objects, so that a node added to exprs.py is reachable as `N.Name`; nodes.py's own statements and
items are in its `__all__` too."""

from __future__ import annotations

from tessera.frontend import exprs, nodes
from tests.transpile.test_lir_namespace import _defined, assert_reexports


def test_nodes_reexports_every_name_of_exprs() -> None:
    assert {"Name", "Call", "Index", "Slice", "TensorType", "ArrayType", "Expr", "Type", "STR", "VOID"} <= _defined(exprs)
    assert_reexports(nodes, exprs)


def test_all_names_the_modules_own_names_and_each_resolves() -> None:
    assert len(nodes.__all__) == len(set(nodes.__all__))
    for n in nodes.__all__:
        assert hasattr(nodes, n), n
    assert _defined(nodes) <= set(nodes.__all__)
    assert {"Assign", "For", "FuncDef", "Module", "Stmt", "Item", "replace"} <= set(nodes.__all__)
