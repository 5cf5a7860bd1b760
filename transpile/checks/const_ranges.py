"""Range checks on compile-time values (spec section 6), run after a body is typed.

A literal takes the type of the other operand, so it must fit that type (`b + 1000` with `b: i8`,
`u == -1` with `u: u32`, `1e300` as `f32`); a constant integer divisor must not be zero (a float one
gives IEEE's infinity or NaN); a constant shift count must be below the width of the shifted type;
constant i32/i64 and float arithmetic must not overflow (what overflows is const_eval's verdict,
which follows the run-time rules: i8, i16 and unsigned arithmetic wrap).
Each of these would otherwise reach the C compiler as an error or a warning, far from the `.tsr` line.
"""

from __future__ import annotations

from collections.abc import Callable

from tessera.base.dtypes import ScalarType, promote
from tessera.base.errors import DiagnosticSink, Loc
from tessera.frontend import nodes as N
from tessera.transpile.checks.callgraph import tree_children
from tessera.transpile.consts import NotConstant, Value, value_range_error

# Calls that a constant expression may contain (evaluate() folds them; group_tile_count() is the
# kernel's constant group size).
_CONST_CALLS = frozenset(["min", "max", "abs", "group_tile_count"])


class ConstRangeChecker:
    """Walks a typed body. `const` gives the compile-time value of an expression, the NotConstant
    that says why it has none (an overflow, among others), or None."""

    def __init__(self, sink: DiagnosticSink, const: Callable[[N.Expr], Value | NotConstant | None]) -> None:
        self.sink = sink
        self._const = const
        self._shaped: dict[int, bool] = {}
        self._values: dict[int, Value | NotConstant | None] = {}

    def result(self, e: N.Expr) -> Value | NotConstant | None:
        """`e`'s compile-time value or why it has none; evaluated only where the tree can be a
        constant at all, and once per node (the checks of a node and of its parent ask again)."""
        key = id(e)
        if key in self._values:
            return self._values[key]
        v = self._const(e) if self.const_shaped(e) else None
        self._values[key] = v
        return v

    def const(self, e: N.Expr) -> Value | None:
        v = self.result(e)
        return None if isinstance(v, NotConstant) else v

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

    def divisor(self, op: str, right: N.Expr, ty: object, loc: Loc) -> bool:
        """An integer division by a constant 0 (a float one is IEEE's infinity or NaN)."""
        if op in ("//", "%") and isinstance(ty, ScalarType) and not ty.is_float and getattr(right, "ty", None) is not None:
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
            ty, vt = getattr(node.target, "ty", None), getattr(node.value, "ty", None)
            op_ty = promote(ty, vt) if isinstance(ty, ScalarType) and isinstance(vt, ScalarType) else None
            if self.divisor(node.op, node.value, op_ty, node.loc) or \
                    self.shift(node.op, node.value, ty if isinstance(ty, ScalarType) else None, node.loc):
                return True
        elif kind is N.BinOp:
            assert isinstance(node, N.BinOp)
            if isinstance(node.ty, ScalarType) and (self.divisor(node.op, node.right, node.ty, node.loc)
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
        if isinstance(node, (N.BinOp, N.Unary)):
            return self.reported_at(node)
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
            return self.reported_at(node)  # "the constant 'C' is used as i8, but ..."
        return False

    def reported_at(self, node: N.Expr) -> bool:
        """A constant operation (or named constant) that is wrong where it is: its value overflows
        its type (signed integers, floats), or it does not fit the type it is used as."""
        r = self.result(node)
        if isinstance(r, NotConstant) and r.error and r.loc == node.loc:
            self.sink.error(node.loc, r.why)
            return True
        return False
