"""The `fold-constants` pass: operations on literal constants computed at compile time, with the
emitted C's semantics (tessera.base.scalar_ops: integer `//` and `%` truncate, i8/i16 and unsigned
arithmetic wrap, f32 arithmetic rounds to f32 and f16 arithmetic to f16, a float to integer
conversion saturates, a float division by zero gives an infinity or NaN; `abs`, `min`, `max`).

Before:  Store(y, (Affine(i + 1 * 4),), Binary(*, Const(2.0: f32), Cast(Const(3: i32) -> f32)))
After:   Store(y, (Affine(i + 4),), Const(6.0: f32))          (an index's form is derived anew)

Named constants (module constants, const parameters) are left alone so that the C keeps their
names; the C compiler folds them. Nothing without a defined value is folded (an i32/i64 overflow,
an integer division by zero, a shift count out of range): such code was already reported by the
checker, or is left to behave as written.
"""

from __future__ import annotations

import dataclasses

from tessera.base.dtypes import BOOL, round_to
from tessera.base.scalar_ops import Undefined, absolute, binary, compare, convert, min_max, truthy, unary
from tessera.transpile.consts import Value
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.visit import map_body, map_expr, map_stmt_exprs


def _literal(e: L.Expr) -> Value | None:
    """The value of an unnamed constant as the C literal has it: a float is rounded to its type
    (a literal `16777217.0` is `16777216.0f` in the C, whatever value the tree kept)."""
    if not (isinstance(e, L.Const) and e.name is None):
        return None
    if e.dtype.is_float:
        return round_to(float(e.value), e.dtype)
    return e.value


def _fold(e: L.Expr) -> L.Expr:
    try:
        return _folded(e)
    except Undefined:
        return e  # no defined value: left as written


def _folded(e: L.Expr) -> L.Expr:
    if isinstance(e, L.Binary):
        a, b = _literal(e.a), _literal(e.b)
        if a is None or b is None or e.a.dtype != e.dtype or (e.op not in ("<<", ">>") and e.b.dtype != e.dtype):
            return e
        return L.Const(binary(e.op, a, b, e.dtype), e.dtype)
    if isinstance(e, L.Cast):
        v = _literal(e.x)
        return e if v is None else L.Const(convert(v, e.x.dtype, e.dtype), e.dtype)
    if isinstance(e, L.Unary):
        v = _literal(e.x)
        if v is None:
            return e
        if e.op == "not":
            return L.Const(not truthy(v), BOOL)
        return e if e.x.dtype != e.dtype else L.Const(unary(e.op, v, e.dtype), e.dtype)
    if isinstance(e, L.Compare):
        a, b = _literal(e.a), _literal(e.b)
        if a is None or b is None or e.a.dtype != e.b.dtype:
            return e
        return L.Const(compare(e.op, a, b), BOOL)
    if isinstance(e, L.Logical):
        a, b = _literal(e.a), _literal(e.b)
        if a is None or b is None:
            return e
        return L.Const(truthy(a) and truthy(b) if e.op == "and" else truthy(a) or truthy(b), BOOL)
    if isinstance(e, L.Select):
        c = _literal(e.cond)
        return e if c is None else (e.a if truthy(c) else e.b)
    if isinstance(e, L.Intrinsic) and e.op in ("abs", "min", "max") and all(a.dtype == e.dtype for a in e.args):
        values = [_literal(a) for a in e.args]
        if any(v is None for v in values):
            return e
        known = [v for v in values if v is not None]
        return L.Const(absolute(known[0], e.dtype) if e.op == "abs" else min_max(e.op, known, e.dtype), e.dtype)
    return e


def fold_function(fn: L.Function) -> L.Function:
    return dataclasses.replace(fn, body=map_body(fn.body, lambda s: map_stmt_exprs(s, _fold)))


def fold_constants(module: L.Module) -> L.Module:
    return dataclasses.replace(module, functions=tuple(fold_function(f) for f in module.functions))


def value_of(e: L.Expr) -> Value | None:
    """The value of an expression of constants, named ones included (None if it is not one)."""
    def unnamed(x: L.Expr) -> L.Expr:
        return _fold(dataclasses.replace(x, name=None) if isinstance(x, L.Const) else x)
    folded = map_expr(e, unnamed)
    return folded.value if isinstance(folded, L.Const) else None


def trip_count(s: L.For) -> int | None:
    """The number of iterations of `s` when its bounds are constants (named ones too)."""
    a, b, step = (value_of(x) for x in (s.start, s.stop, s.step))
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (a, b, step)) or step == 0:
        return None
    return len(range(int(a), int(b), int(step)))  # type: ignore[arg-type]
