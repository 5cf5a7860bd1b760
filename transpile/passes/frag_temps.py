"""What the `lower` pass does to fragments (spec section 14) once a kernel is lowered: reductions
of elementwise expressions get temporaries, and the warp division is decided.

Reductions of elementwise expressions: a
whole-fragment statement that reduces an expression rather than a fragment (`tsum(S * S, axis=1)`,
checked by checks/frag_vectors.py `reduced_expression`) gets a compiler-made temporary fragment of the expression's
shape, assigned just before the statement, and reduces that. Everything after lowering (the warp
divisions, the scratch of reductions across warps, the printers, the CPU backend) sees the program
a user would write with a temporary of their own, so the results are the same bit for bit.

The temporaries are shared between statements (each is dead after its statement): the k-th
reduction of an expression in a statement (inner ones first) uses the k-th temporary of its element
type and shape.

The division: whether the kernel divides its fragments into rows first
(frag_buffers.kernel_whole_rows) is decided here, on the program as written, which is what the type
checker decided from (checks/frag_vectors.py `uses_rows`), and kept on the function
(`Function.rows_first`): fold-constants may remove the only reduction of a kernel
(`x if 1 > 2 else tsum(S, axis=1)[:, None]`), and the divisions must not change after the checker
accepted them.

Before (`S: frag f32[64, 32]`, `l: frag f32[64]`):
    fragment l[:] = l + tsum(S[] * S[], 1)
After:
    alloc %redarg0             (frag f32[64, 32])
    ...
    fragment %redarg0[:] = S[] * S[]
    fragment l[:] = l + tsum(%redarg0[], 1)
"""

from __future__ import annotations

import dataclasses

from tessera.base.dtypes import ScalarType
from tessera.base.errors import Loc
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.frag_buffers import kernel_whole_rows
from tessera.transpile.lir.frag_layout import REDUCTIONS
from tessera.transpile.lir.visit import all_exprs, map_body, map_expr, walk


def _is_expression_reduction(e: L.Expr) -> bool:
    """A reduction whose argument is not a fragment's element (`Load(F, ())`)."""
    return isinstance(e, L.Intrinsic) and e.op in REDUCTIONS and not (
        isinstance(e.args[0], L.Load) and not e.args[0].index)


def _frag_shape(fn: L.Function, e: L.Expr) -> tuple[L.Expr, ...]:
    """The shape of the 2-D fragments that the expression `e` reads (the type checker found one)."""
    for x in walk(e):
        if not (isinstance(x, L.Load) and not x.index):
            continue
        b = fn.buffer(x.buf)
        if b is not None and b.space == "frag" and len(b.shape) == 2 and not (
                isinstance(b.shape[0], L.Const) and b.shape[0].value == 1):
            return b.shape
    raise AssertionError("checks/frag_vectors.py reduced_expression requires a 2-D fragment in a reduced expression")


def hoist_reduced_expressions(fn: L.Function) -> L.Function:
    """`fn` with every reduction of an expression reading a temporary fragment (the module's docstring)."""
    if not any(_is_expression_reduction(e) for e in all_exprs(fn.body)):
        return fn
    temps: dict[tuple[object, ...], L.Buffer] = {}
    names = {b.name for b in fn.buffers}

    def temp(elem: ScalarType, shape: tuple[L.Expr, ...], k_th: int, loc: Loc) -> str:
        key = (elem, shape, k_th)
        if key not in temps:
            k = len(temps)
            while f"%redarg{k}" in names:
                k += 1
            names.add(f"%redarg{k}")
            temps[key] = L.Buffer(f"%redarg{k}", "frag", elem, shape, loc, mut=True)
        return temps[key].name

    def split(s: L.Stmt) -> L.Stmt | tuple[L.Stmt, ...]:
        if not (isinstance(s, L.FragAssign) and any(_is_expression_reduction(x) for x in all_exprs((s,)))):
            return s
        before: list[L.Stmt] = []

        def hoist(e: L.Expr) -> L.Expr:
            if not _is_expression_reduction(e):
                return e
            assert isinstance(e, L.Intrinsic)
            arg = e.args[0]
            name = temp(arg.dtype, _frag_shape(fn, arg), len(before), s.loc)
            before.append(L.FragAssign(s.loc, name, arg))
            return dataclasses.replace(e, args=(L.Load(name, (), arg.dtype), *e.args[1:]))

        value = map_expr(s.value, hoist)  # bottom-up: a nested reduction's temporary is assigned first
        return (*before, dataclasses.replace(s, value=value))

    body = map_body(fn.body, split)
    allocs = tuple(L.Alloc(b.loc, b.name) for b in temps.values())
    return dataclasses.replace(fn, body=(*allocs, *body), buffers=(*fn.buffers, *temps.values()))


def lower_fragments(fn: L.Function) -> L.Function:
    """`fn` with its reductions of expressions through temporaries and its division decided."""
    fn = hoist_reduced_expressions(fn)
    if fn.kind != "kernel" or not any(b.space == "frag" for b in fn.buffers):
        return fn
    return dataclasses.replace(fn, rows_first=kernel_whole_rows(fn))


__all__ = ["hoist_reduced_expressions", "lower_fragments"]
