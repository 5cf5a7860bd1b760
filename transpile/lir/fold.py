"""The `fold-constants` pass: operations on literal constants computed at compile time, with the
emitted C's semantics (integer `//` and `%` truncate, f32 arithmetic rounds to f32, a float to
integer conversion saturates).

Before:  Store(y, (Affine(i + 1 * 4),), Binary(*, Const(2.0: f32), Cast(Const(3: i32) -> f32)))
After:   Store(y, (Affine(i + 4),), Const(6.0: f32))          (an index's form is derived anew)

Named constants (module constants, const parameters) are left alone so that the C keeps their
names; the C compiler folds them. Nothing that could trap or overflow a signed type is folded:
such code was already reported by the checker, or is left to behave as written.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from tessera.base.dtypes import BOOL, ScalarType, int_range, round_to, wrap_int
from tessera.base.f32 import round_f32
from tessera.transpile.consts import COMPARE, INT_OPS, Value, trunc_div, trunc_mod
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


def _int_to_float(v: int, ty: ScalarType) -> float:
    """`v` rounded once (to nearest even) to f32 or f64, as C converts an integer: Python's float()
    first would round twice for f32 (2**60 + 2**36 + 1 must give 2**60 + 2**37)."""
    a = abs(v)
    if ty.name == "f64" or a < 2**24:
        return float(v)  # Python rounds an int to a double once; below 2**24 it is exact in f32
    shift = a.bit_length() - 24
    q, r = divmod(a, 1 << shift)
    if r > 1 << (shift - 1) or (r == 1 << (shift - 1) and q & 1):
        q += 1
    return round_to(math.copysign(float(q << shift), v), ty)


def _int_result(v: int, ty: ScalarType) -> L.Const | None:
    lo, hi = int_range(ty)
    if ty.kind == "int" and ty.bits >= 32 and not lo <= v <= hi:
        return None  # signed overflow: undefined in C, left as written
    return L.Const(wrap_int(v, ty), ty)


def _float_result(op: str, a: float, b: float, ty: ScalarType) -> L.Const | None:
    if ty.name not in ("f32", "f64") or (op in ("/", "//", "%") and b == 0):
        return None
    if not (math.isfinite(a) and math.isfinite(b)):  # inf and nan are left to the C
        return None
    rnd: Callable[[float], float] = round_f32 if ty.name == "f32" else float
    x, y = rnd(a), rnd(b)
    r: float | None
    if op in ("+", "-", "*", "/"):
        # A double operation on f32 operands rounded once is the correctly rounded f32 result.
        r = rnd(x + y if op == "+" else x - y if op == "-" else x * y if op == "*" else x / y)
    elif op == "//":
        q = rnd(x / y)
        r = rnd(math.floor(q)) if math.isfinite(q) else None
    elif op == "%":
        r = rnd(math.fmod(x, y))
    else:
        return None
    if r is None or not math.isfinite(float(r)):
        return None
    return L.Const(float(r), ty)


def _binary(e: L.Binary) -> L.Expr:
    a, b = _literal(e.a), _literal(e.b)
    if a is None or b is None:
        return e
    ty = e.dtype
    if ty.is_float:
        return _float_result(e.op, float(a), float(b), ty) or e
    if ty.kind == "bool" or isinstance(a, float) or isinstance(b, float):
        return e
    x, y = int(a), int(b)
    if e.op in INT_OPS:
        return _int_result(INT_OPS[e.op](x, y), ty) or e
    if e.op in ("//", "%") and y != 0:
        return _int_result(trunc_div(x, y) if e.op == "//" else trunc_mod(x, y), ty) or e
    if e.op in ("<<", ">>") and 0 <= y < max(ty.bits, 32):
        return _int_result(x << y if e.op == "<<" else x >> y, ty) or e
    return e


def _cast(e: L.Cast) -> L.Expr:
    v = _literal(e.x)
    if v is None:
        return e
    ty = e.dtype
    if ty.kind == "bool":
        return L.Const(v != 0, ty)
    if ty.is_float:
        # f16/bf16 results are left to the printer, which rounds them as the GPU does
        if ty.is_half or e.x.dtype.is_half:
            return e
        return L.Const(round_to(v, ty) if isinstance(v, float) else _int_to_float(int(v), ty), ty)
    if isinstance(v, float):  # saturating, NaN to 0, toward zero (tsr_f2i)
        lo, hi = int_range(ty)
        return L.Const(0 if math.isnan(v) else max(lo, min(hi, int(v) if math.isfinite(v) else
                                                             (hi if v > 0 else lo))), ty)
    return L.Const(wrap_int(int(v), ty), ty)


def _fold(e: L.Expr) -> L.Expr:
    if isinstance(e, L.Binary):
        return _binary(e)
    if isinstance(e, L.Cast):
        return _cast(e)
    if isinstance(e, L.Unary):
        v = _literal(e.x)
        if v is None:
            return e
        if e.op == "not":
            return L.Const(not v, BOOL)
        if e.op == "-" and e.dtype.is_float:
            return L.Const(-float(v), e.dtype)
        if e.op in ("-", "~") and not isinstance(v, float):
            return _int_result(-int(v) if e.op == "-" else ~int(v), e.dtype) or e
        return e
    if isinstance(e, L.Compare):
        a, b = _literal(e.a), _literal(e.b)
        if a is None or b is None or e.a.dtype.is_half:
            return e
        return L.Const(COMPARE[e.op](a, b), BOOL)
    if isinstance(e, L.Logical):
        a, b = _literal(e.a), _literal(e.b)
        if a is None or b is None:
            return e
        return L.Const(bool(a) and bool(b) if e.op == "and" else bool(a) or bool(b), BOOL)
    if isinstance(e, L.Select):
        c = _literal(e.cond)
        return e if c is None else (e.a if c else e.b)
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
