"""The passes that decide how kernels move memory, so that the printers only print what they say
(`tesserac --dump-after PASS` shows each decision, the verifier checks it):

- `plan-alignment`: which kernels get an aligned variant besides the generic one, and what it
  assumes (`Function.alignment`); the variants the compile asks for (`CompileOptions.alignment`)
  become functions of the module, the aligned one right after its generic twin.
- `plan-copies`: each copy's and vector access's chunk width and alignment test (`Copy.plan`,
  `VecMove.plan`, lir/copy_plan.py), on sm_90a whether the variant moves a pipelined copy with the
  tensor memory accelerator (`Copy.tma.active`: in the aligned variant, lir/tma.py), and
  for every view a statement reads or writes, which starts are proven non-negative (`View.nonneg`,
  lir/signs.py: no lower-edge test there).
- `plan-maps`: what a map kernel's element loop reads and writes and whether it may compute in
  f16/bf16 pairs (`ElementLoop.read`, `.written`, `.pair`; lir/maps.py).
"""

from __future__ import annotations

import dataclasses
import functools

from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.copy_plan import Divisors, alignment_of, copy_plan, vec_plan
from tessera.transpile.lir.maps import map_tensors, pair_type
from tessera.transpile.lir.signs import NonNegative
from tessera.transpile.lir.visit import map_body


def plan_alignment(module: L.Module, alignment: str) -> L.Module:
    """Before: a kernel whose copies an aligned variant would move in wider chunks,
        kernel k tile(64,)(A: tensor f32, ...):
    After (alignment "both"; "generic" keeps the first, "aligned" the second):
        kernel k tile(64,)(A: tensor f32, ...):
            variant generic (the aligned one assumes A 16-byte aligned, K % 16 == 0)
        kernel k tile(64,)(A: tensor f32, ...):
            variant aligned: A 16-byte aligned, K % 16 == 0"""
    functions: list[L.Function] = []
    for fn in module.functions:
        assumed = alignment_of(fn)
        if assumed is None:
            functions.append(fn)
            continue
        if alignment in ("generic", "both"):
            functions.append(dataclasses.replace(fn, alignment=assumed))
        if alignment in ("aligned", "both"):
            functions.append(dataclasses.replace(fn, alignment=assumed, aligned=True))
    return dataclasses.replace(module, functions=tuple(functions))


def _planned_view(v: L.View, proven: NonNegative) -> L.View:
    return dataclasses.replace(v, nonneg=tuple(proven.holds(s) for s in v.starts))


def _planned_statement(s: L.Stmt, buffers: dict[str, L.Buffer], divisors: Divisors, proven: NonNegative) -> L.Stmt:
    if isinstance(s, L.Copy):
        tma = dataclasses.replace(s.tma, active=divisors.aligned) if s.tma is not None else None
        return dataclasses.replace(s, dst=_planned_view(s.dst, proven), src=_planned_view(s.src, proven),
                                   plan=copy_plan(s, buffers, divisors), tma=tma)
    if isinstance(s, L.VecMove):
        return dataclasses.replace(s, view=_planned_view(s.view, proven), plan=vec_plan(s, buffers, divisors))
    if isinstance(s, L.Mma):
        return dataclasses.replace(s, a=_planned_view(s.a, proven), b=_planned_view(s.b, proven))
    if isinstance(s, L.FragLoad):
        return dataclasses.replace(s, src=_planned_view(s.src, proven))
    if isinstance(s, L.FragStore):
        return dataclasses.replace(s, dst=_planned_view(s.dst, proven))
    return s


def plan_copies(module: L.Module) -> L.Module:
    """Before:  copy As[0+:16, 0+:64] <- A[(r0 - 1)+:16, k0+:64]
    After:   copy As[0+:16, 0+:64] <- A[(r0 - 1)+:16, k0+:64] [chunks of 16 bytes; lower edge tested: A dimension 0]"""
    tables = {t.name: t.as_buffer() for t in module.tables}
    functions = []
    for fn in module.functions:
        plan = functools.partial(_planned_statement, buffers={**tables, **{b.name: b for b in fn.buffers}},
                                 divisors=Divisors(fn), proven=NonNegative(fn))
        functions.append(dataclasses.replace(fn, body=map_body(fn.body, plan)))
    return dataclasses.replace(module, functions=tuple(functions))


def _planned_loop(s: L.Stmt, fn: L.Function) -> L.Stmt:
    if not isinstance(s, L.ElementLoop):
        return s
    read, written = map_tensors(s)
    return dataclasses.replace(s, read=read, written=written, pair=pair_type(fn, s))


def plan_maps(module: L.Module) -> L.Module:
    """Before:  for each of the n elements, 8 per tile:
    After:   for each of the n elements, 8 per tile [reads X, Y; writes Z; f16 pairs]:"""
    return dataclasses.replace(module, functions=tuple(
        dataclasses.replace(fn, body=map_body(fn.body, functools.partial(_planned_loop, fn=fn)))
        for fn in module.functions))


__all__ = ["plan_alignment", "plan_copies", "plan_maps"]
