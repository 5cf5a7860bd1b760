"""Printing operand fragments (spec section 14: `Q = tfrag(f16[BM, K])`) as C. An operand fragment
holds its elements in the accumulator layout of its shape (lir/frag_layout.py), so that the
mma.sync A registers of a k16 step are pairs of its 16-bit elements (the C layout of two n8 tiles is
the A layout of one k16 step): `P[:] = S` converts in place, lane by lane, and tmma packs the
registers without moving data between lanes; TF32 and 8-bit A registers are packed from the lane's
own elements too (lir/frag_layout.py `pair_k`). `tload` of a 16-bit fragment from a shared array of
its type uses ldmatrix (the A loads of tmma, unpacked into the elements); from anywhere else it
loads element by element (emit/frags.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tessera.transpile.emit.frag_common import lanes, layout_of, unrolled
from tessera.transpile.emit.memory.views import view_lists
from tessera.transpile.lir import nodes as L
from tessera.transpile.names import c_ident

if TYPE_CHECKING:
    from tessera.transpile.emit.stmts import BodyPrinter


def loads_with_ldmatrix(bp: BodyPrinter, s: L.FragLoad) -> bool:
    """A whole shared array of the fragment's 16-bit type, with rows of a multiple of 16 bytes."""
    acc, src = bp.fn.buffer(s.acc), bp.pr.ctx.buffers[s.src.buf]
    if acc is None or not acc.elem.is_half or src.space != "shared" or src.elem != acc.elem:
        return False
    whole = all(isinstance(x, L.Const) and x.value == 0 for x in s.src.starts)
    row = src.shape[-1]
    return whole and isinstance(row, L.Const) and (int(row.value) + src.pad) * 2 % 16 == 0


def print_ldmatrix_load(bp: BodyPrinter, s: L.FragLoad) -> None:
    lay = layout_of(bp, s.acc)
    acc = bp.fn.buffer(s.acc)
    assert acc is not None
    ptr, strides, _, _ = view_lists(bp.pr, s.src)
    stride = strides[1]
    line = f", {s.loc.line}, 2" if bp.pr.ctx.check_bounds else ""  # the race detector sees the reads
    half = "__ushort_as_half" if acc.elem.name == "f16" else "__ushort_as_bfloat16"
    name = c_ident(s.acc)
    bp.emit(f"{{  // tload({s.acc}, {s.src.buf}) with ldmatrix: {lay.describe(s.acc)}", s.loc)
    bp.depth += 1
    lanes(bp)
    row0 = f"({lay.c_warp_row0()})" if lay.wgmma else f"(tsr_warp / {lay.warps_n}) * {lay.warp_m}"
    bp.emit(f"const {acc.elem.c_storage}* tsr_pa = {ptr} + {row0} * {stride};")
    unrolled(bp, "tsr_k", lay.n, 16, "{")
    bp.depth += 1
    unrolled(bp, "tsr_i", lay.tiles_m, 1, "{")
    bp.depth += 1
    bp.emit("unsigned tsr_w[4];")
    bp.emit(f"tsr_ldmatrix_x4(tsr_w, tsr_pa + (tsr_i * {lay.m_step} + (tsr_lane & 15)) * {stride} + tsr_k + (tsr_lane >> 4) * 8, "
            f"tsr_tid{line});")
    unrolled(bp, "tsr_x", 4, 1, "{")
    bp.depth += 1
    bp.emit(f"const int tsr_at = {lay.c_a_register('tsr_i', 'tsr_k', 'tsr_x')};")
    bp.emit(f"{name}[tsr_at] = {half}((unsigned short)(tsr_w[tsr_x] & 0xffffu));")
    bp.emit(f"{name}[tsr_at + 1] = {half}((unsigned short)(tsr_w[tsr_x] >> 16));")
    for _ in range(4):  # the loops over x, i and k, and the block
        bp.depth -= 1
        bp.emit("}")


def a_from_registers(bp: BodyPrinter, name: str) -> None:
    """The A registers of the warp's m16 tiles for the k step `tsr_k` from an operand fragment: each
    register packed from the lane's own elements (lir/frag_layout.py `c_a_register_elements`: a
    16-bit pair, one TF32 value, or two pairs of bytes; no lane gives another anything, and for TF32
    and 8-bit elements tmma reads B's rows in the matching order, `pair_k`)."""
    b = bp.fn.buffer(name)
    assert b is not None
    lay = layout_of(bp, name)
    p = c_ident(name)
    unrolled(bp, "tsr_i", lay.tiles_m, 1, "{")
    bp.depth += 1
    if b.elem.size == 2:
        bits = "__half_as_ushort" if b.elem.name == "f16" else "__bfloat16_as_ushort"
        unrolled(bp, "tsr_x", 4, 1, "{")
        bp.depth += 1
        bp.emit(f"const int tsr_at = {lay.c_a_register('tsr_i', 'tsr_k', 'tsr_x')};")
        bp.emit(f"tsr_a[tsr_i][tsr_x] = (unsigned){bits}({p}[tsr_at]) | ((unsigned){bits}({p}[tsr_at + 1]) << 16);")
        bp.depth -= 1
        bp.emit("}")
    else:
        at = lay.c_a_register_elements(b.elem.size, "tsr_i", "tsr_k", "tsr_x")
        if b.elem.size == 4:  # TF32: rounded as the shared-memory loads round (cvt.rna)
            packed = f"tsr_tf32({p}[{at[0]}])"
        else:  # four bytes, low to high
            packed = " | ".join(f"((unsigned)(unsigned char){p}[{e}] << {8 * h})" for h, e in enumerate(at))
        unrolled(bp, "tsr_x", 4, 1, f"tsr_a[tsr_i][tsr_x] = {packed};")
    bp.depth -= 1
    bp.emit("}")


__all__ = ["a_from_registers", "loads_with_ldmatrix", "print_ldmatrix_load"]
