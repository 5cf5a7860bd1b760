"""Range checks on compile-time values (spec section 6), run after a body is typed.

A literal takes the type of the other operand, so it must fit that type (`b + 1000` with `b: i8`,
`u == -1` with `u: u32`, `1e300` as `f32`); a constant divisor must not be zero; a constant shift
count must be below the width of the shifted type; constant signed arithmetic must not overflow.
Each of these would otherwise reach the C compiler as an error or a warning, far from the `.tsr` line.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np

from tessera import nodes as N
from tessera.dtypes import ScalarType, int_range
from tessera.errors import DiagnosticSink, Loc
from tessera.transpile.callgraph import tree_children
from tessera.transpile.consts import Value

F32_MAX = float(np.finfo(np.float32).max)


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
            with np.errstate(all="ignore"):
                g = float(np.float32(f))
            if math.isinf(g):
                return f"{v!r} is out of the f32 range (at most about 3.4e38)"
            if f != 0.0 and g == 0.0:
                return f"{v!r} is too small for f32 (it would round to 0)"
    return None


def _children(node: object) -> Iterator[object]:
    yield from tree_children(node)


class ConstRangeChecker:
    """Walks a typed body. `const` gives the compile-time value of an expression or None."""

    def __init__(self, sink: DiagnosticSink, const: Callable[[N.Expr], Value | None]) -> None:
        self.sink = sink
        self.const = const

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
        if isinstance(node, N.AugAssign):
            ty = getattr(node.target, "ty", None)
            if self.divisor(node.op, node.value, node.loc) or \
                    self.shift(node.op, node.value, ty if isinstance(ty, ScalarType) else None, node.loc):
                return True
        if isinstance(node, N.BinOp) and isinstance(node.ty, ScalarType) and (
                self.divisor(node.op, node.right, node.loc) or self.shift(node.op, node.right, node.ty, node.loc)):
            return True
        if isinstance(node, N.Unary) and node.op == "-" and isinstance(node.operand, N.IntLit) \
                and isinstance(node.ty, ScalarType) and node.ty.is_int:
            why = value_range_error(-node.operand.value, node.ty)
            if why:
                self.sink.error(node.loc, f"integer literal {why}")
            return bool(why)
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
        reported = False
        for c in _children(node):
            reported = self.visit(c) or reported
        if reported:
            return True
        if isinstance(node, N.BinOp) and node.op in ("+", "-", "*", "//", "%") and isinstance(node.ty, ScalarType) \
                and node.ty.kind == "int":
            v = self._int_const(node)
            if v is not None:
                lo, hi = int_range(node.ty)
                if not lo <= v <= hi:
                    self.sink.error(node.loc, f"constant expression overflows {node.ty} (its value is {v}); "
                                    "convert an operand to a wider type, such as i64(...)")
                    return True
        if isinstance(node, N.BinOp) and node.op in ("+", "-", "*", "/") and isinstance(node.ty, ScalarType) \
                and node.ty.is_float and node.ty.bits <= 32:
            v = self.const(node)
            if isinstance(v, float) and math.isfinite(v) and abs(v) > F32_MAX:
                self.sink.error(node.loc, f"constant expression overflows f32 (its value is {v!r}); "
                                "convert an operand to f64")
                return True
        return False
