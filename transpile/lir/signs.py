"""Which integer values of a function are provably non-negative (an analysis of the plan-copies pass).

A copy's view may start before its tensor (`x[r0 - 1:r0 + 63]`, a stencil's halo): those elements
read as zero and are not written, which costs the copy a lower-edge test per dimension. The test
is left out of the emitted C where the start is proven non-negative, which is the common case:

- constants >= 0, unsigned values, shape symbols, and the tile and group indices and counts;
- `a + b`, `a * b`, `a | b`, `a ^ b`, `min(a, b)` of non-negative values; `a / b`, `a // b`, `a % b`,
  `a >> b`, `a << b` of a non-negative `a` and `b`; `a & b` where either is; `max(a, b)` where either
  is; `abs(a)`; `c ? a : b` where both are;
- a local every assignment of which is non-negative given that the locals are (the greatest such
  set: `i = i + 1` keeps `i` non-negative once its first value is), and a loop variable whose
  start and step are non-negative.

Integer overflow is not considered (it is undefined in the C where it matters).

Example: `r0 = group_id(1) * 64` and `for k0 in range(0, K, 16)` are non-negative, so
`A[r0:r0 + 64, k0:k0 + 16]` has no lower-edge test; `A[r0 - 1:r0 + 63, k0:k0 + 16]` has one in its
first dimension.
"""

from __future__ import annotations

from tessera.transpile.builtins import BUILTINS
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.visit import statements

_BOTH = frozenset(["+", "*", "|", "^"])
_FIRST_AND_SECOND = frozenset(["/", "//", "%", ">>", "<<"])


class NonNegative:
    """The non-negative integer values of one function (see the module docstring)."""

    def __init__(self, fn: L.Function) -> None:
        self.shapes = frozenset(p.name for p in fn.params if p.kind == "shape")
        # Every value each local is given: by declarations, assignments and loops.
        values: dict[str, list[L.Expr | None]] = {}
        for s in statements(fn.body):
            if isinstance(s, L.Decl):
                values.setdefault(s.var.name, []).append(s.init)
            elif isinstance(s, L.Assign):
                v = s.value if s.op is None else L.Binary(s.op, s.var, s.value, s.var.dtype)
                values.setdefault(s.var.name, []).append(v)
            elif isinstance(s, L.For):
                values.setdefault(s.var.name, []).extend((s.start, s.step))
            elif isinstance(s, L.Invoke):
                for out in s.outs:
                    values.setdefault(out.name, []).append(None)
        # The greatest set of locals whose values are all non-negative given the set.
        self.locals = set(values)
        changed = True
        while changed:
            changed = False
            for name in sorted(self.locals):
                if not all(v is not None and self.holds(v) for v in values[name]):
                    self.locals.discard(name)
                    changed = True

    def holds(self, e: L.Expr) -> bool:
        """Whether `e` is provably >= 0."""
        if not e.dtype.is_int:
            return False
        if e.dtype.kind == "uint":
            return True
        if isinstance(e, L.Const):
            return int(e.value) >= 0
        if isinstance(e, L.Var):
            return e.name in self.locals or e.name in self.shapes
        if isinstance(e, L.Affine):
            return self.holds(e.source)
        if isinstance(e, L.Cast):
            return e.x.dtype.is_int and self.holds(e.x)
        if isinstance(e, L.Select):
            return self.holds(e.a) and self.holds(e.b)
        if isinstance(e, L.Binary):
            if e.op in _BOTH or e.op in _FIRST_AND_SECOND:
                return self.holds(e.a) and self.holds(e.b)
            if e.op == "&":
                return self.holds(e.a) or self.holds(e.b)
            return False
        if isinstance(e, L.Intrinsic):
            return self._intrinsic(e)
        return False

    def _intrinsic(self, e: L.Intrinsic) -> bool:
        b = BUILTINS.get(e.op)
        if b is not None and b.rule in ("index", "index_axis"):
            return True
        if e.op == "abs":
            return True
        if e.op == "max":
            return any(self.holds(a) for a in e.args)
        if e.op == "min":
            return all(self.holds(a) for a in e.args)
        return False


__all__ = ["NonNegative"]
