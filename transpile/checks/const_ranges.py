"""Range checks on compile-time values (spec section 6), run after a body is typed.

A literal takes the type of the other operand, so it must fit that type (`b + 1000` with `b: i8`,
`u == -1` with `u: u32`, `1e300` as `f32`); a constant divisor must not be zero; a constant shift
count must be below the width of the shifted type; constant signed arithmetic must not overflow.
Each of these would otherwise reach the C compiler as an error or a warning, far from the `.tsr` line.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tessera.base.dtypes import ScalarType, int_range
from tessera.base.errors import DiagnosticSink, Loc
from tessera.base.f32 import round_f32
from tessera.frontend import nodes as N
from tessera.transpile.checks.callgraph import tree_children
from tessera.transpile.consts import Value

F32_MAX = 3.4028234663852886e38  # FLT_MAX


def value_range_error(v: Value, ty: ScalarType) -> str | None:
    """Why the compile-time value `v` cannot be a `ty` in the emitted C, or None when it can."""
    if isinstance(v, bool) or ty.kind == "bool":
        return None
    if ty.is_int and isinstance(v, int):
        lo, hi = int_range(ty)
        if not lo <= v <= hi:
            return f"{v} does not fit in {ty} ({lo} to {hi})"
    elif ty.is_float and ty.bits <= 32:  # f16 and bf16 values are computed in f32
        try:
            f = float(v)
        except OverflowError:
            return f"{v} is out of the f32 range"
        if math.isfinite(f):
            g = round_f32(f)
            if math.isinf(g):
                return f"{v!r} is out of the f32 range (at most about 3.4e38)"
            if f != 0.0 and g == 0.0:
                return f"{v!r} is too small for f32 (it would round to 0)"
    return None


# Calls that a constant expression may contain (evaluate() folds them; group_tile_count() is the
# kernel's constant group size).
_CONST_CALLS = frozenset(["min", "max", "abs", "group_tile_count"])


class ConstRangeChecker:
    """Walks a typed body. `const` gives the compile-time value of an expression or None."""

    def __init__(self, sink: DiagnosticSink, const: Callable[[N.Expr], Value | None]) -> None:
        self.sink = sink
        self._const = const
        self._shaped: dict[int, bool] = {}
        self._values: dict[int, Value | None] = {}

    def const(self, e: N.Expr) -> Value | None:
        """`e`'s compile-time value; evaluated only where the tree can be a constant at all, and
        once per node (the checks of a node and of its parent ask again)."""
        key = id(e)
        if key in self._values:
            return self._values[key]
        v = self._const(e) if self.const_shaped(e) else None
        self._values[key] = v
        return v

    def const_shaped(self, e: object) -> bool:
        """Whether `e` is made only of literals, named constants and operators on them (a quick,
        remembered check, so that only such trees are ever evaluated)."""
        key = id(e)
        known = self._shaped.get(key)
        if known is not None:
            return known
        if isinstance(e, (N.IntLit, N.FloatLit, N.BoolLit)):
            ok = True
        elif isinstance(e, N.Name):
            ok = e.ref in ("const", "builtin")
        elif isinstance(e, N.Call):
            ok = isinstance(e.func, N.Name) and (e.func.ref == "cast" or e.func.id in _CONST_CALLS) \
                and all(self.const_shaped(a) for a in e.args)
        elif isinstance(e, (N.Unary, N.BinOp, N.Compare, N.BoolOp, N.Ternary)):
            ok = all(self.const_shaped(c) for c in tree_children(e))
        else:
            ok = False
        self._shaped[key] = ok
        return ok

    def run(self, body: tuple[N.Stmt, ...]) -> None:
        for s in body:
            self.visit(s)

    def _int_const(self, e: N.Expr) -> int | None:
        v = self.const(e)
        return v if isinstance(v, int) else None  # bool is an int here: False divides by zero too

    def divisor(self, op: str, right: N.Expr, loc: Loc) -> bool:
        if op in ("/", "//", "%") and getattr(right, "ty", None) is not None:
            v = self.const(right)
            if v is not None and v == 0:
                self.sink.error(loc, f"division by zero ('{op}' by a constant 0)")
                return True
        return False

    def shift(self, op: str, right: N.Expr, ty: ScalarType | None, loc: Loc) -> bool:
        if op in ("<<", ">>") and ty is not None and ty.is_int and getattr(right, "ty", None) is not None:
            v = self._int_const(right)
            bits = max(ty.bits, 32)  # C shifts narrower types as int
            if v is not None and not 0 <= v < bits:
                self.sink.error(loc, f"shift count {v} is out of range for {ty if ty.bits >= 32 else 'i32'} "
                                f"(0 to {bits - 1})")
                return True
        return False

    def visit(self, node: object) -> bool:
        """Check `node` and what it contains; True when something was reported (no cascades)."""
        kind = type(node)
        if kind is N.IntLit or kind is N.FloatLit or kind is N.Name:
            return self.leaf(node)
        if kind is N.BoolLit or kind is N.StrLit:
            return False
        if kind is N.AugAssign:
            assert isinstance(node, N.AugAssign)
            ty = getattr(node.target, "ty", None)
            if self.divisor(node.op, node.value, node.loc) or \
                    self.shift(node.op, node.value, ty if isinstance(ty, ScalarType) else None, node.loc):
                return True
        elif kind is N.BinOp:
            assert isinstance(node, N.BinOp)
            if isinstance(node.ty, ScalarType) and (self.divisor(node.op, node.right, node.loc)
                                                    or self.shift(node.op, node.right, node.ty, node.loc)):
                return True
        elif kind is N.Unary:
            assert isinstance(node, N.Unary)
            if node.op == "-" and isinstance(node.operand, N.IntLit) and isinstance(node.ty, ScalarType) \
                    and node.ty.is_int:
                why = value_range_error(-node.operand.value, node.ty)
                if why:
                    self.sink.error(node.loc, f"integer literal {why}")
                return bool(why)
        reported = False
        for c in tree_children(node):
            reported = self.visit(c) or reported
        if reported:
            return True
        if kind is N.BinOp:
            assert isinstance(node, N.BinOp)
            return self.overflow(node)
        return False

    def leaf(self, node: object) -> bool:
        """A literal, or a named constant, that does not fit the type it is used as."""
        if isinstance(node, N.IntLit) and isinstance(node.ty, ScalarType):
            why = value_range_error(node.value, node.ty)
            if why:
                self.sink.error(node.loc, f"integer literal {why}" if node.ty.is_int else f"literal {why}")
            return bool(why)
        if isinstance(node, N.FloatLit) and isinstance(node.ty, ScalarType):
            why = value_range_error(node.value, node.ty)
            if why:
                self.sink.error(node.loc, f"float literal {why}")
            return bool(why)
        if isinstance(node, N.Name) and node.ref == "const" and isinstance(node.ty, ScalarType):
            v = self.const(node)
            why = value_range_error(v, node.ty) if v is not None else None
            if why:
                self.sink.error(node.loc, f"the constant '{node.id}' is used as {node.ty}, but {why}")
            return bool(why)
        return False

    def overflow(self, node: N.BinOp) -> bool:
        """A constant operation whose value its type cannot hold."""
        if not isinstance(node.ty, ScalarType):
            return False
        if node.op in ("+", "-", "*", "//", "%") and node.ty.kind == "int":
            v = self._int_const(node)
            if v is not None:
                lo, hi = int_range(node.ty)
                if not lo <= v <= hi:
                    self.sink.error(node.loc, f"constant expression overflows {node.ty} (its value is {v}); "
                                    "convert an operand to a wider type, such as i64(...)")
                    return True
        if node.op in ("+", "-", "*", "/") and node.ty.is_float and node.ty.bits <= 32:
            fv = self.const(node)
            if isinstance(fv, float) and math.isfinite(fv) and abs(fv) > F32_MAX:
                self.sink.error(node.loc, f"constant expression overflows f32 (its value is {fv!r}); "
                                "convert an operand to f64")
                return True
        return False
