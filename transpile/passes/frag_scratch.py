"""Reductions across warps (spec section 14; part of the `plan-fragments` pass): a whole-fragment
statement that reads `tmax/tmin/tsum(F, axis=0)`, or `axis=1` of a fragment whose rows are spread
over several warps (frag_layout.row_division: fewer rows than 16 per warp), becomes explicit
statements, so that everything after this pass sees the shared memory and the barriers such a
reduction needs (plan-shared places and overlays the scratch, the race detector sees its accesses,
`--info` and `--dump-after` show it). A row reduction is the same along the other axis: the
quad's shuffles, a `[WN, M]` scratch (`%rowpart0`) of the parts of the warps that share the rows,
combined into a row vector (`%row0`).

In a kernel with column vectors or reductions every warp owns whole rows of every fragment
(lir/frag_layout.py), so a column is spread over all `W` warps: each warp reduces its rows
(`FragReduce`: the lane's own elements, then xor shuffles over the lanes of the column) and writes
its part to its row of a compiler-managed `[W, N]` shared scratch; after a barrier every lane
combines the `W` parts, in warp order (`FragCombine`), into a column vector that the statement then
reads. Inside a loop a second barrier keeps the next iteration's writes of the scratch after this
iteration's reads. With one warp the warp's part is the result: no scratch, no barrier.

Before (4 warps, `S: frag f32[64, 32]`):
    fragment c[:] = c + tsum(S[], 0)
After:
    alloc %colpart0            (shared f32[4, 32])
    alloc %col0                (frag f32[1, 32])
    fragment %col0[:] <- tsum(S) parts -> %colpart0
    barrier
    fragment %col0[:] <- tsum(%colpart0 rows)
    fragment c[:] = c + %col0[]
"""

from __future__ import annotations

import dataclasses

from tessera.base.dtypes import F32, I32, ScalarType
from tessera.base.errors import Loc
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.frag_buffers import layout_of_buffer
from tessera.transpile.lir.frag_layout import REDUCTIONS
from tessera.transpile.lir.visit import all_exprs, map_expr, walk


def is_column_reduction(e: L.Expr) -> bool:
    """`tmax/tmin/tsum(F, axis=0)` (Intrinsic op(Load F, axis))."""
    return isinstance(e, L.Intrinsic) and e.op in REDUCTIONS and len(e.args) == 2 \
        and isinstance(e.args[1], L.Const) and e.args[1].value == 0


def _across_warps(fn: L.Function, e: L.Expr) -> bool:
    """A column reduction, or a row reduction of a fragment whose rows are spread over several
    warps (frag_layout.row_division: `warps_n` > 1)."""
    if is_column_reduction(e):
        return True
    if not (isinstance(e, L.Intrinsic) and e.op in REDUCTIONS and isinstance(e.args[0], L.Load)):
        return False
    return layout_of_buffer(fn, e.args[0].buf).warps_n > 1


def plan_scratch(fn: L.Function) -> L.Function:
    """`fn` with its column reductions, and its row reductions across warps, made explicit (see
    the module's docstring)."""
    if not any(_across_warps(fn, e) for e in all_exprs(fn.body)):
        return fn
    planner = _Planner(fn)
    body = planner.body(fn.body, False)
    allocs = tuple(L.Alloc(b.loc, b.name) for b in planner.new)
    return dataclasses.replace(fn, body=(*allocs, *body), buffers=(*fn.buffers, *planner.new))


class _Planner:
    def __init__(self, fn: L.Function) -> None:
        self.fn = fn
        self.new: list[L.Buffer] = []
        self.names = {b.name for b in fn.buffers}

    def fresh(self, base: str) -> str:
        k = 0
        while f"{base}{k}" in self.names:
            k += 1
        self.names.add(f"{base}{k}")
        return f"{base}{k}"

    def body(self, body: tuple[L.Stmt, ...], in_loop: bool) -> tuple[L.Stmt, ...]:
        out: list[L.Stmt] = []
        for s in body:
            if isinstance(s, L.If):
                s = dataclasses.replace(s, then=self.body(s.then, in_loop), orelse=self.body(s.orelse, in_loop))
            elif isinstance(s, (L.For, L.While)):
                s = dataclasses.replace(s, body=self.body(s.body, True))
            if isinstance(s, L.FragAssign) and any(_across_warps(self.fn, x) for x in walk(s.value)):
                out.extend(self.expand(s, in_loop))
            else:
                out.append(s)
        return tuple(out)

    def expand(self, s: L.FragAssign, in_loop: bool) -> list[L.Stmt]:
        """The statement's column reductions, each into a column vector, then the statement
        reading those."""
        found: list[L.Intrinsic] = []
        for x in walk(s.value):
            if _across_warps(self.fn, x) and x not in found:
                assert isinstance(x, L.Intrinsic)
                found.append(x)
        reduces: list[L.Stmt] = []
        combines: list[L.Stmt] = []
        vectors: dict[L.Intrinsic, L.Expr] = {}
        for x in found:
            load = x.args[0]
            assert isinstance(load, L.Load)
            src = self.fn.buffer(load.buf)
            assert src is not None
            elem = F32 if src.elem.is_float else I32  # f16/bf16 elements reduce in f32
            lay = layout_of_buffer(self.fn, src.name)
            if is_column_reduction(x):
                dst = self.buffer(self.fresh("%col"), "frag", elem, (1, lay.n), s.loc)
                parts = lay.col_parts
            else:  # a row vector, its rows' parts in the warps_n warps that own them
                dst = self.buffer(self.fresh("%row"), "frag", elem, (lay.m,), s.loc)
                parts = lay.warps_n
            extent = lay.n if is_column_reduction(x) else lay.m
            part = "%colpart" if is_column_reduction(x) else "%rowpart"
            scratch = self.buffer(self.fresh(part), "shared", elem, (parts, extent), s.loc) if parts > 1 else ""
            reduces.append(L.FragReduce(s.loc, dst, src.name, x.op, scratch))
            if scratch:
                combines.append(L.FragCombine(s.loc, dst, scratch, x.op))
            value: L.Expr = L.Load(dst, (), elem)
            vectors[x] = value if elem == x.dtype else L.Cast(value, x.dtype)
        out = [*reduces]
        if combines:
            out += [L.Barrier(s.loc), *combines]
        value = map_expr(s.value, lambda e: vectors.get(e, e) if isinstance(e, L.Intrinsic) else e)
        out.append(dataclasses.replace(s, value=value))
        if combines and in_loop:  # the next iteration writes the scratch after every warp read it
            out.insert(len(out) - 1, L.Barrier(s.loc))
        return out

    def buffer(self, name: str, space: str, elem: ScalarType, shape: tuple[int, ...], loc: Loc) -> str:
        dims = tuple(L.Const(d, I32) for d in shape)
        self.new.append(L.Buffer(name, space, elem, dims, loc, mut=True))
        return name


__all__ = ["is_column_reduction", "plan_scratch"]
