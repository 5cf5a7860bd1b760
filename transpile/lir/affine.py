"""Affine forms of integer index expressions: `sum(atom * coeff) + offset` with constant
coefficients, where an atom is any other expression (a variable, a tile index, a product of two
variables, a load). Lowering keeps every index in this form where it is one, so that later passes
can tell how an address moves with the tile index or a loop counter (contiguity, alignment).

    affine(i * 4 + (j + 1) * BK - 2)  ->  Affine(((i, 4), (j, BK)), offset=BK - 2)   (BK = 16: 14)

Named constants stay atoms or named coefficients. Only i32, u32, i64 and u64 expressions get this
form (narrower types wrap after each operation), and only when every coefficient and the offset
fit the type. The form describes the value; the `Affine` node keeps the expression as written,
which is what is printed.
"""

from __future__ import annotations

from tessera.base.dtypes import ScalarType, int_range
from tessera.transpile.lir import nodes as L

# A coefficient: its value and, when it is exactly a named constant, that name.
_Coeff = tuple[int, str | None]


def _add(terms: dict[L.Expr, _Coeff], atom: L.Expr, c: _Coeff) -> None:
    if atom in terms:
        old = terms[atom][0]
        terms[atom] = (old + c[0], None)
    else:
        terms[atom] = c


def _scale(c: _Coeff, k: int, name: str | None = None) -> _Coeff:
    if c == (1, None) and name is not None:
        return (k, name)
    if k == 1:
        return c
    return (c[0] * k, None)


def _decompose(e: L.Expr, ty: ScalarType) -> tuple[dict[L.Expr, _Coeff], int]:
    """The terms (in order of first appearance) and constant offset of `e`."""
    if e.dtype != ty:
        return {e: (1, None)}, 0
    if isinstance(e, L.Const):
        if e.name is None and isinstance(e.value, int) and not isinstance(e.value, bool):
            return {}, e.value
        return {e: (1, None)}, 0
    if isinstance(e, L.Affine):
        return _decompose(e.source, ty)
    if isinstance(e, L.Unary) and e.op == "-":
        terms, off = _decompose(e.x, ty)
        return {a: _scale(c, -1) for a, c in terms.items()}, -off
    if isinstance(e, L.Binary) and e.op in ("+", "-"):
        ta, oa = _decompose(e.a, ty)
        tb, ob = _decompose(e.b, ty)
        sign = 1 if e.op == "+" else -1
        for a, c in tb.items():
            _add(ta, a, _scale(c, sign))
        return ta, oa + sign * ob
    if isinstance(e, L.Binary) and e.op == "*":
        for x, k in ((e.a, e.b), (e.b, e.a)):
            factor, name = _constant(k, ty)
            if factor is not None:
                terms, off = _decompose(x, ty)
                return {a: _scale(c, factor, name) for a, c in terms.items()}, off * factor
    return {e: (1, None)}, 0


def _constant(e: L.Expr, ty: ScalarType) -> tuple[int | None, str | None]:
    """The value of a constant factor (and its name if it is a named constant), else None."""
    if isinstance(e, L.Const) and e.dtype == ty and isinstance(e.value, int) and not isinstance(e.value, bool):
        return e.value, e.name
    if isinstance(e, (L.Binary, L.Unary, L.Affine)):
        terms, off = _decompose(e, ty)
        if not terms:
            return off, None
    return None, None


def affine(e: L.Expr) -> L.Expr:
    """`e` as an `Affine` when it is an affine integer expression of 32 or 64 bits, else `e`."""
    ty = e.dtype
    if not (ty.is_int and ty.bits >= 32) or isinstance(e, L.Affine):
        return e
    terms, offset = _decompose(e, ty)
    lo, hi = int_range(ty)
    kept = [(a, c) for a, c in terms.items() if c[0] != 0]
    if not lo <= offset <= hi or any(not lo <= c[0] <= hi for _, c in kept):
        return e
    return L.Affine(tuple((a, L.Const(c[0], ty, c[1])) for a, c in kept), L.Const(offset, ty), ty, e)

