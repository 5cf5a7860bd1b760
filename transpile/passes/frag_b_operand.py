"""`tmma`'s second operand from registers (spec section 14: "an operand fragment may be tmma's `a`
(and `b`) argument"; part of the `plan-fragments` pass). Every warp multiplies its rows of the
accumulator by the whole of `b`, but a fragment is spread over the warps, each holding some of its
rows: so `b` goes through a compiler-managed shared array (`%bstage0`, of `b`'s element type and
shape), written with `tstore`'s per-lane stores, a barrier, and the mma reads it as it reads any
shared operand (ldmatrix where the layout allows; plan-fragments pads its rows like those of
the program's arrays). Inside a loop a second barrier keeps the next iteration's stores after
this iteration's reads. Everything after this pass sees the array and the barriers (plan-shared
places and overlays it, the race detector sees its accesses, `--info` lists it).

Before (`P: frag f16[64, 32]`, `Of: frag f32[64, 32]`):
    mma Of += Qs[0+:64, 0+:64] @ P[0+:64, 0+:32]
After:
    alloc %bstage0             (shared f16[64, 32])
    tstore %bstage0[0+:64, 0+:32] <- P
    barrier
    mma Of += Qs[0+:64, 0+:64] @ %bstage0[0+:64, 0+:32]
"""

from __future__ import annotations

import dataclasses

from tessera.base.dtypes import I32
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.visit import statements


def stage_register_b(fn: L.Function) -> L.Function:
    """`fn` with each tmma whose second operand is a fragment reading a shared copy of it."""
    if not any(isinstance(s, L.Mma) and _is_frag(fn, s.b) for s in statements(fn.body)):
        return fn
    stager = _Stager(fn)
    body = stager.body(fn.body, False)
    allocs = tuple(L.Alloc(b.loc, b.name) for b in stager.new)
    return dataclasses.replace(fn, body=(*allocs, *body), buffers=(*fn.buffers, *stager.new))


def _is_frag(fn: L.Function, view: L.View) -> bool:
    b = fn.buffer(view.buf)
    return b is not None and b.space == "frag"


class _Stager:
    def __init__(self, fn: L.Function) -> None:
        self.fn = fn
        self.new: list[L.Buffer] = []
        self.names = {b.name for b in fn.buffers}

    def body(self, body: tuple[L.Stmt, ...], in_loop: bool) -> tuple[L.Stmt, ...]:
        out: list[L.Stmt] = []
        for s in body:
            if isinstance(s, L.If):
                s = dataclasses.replace(s, then=self.body(s.then, in_loop), orelse=self.body(s.orelse, in_loop))
            elif isinstance(s, (L.For, L.While)):
                s = dataclasses.replace(s, body=self.body(s.body, True))
            if isinstance(s, L.Mma) and _is_frag(self.fn, s.b):
                out += self.stage(s, in_loop)
            else:
                out.append(s)
        return tuple(out)

    def stage(self, s: L.Mma, in_loop: bool) -> list[L.Stmt]:
        src = self.fn.buffer(s.b.buf)
        assert src is not None
        k = 0
        while f"%bstage{k}" in self.names:
            k += 1
        name = f"%bstage{k}"
        self.names.add(name)
        self.new.append(L.Buffer(name, "shared", src.elem, src.shape, s.loc, mut=True, auto_pad=True))
        shape = tuple(int(d.value) for d in src.shape if isinstance(d, L.Const))
        view = L.View(name, tuple(L.Const(0, I32) for _ in shape), shape, checked=False)
        out: list[L.Stmt] = [L.FragStore(s.loc, view, src.name), L.Barrier(s.loc), dataclasses.replace(s, b=view)]
        if in_loop:  # the next iteration stores after every warp has read this one's
            out.append(L.Barrier(s.loc))
        return out


__all__ = ["stage_register_b"]
