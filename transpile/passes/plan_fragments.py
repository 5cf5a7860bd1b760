"""The `plan-fragments` pass (spec section 12): tensor-core fragments need sm_80 or newer; on sm_90a
a kernel whose tmma statements qualify becomes a warpgroup-MMA kernel whose operand arrays are
swizzled instead of padded (passes/plan_wgmma.py); otherwise the
shared arrays that `tmma` reads (and those that an operand fragment is loaded from, with ldmatrix,
as an A operand) get rows padded so that the operand loads are free of bank conflicts (frag_layout.operand_pad), unless the program gave `pad=` itself (then it is honoured as
written, and reported if it leaves `ldmatrix` rows that are not multiples of 16 bytes). On sm_90a
an array that the tensor memory accelerator fills (lir/tma.py) is not padded: it holds the box densely.
Column reductions become explicit parts, barrier and combine through shared scratch
(passes/frag_scratch.py); a tmma's second operand from registers goes through a shared copy
(passes/frag_b_operand.py).

Before (f16, `As: shared f16[64, 32]` without pad=):
    mma acc += As[0+:64, 0+:32] @ Bs[0+:32, 0+:64]
After (`As: shared f16[64, 32] pad=8`: rows of 80 bytes, five 16-byte units, so the 8 rows of an
ldmatrix phase start in 8 different groups of 4 banks):
    mma acc += As[0+:64, 0+:32] @ Bs[0+:32, 0+:64]
"""

from __future__ import annotations

import dataclasses

from tessera.base.errors import DiagnosticSink
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.frag_layout import needs_column_pad, operand_pad, uses_ldmatrix
from tessera.transpile.lir.shared_layout import arch_number
from tessera.transpile.lir.tma import tma_destinations
from tessera.transpile.lir.visit import statements
from tessera.transpile.passes.frag_b_operand import stage_register_b
from tessera.transpile.passes.frag_scratch import plan_scratch
from tessera.transpile.passes.mma_views import check_mma_views
from tessera.transpile.passes.plan_wgmma import plan_wgmma


def plan_fragments(module: L.Module, sink: DiagnosticSink, arch: str) -> L.Module:
    functions = tuple(plan_scratch(_plan(stage_register_b(fn), sink, arch)) for fn in module.functions)
    if all(a is b for a, b in zip(functions, module.functions)):
        return module
    return dataclasses.replace(module, functions=functions)


def _plan(fn: L.Function, sink: DiagnosticSink, arch: str) -> L.Function:
    frags = [b for b in fn.buffers if b.space == "frag"]
    if not frags:
        return fn
    if arch_number(arch) < 80:
        sink.error(frags[0].loc, f"tensor-core tile operations (tfrag, tmma) need sm_80 or newer; the target is "
                   f"{arch}")
        return fn
    if not check_mma_views(fn, sink):
        return fn
    fn = plan_wgmma(fn, arch)  # sm_90a: warpgroup MMAs read swizzled arrays, not padded ones
    pads: dict[str, int] = {}
    for s in statements(fn.body):
        src = fn.buffer(s.src.buf) if isinstance(s, L.FragLoad) else None
        acc = fn.buffer(s.acc) if isinstance(s, L.FragLoad) else None
        if src is not None and acc is not None and acc.elem.is_half and src.auto_pad and src.name not in pads \
                and isinstance(src.shape[-1], L.Const):  # an operand fragment's ldmatrix source: as an A operand
            pads[src.name] = operand_pad(src.elem, int(src.shape[-1].value), False)
        if not isinstance(s, L.Mma):
            continue
        for view, role in ((s.a, "a"), (s.b, "b")):
            b = fn.buffer(view.buf)
            assert b is not None and isinstance(b.shape[-1], L.Const)
            if b.space == "frag" or b.swizzle:  # an operand fragment (in registers), or swizzled for wgmma
                continue
            row = int(b.shape[-1].value)
            if b.auto_pad and b.name not in pads:
                pads[b.name] = operand_pad(b.elem, row, needs_column_pad(b.elem, role, s.trans_b))
            elif not b.auto_pad and uses_ldmatrix(b.elem, role, s.trans_b) and (row + b.pad) * b.elem.size % 16:
                sink.error(b.loc, f"tmma() reads '{b.name}' with ldmatrix, which needs rows of a multiple of 16 "
                           f"bytes; with pad={b.pad} they are {(row + b.pad) * b.elem.size} bytes (leave pad= out "
                           f"and the compiler pads the rows, or pad={operand_pad(b.elem, row, False)})")
                return fn
    for name in tma_destinations(fn):  # sm_90a: a bulk tensor copy writes its box unpadded (lir/tma.py)
        pads.pop(name, None)
    if not any(pads.get(b.name, b.pad) != b.pad for b in fn.buffers):
        return fn  # (with plan_wgmma's changes, if any)
    buffers = tuple(dataclasses.replace(b, pad=pads[b.name]) if b.name in pads else b for b in fn.buffers)
    return dataclasses.replace(fn, buffers=buffers)


__all__ = ["plan_fragments"]
