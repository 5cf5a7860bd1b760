"""Printing column reductions (spec section 14; made explicit by passes/frag_scratch.py) as C: a
warp's part of `tsum(S, axis=0)` (`FragReduce`: the lane's own elements of each column it holds,
then xor shuffles over the 8 lanes of the warp that hold the column, lir/frag_layout.py
COL_LANE_MASKS), written by one lane per column to the warp's row of the shared scratch or, with
one warp, kept as the column vector; and the combination of the warps' parts (`FragCombine`).
The scratch's accesses go through the race detector in check_bounds builds.

    {  // %col0[:] <- tsum(S) parts -> %colpart0
        const int tsr_tid = ...;
        const int tsr_lane = tsr_tid & 31, tsr_warp = tsr_tid >> 5;
        const int tsr_c0 = (tsr_warp % 1) * 32 + (tsr_lane & 3) * 2;
        for (int tsr_cq = 0; tsr_cq < 8; ++tsr_cq) {
            float tsr_v = S[...];
            for (int tsr_k = 0; tsr_k < 1; ++tsr_k) tsr_v = tsr_v + S[...];
            tsr_v = tsr_v + __shfl_xor_sync(0xffffffffu, tsr_v, 4);  // and 8, 16
            if ((tsr_lane >> 2) == 0) tsr_colpart0[tsr_warp / 1][tsr_c0 + ...] = tsr_v;
        }
    }
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tessera.transpile.emit.frag_common import lanes, layout_of, restore, unrolled
from tessera.transpile.emit.terms import load_fn
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.frag_layout import COL_LANE_MASKS, FragLayout
from tessera.transpile.names import c_ident

if TYPE_CHECKING:
    from tessera.transpile.emit.stmts import BodyPrinter


def combiner(op: str, elem: L.ScalarType) -> Callable[[str, str], str]:
    """The C of `a op b` for a reduction `op` (tmax, tmin, tsum) of `elem` values."""
    if op == "tsum":
        return lambda a, b: f"{a} + {b}"
    fn = ("fmaxf" if op == "tmax" else "fminf") if elem.is_float else ("max" if op == "tmax" else "min")
    return lambda a, b: f"{fn}({a}, {b})"


def _scratch(bp: BodyPrinter, buf: str, lay: FragLayout, part: str, how: str) -> str:
    """The scratch element of row `part` at the column of slot tsr_cq, through the race detector."""
    saved = bp.pr.elements.get(buf)
    bp.pr.elements[buf] = f"{c_ident(buf)}[{part}][{lay.c_col_slot_col('tsr_cq')}]"
    text = bp.pr.access(buf, (), how)
    restore(bp, buf, saved)
    return text


def print_frag_reduce(bp: BodyPrinter, s: L.FragReduce) -> None:
    lay = layout_of(bp, s.src)
    src, dst = bp.fn.buffer(s.src), bp.fn.buffer(s.dst)
    assert src is not None and dst is not None
    op = combiner(s.op, dst.elem)
    conv = load_fn(src.elem)  # an operand fragment's 16-bit elements, computed in f32

    def element(k: str) -> str:
        at = f"{c_ident(s.src)}[{lay.c_col_slot_element('tsr_cq', k)}]"
        return f"{conv}({at})" if conv else at
    parts = f" parts -> {s.buf}" if s.buf else ""
    bp.emit(f"{{  // {s.dst}[:] <- {s.op}({s.src}, axis=0){parts}", s.loc)
    bp.depth += 1
    lanes(bp)
    bp.emit(f"const int tsr_c0 = {lay.c_col0()};")
    unrolled(bp, "tsr_cq", lay.col_slots, 1, "{")
    bp.depth += 1
    bp.emit(f"{dst.elem.c_compute} tsr_v = {element('0')};")
    unrolled(bp, "tsr_k", 2 * lay.tiles_m - 1, 1, f"tsr_v = {op('tsr_v', element('tsr_k + 1'))};")
    for mask in COL_LANE_MASKS:  # the other lanes of the warp that hold the column
        bp.emit(f"tsr_v = {op('tsr_v', f'__shfl_xor_sync(0xffffffffu, tsr_v, {mask})')};")
    if s.buf:
        bp.emit(f"if ({lay.c_col_leader()}) {_scratch(bp, s.buf, lay, lay.c_col_part(), 'write')} = tsr_v;")
    else:
        bp.emit(f"{c_ident(s.dst)}[tsr_cq] = tsr_v;")
    bp.depth -= 1
    bp.emit("}")
    bp.depth -= 1
    bp.emit("}")


def print_frag_combine(bp: BodyPrinter, s: L.FragCombine) -> None:
    lay = layout_of(bp, s.dst)
    dst = bp.fn.buffer(s.dst)
    assert dst is not None
    op = combiner(s.op, dst.elem)
    bp.emit(f"{{  // {s.dst}[:] <- {s.op}({s.buf} rows)", s.loc)
    bp.depth += 1
    lanes(bp)
    bp.emit(f"const int tsr_c0 = {lay.c_col0()};")
    unrolled(bp, "tsr_cq", lay.col_slots, 1, "{")
    bp.depth += 1
    bp.emit(f"{dst.elem.c_compute} tsr_v = {_scratch(bp, s.buf, lay, '0', 'read')};")
    unrolled(bp, "tsr_w", lay.col_parts - 1, 1, f"tsr_v = {op('tsr_v', _scratch(bp, s.buf, lay, 'tsr_w + 1', 'read'))};")
    bp.emit(f"{c_ident(s.dst)}[tsr_cq] = tsr_v;")
    bp.depth -= 1
    bp.emit("}")
    bp.depth -= 1
    bp.emit("}")


def print_column_positions(bp: BodyPrinter, lay: FragLayout) -> None:
    """Opens the loop over a column vector's slots (`tsr_cq`) for a 1-D view (tload, tstore):
    `tsr_r` is the view's one row (0), `tsr_c` the slot's column, the position in the view."""
    lanes(bp)
    bp.emit(f"const int tsr_c0 = {lay.c_col0()};")
    unrolled(bp, "tsr_cq", lay.col_slots, 1, "{")
    bp.depth += 1
    bp.emit(f"const int tsr_r = 0, tsr_c = {lay.c_col_slot_col('tsr_cq')};")


__all__ = ["combiner", "print_column_positions", "print_frag_combine", "print_frag_reduce"]
