"""Analyses over calls in the typed tree: the calls in a function, its cooperation class (the
strongest of the builtins and device functions it calls, from the builtin table) and whether it
uses warp operations."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping

from tessera.frontend import nodes as N
from tessera.transpile.builtins import BUILTINS, Builtin, Coop

# The node types a field may hold, as its annotation spells them: such fields are the tree's edges.
_NODE_WORDS = ("Expr", "Stmt", "Keyword", "Call", "Param", "Decorator", "Item")
_CHILD_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}


def _child_fields(cls: type) -> tuple[tuple[str, bool], ...]:
    """(field name, holds a tuple) for each field of `cls` that holds nodes of the tree, read from
    the annotations once per class. Memoized by hand: functools.cache's signature makes mypy reject
    classes as arguments (mypy#11470)."""
    fields = _CHILD_FIELDS.get(cls)
    if fields is None:
        fields = () if not dataclasses.is_dataclass(cls) else tuple(
            (f.name, str(f.type).startswith("tuple[")) for f in dataclasses.fields(cls)
            if f.name not in ("loc", "ty", "var_ty") and any(w in str(f.type) for w in _NODE_WORDS))
        _CHILD_FIELDS[cls] = fields
    return fields


def tree_children(n: object) -> list[object]:
    """The statements and expressions directly below a node of the syntax tree."""
    kids: list[object] = []
    for name, many in _child_fields(type(n)):
        v = getattr(n, name)
        if v is None:
            continue
        if many:
            kids.extend(v)
        else:
            kids.append(v)
    return kids


def walk(node: object) -> Iterator[object]:
    """Every node below `node` (statements and expressions), `node` included, in source order."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(tree_children(n)))


def calls(fn: N.FuncDef) -> Iterator[N.Call]:
    """The checked calls of builtins and device functions in `fn`'s body."""
    for s in fn.body:
        for n in walk(s):
            if isinstance(n, N.Call) and isinstance(n.func, N.Name) and n.func.ref in ("builtin", "func"):
                yield n


def call_coop(c: N.Call, known: Mapping[str, Coop]) -> Coop:
    """Who must make call `c` together: a builtin's class, or a device function's from `known`."""
    assert isinstance(c.func, N.Name)
    if c.func.ref == "func":
        return known.get(c.func.id, Coop.NONE)
    b = BUILTINS.get(c.func.id) if c.func.ref == "builtin" else None
    return b.coop if b is not None else Coop.NONE


def coop_class(fn: N.FuncDef, known: Mapping[str, Coop]) -> Coop:
    """Who must call `fn` together: the strongest class among what it calls (`known` gives the
    classes of the device functions defined before it; a call of itself adds nothing)."""
    return max((call_coop(c, known) for c in calls(fn)), default=Coop.NONE)


def uses_builtins(fn: N.FuncDef, known: Mapping[str, bool], test: Callable[[Builtin], bool]) -> bool:
    """Whether `fn` calls a builtin that passes `test`, or a device function that does (`known`
    says which of those defined before it do)."""
    for c in calls(fn):
        assert isinstance(c.func, N.Name)
        if c.func.ref == "func" and known.get(c.func.id, False):
            return True
        b = BUILTINS.get(c.func.id) if c.func.ref == "builtin" else None
        if b is not None and test(b):
            return True
    return False


def uses_warp_ops(fn: N.FuncDef, known: Mapping[str, bool]) -> bool:
    """Whether `fn` (or a device function it calls) uses warp operations, which need whole warps."""
    return uses_builtins(fn, known, lambda b: b.coop == Coop.WARP)


def uses_indices(fn: N.FuncDef, known: Mapping[str, bool]) -> bool:
    """Whether `fn` (or a device function it calls) uses a tile or group index."""
    return uses_builtins(fn, known, lambda b: b.rule in ("index", "index_axis"))
