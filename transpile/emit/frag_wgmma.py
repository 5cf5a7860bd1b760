"""Printing a `tmma` of a wgmma kernel (sm_90a, passes/plan_wgmma.py) as C: per k step and per m64
block of the warpgroup, the shared-memory matrix descriptors of A (or A's registers, from an
operand fragment) and B, and the instructions of emit/wgmma_asm.py over N; fenced, committed and
waited for within the statement, so that the fragment is complete after it as after mma.sync.

    {  // tmma(acc, As, Bs): 2 warpgroups (wgmma), 64x128 per warpgroup, ...
        ...
        tsr_wgmma_fence_operands<64>(&acc[0]);
        tsr_wgmma_arrive();
        for (int tsr_k = 0; tsr_k < 32; tsr_k += 16) {
            ... tsr_da = tsr_wgmma_desc(tsr_pa + <row 64 i of the warpgroup, column k>, 16, 512, 2);
            ... tsr_db = tsr_wgmma_desc(tsr_pb + <row k, column 0>, 4096, 1024, 1);
            tsr_wgmma_f16_n128_ss_mn(&acc[0], nullptr, tsr_da, tsr_pa, tsr_db, tsr_pb, tsr_tid, 0);
        }
        tsr_wgmma_commit();
        tsr_wgmma_wait<0>();
        tsr_wgmma_fence_operands<64>(&acc[0]);
    }

Descriptor start addresses are the unswizzled byte offsets of the operand's first element (a row
that is a multiple of 8, a column inside one swizzle atom's row): the hardware applies the swizzle
to the addresses it forms from there (lir/swizzle.py).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from tessera.transpile.emit import frag_operands
from tessera.transpile.emit.frag_common import lanes, layout_of, unrolled
from tessera.transpile.emit.memory.views import view_lists
from tessera.transpile.emit.mma_checks import print_view_checks
from tessera.transpile.emit.wgmma_asm import WgmmaShape, instruction_n
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.frag_layout import MMA_KINDS
from tessera.transpile.lir.swizzle import WGMMA_LAYOUT, SwizzledMatrix
from tessera.transpile.names import c_ident

if TYPE_CHECKING:
    from tessera.transpile.emit.stmts import BodyPrinter


def matrix(b: L.Buffer) -> SwizzledMatrix:
    rows, cols = (int(d.value) for d in b.shape[-2:])  # type: ignore[union-attr]
    return SwizzledMatrix(rows, cols, b.elem.size, b.swizzle)


def _k_major_start(m: SwizzledMatrix, row: str, k: str) -> str:
    """The byte offset of (row, k) in a K-major operand (rows M or N; row a multiple of 8)."""
    kb = f"({k}) * {m.size}"
    panel = "" if m.panels == 1 else f"(({kb}) / {m.mode}) * {m.panel_bytes} + "
    return f"{panel}({row}) * {m.mode} + ({kb}) % {m.mode}"


def _mn_major_start(m: SwizzledMatrix, k: str, n0: str) -> str:
    """The byte offset of (k, n0) in an MN-major B[K, N] (k a multiple of 8)."""
    nb = f"({n0}) * {m.size}"
    panel = "" if m.panels == 1 else f"(({nb}) / {m.mode}) * {m.panel_bytes} + "
    return f"{panel}({k}) * {m.mode} + ({nb}) % {m.mode}"


def _matrix_start(bp: BodyPrinter, v: L.View, k_axis: int) -> tuple[str, str]:
    """(the first element of the matrix that view `v` reads, the C of the view's first K index):
    a view may slice its matrices along K (passes/plan_wgmma.py), and the descriptors start at
    that K inside the swizzled matrix."""
    zero = L.Const(0, v.starts[-1].dtype)
    whole = dataclasses.replace(v, starts=(*v.starts[:-2], zero, zero))
    return view_lists(bp.pr, whole)[0], bp.pr.expr(v.starts[k_axis])


def _plus(k0: str, k: str) -> str:
    return k if k0 == "0" else f"{k0} + {k}"


def _desc(m: SwizzledMatrix, ptr: str, start: str, k_major: bool) -> str:
    lbo, sbo = m.descriptor_strides(k_major)
    return f"tsr_wgmma_desc((const unsigned char*){ptr} + {start}, {lbo}u, {sbo}u, {WGMMA_LAYOUT[m.mode]}u)"


def print_wgmma(bp: BodyPrinter, s: L.Mma) -> None:
    lay = layout_of(bp, s.acc)
    a_buf, b_buf = bp.fn.buffer(s.a.buf), bp.fn.buffer(s.b.buf)
    assert a_buf is not None and b_buf is not None
    elem = b_buf.elem
    kind = MMA_KINDS[elem.name]
    k_total = [x for x in s.b.extents if x is not None][1 if s.trans_b else 0]
    regs_a = a_buf.space == "frag"
    ni = instruction_n(lay.n)
    shape = WgmmaShape(elem.name, ni, regs_a, not s.trans_b)
    line = s.loc.line if bp.pr.ctx.check_bounds else 0
    acc = c_ident(s.acc)
    what = f"tmma({s.acc}, {s.a.buf}, {s.b.buf}{', trans_b=True' if s.trans_b else ''})"
    print_view_checks(bp, s)
    bp.emit(f"{{  // {what}: {lay.describe(s.acc)}, wgmma m64n{ni}k{kind.k}", s.loc)
    bp.depth += 1
    lanes(bp)
    bm = matrix(b_buf)
    ka = "0"
    if not regs_a:
        am = matrix(a_buf)
        pa, ka = _matrix_start(bp, s.a, -1)
        bp.emit(f"const {elem.c_storage}* tsr_pa = {pa};  // {am.mode}-byte swizzle")
    else:
        bp.emit("const void* tsr_pa = nullptr;")
    pb, kb = _matrix_start(bp, s.b, -1 if s.trans_b else -2)
    bp.emit(f"const {elem.c_storage}* tsr_pb = {pb};  // {bm.mode}-byte swizzle")
    bp.emit(f"const int tsr_wg_row = (tsr_warp >> 2) * {4 * lay.warp_m};  // the warpgroup's first row")
    bp.emit(f"tsr_wgmma_fence_operands<{lay.per_lane}>(&{acc}[0]);")
    bp.emit("tsr_wgmma_arrive();")
    unrolled(bp, "tsr_k", k_total, kind.k, "{")
    bp.depth += 1
    if regs_a:
        bp.emit(f"unsigned tsr_a[{lay.tiles_m}][4];")
        frag_operands.a_from_registers(bp, s.a.buf)
    unrolled(bp, "tsr_i", lay.tiles_m, 1, "{")
    bp.depth += 1
    if regs_a:
        bp.emit("const unsigned long long tsr_da = 0;")
    else:
        start = _k_major_start(am, "tsr_wg_row + tsr_i * 64", _plus(ka, "tsr_k"))
        bp.emit(f"const unsigned long long tsr_da = {_desc(am, 'tsr_pa', start, True)};")
    unrolled(bp, "tsr_j", lay.n // ni, 1, "{")
    bp.depth += 1
    k = _plus(kb, "tsr_k")
    b_start = _k_major_start(bm, f"tsr_j * {ni}", k) if s.trans_b else _mn_major_start(bm, k, f"tsr_j * {ni}")
    bp.emit(f"const unsigned long long tsr_db = {_desc(bm, 'tsr_pb', b_start, s.trans_b)};")
    a_arg = "tsr_a[tsr_i]" if regs_a else "nullptr"
    bp.emit(f"{shape.name}(&{acc}[(tsr_i * {lay.tiles_n} + tsr_j * {ni // 8}) * 4], {a_arg}, tsr_da, tsr_pa, tsr_db, "
            f"tsr_pb, tsr_tid, {line});")
    for _ in range(3):  # the loops over j, i and k
        bp.depth -= 1
        bp.emit("}")
    bp.emit("tsr_wgmma_commit();")
    bp.emit("tsr_wgmma_wait<0>();")
    bp.emit(f"tsr_wgmma_fence_operands<{lay.per_lane}>(&{acc}[0]);")
    bp.depth -= 1
    bp.emit("}")


__all__ = ["matrix", "print_wgmma"]
