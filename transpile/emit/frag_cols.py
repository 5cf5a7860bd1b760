"""Printing reductions across warps (spec section 14; made explicit by passes/frag_scratch.py) as
C: a warp's part of `tsum(S, axis=0)` (`FragReduce`: the lane's own elements of each column it
holds, then xor shuffles over the 8 lanes of the warp that hold the column, lir/frag_layout.py
COL_LANE_MASKS), written by one lane per column to the warp's row of the shared scratch or, with
one warp, kept as the column vector; and the combination of the warps' parts (`FragCombine`).
A row reduction whose rows are spread over several warps (frag_layout.row_division) is printed
the same way along the other axis (the quad's shuffles, ROW_LANE_MASKS). The scratch's accesses
go through the race detector in check_bounds builds.

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

from tessera.transpile.emit.frag_common import is_column, lanes, layout_of, restore, unrolled
from tessera.transpile.emit.terms import load_fn
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.frag_layout import COL_LANE_MASKS, ROW_LANE_MASKS, FragLayout
from tessera.transpile.names import c_ident

if TYPE_CHECKING:
    from tessera.transpile.emit.stmts import BodyPrinter


def combiner(op: str, elem: L.ScalarType) -> Callable[[str, str], str]:
    """The C of `a op b` for a reduction `op` (tmax, tmin, tsum) of `elem` values."""
    if op == "tsum":
        return lambda a, b: f"{a} + {b}"
    fn = ("fmaxf" if op == "tmax" else "fminf") if elem.is_float else ("max" if op == "tmax" else "min")
    return lambda a, b: f"{fn}({a}, {b})"


def _scratch(bp: BodyPrinter, buf: str, at: str, part: str, how: str) -> str:
    """The scratch element of row `part` at the position `at`, through the race detector."""
    saved = bp.pr.elements.get(buf)
    bp.pr.elements[buf] = f"{c_ident(buf)}[{part}][{at}]"
    text = bp.pr.access(buf, (), how)
    restore(bp, buf, saved)
    return text


class _Axis:
    """What a reduction's printing needs of its axis: the slot loop (`tsr_cq` over the columns the
    lane holds, or `tsr_q` over its rows), the lane's elements of a slot, the shuffle masks, the
    origin, the slot's position, the lane that writes a warp's part and the warp's scratch row."""

    def __init__(self, lay: FragLayout, rows: bool) -> None:
        self.lay, self.rows = lay, rows
        self.slot = "tsr_q" if rows else "tsr_cq"
        self.slots = lay.slots if rows else lay.col_slots
        self.count = 2 * (lay.tiles_n if rows else lay.tiles_m)  # the lane's elements of a slot
        self.masks = ROW_LANE_MASKS if rows else COL_LANE_MASKS
        self.origin = f"const int tsr_r0 = {lay.c_row0()};" if rows else f"const int tsr_c0 = {lay.c_col0()};"
        self.at = lay.c_slot_row("tsr_q") if rows else lay.c_col_slot_col("tsr_cq")
        self.leader = "(tsr_lane & 3) == 0" if rows else lay.c_col_leader()
        self.part = lay.c_row_part() if rows else lay.c_col_part()
        self.parts = lay.warps_n if rows else lay.col_parts

    def element(self, k: str) -> str:
        return self.lay.c_slot_element("tsr_q", k) if self.rows else self.lay.c_col_slot_element("tsr_cq", k)


def _axis(bp: BodyPrinter, dst: str, src: str) -> _Axis:
    """A reduction into the row vector `dst` (along rows: each row's columns) or a column vector."""
    return _Axis(layout_of(bp, src), not is_column(bp, dst))


def print_frag_reduce(bp: BodyPrinter, s: L.FragReduce) -> None:
    ax = _axis(bp, s.dst, s.src)
    src, dst = bp.fn.buffer(s.src), bp.fn.buffer(s.dst)
    assert src is not None and dst is not None
    op = combiner(s.op, dst.elem)
    conv = load_fn(src.elem)  # an operand fragment's 16-bit elements, computed in f32

    def element(k: str) -> str:
        at = f"{c_ident(s.src)}[{ax.element(k)}]"
        return f"{conv}({at})" if conv else at
    parts = f" parts -> {s.buf}" if s.buf else ""
    bp.emit(f"{{  // {s.dst}[:] <- {s.op}({s.src}, axis={1 if ax.rows else 0}){parts}", s.loc)
    bp.depth += 1
    lanes(bp)
    bp.emit(ax.origin)
    unrolled(bp, ax.slot, ax.slots, 1, "{")
    bp.depth += 1
    bp.emit(f"{dst.elem.c_compute} tsr_v = {element('0')};")
    unrolled(bp, "tsr_k", ax.count - 1, 1, f"tsr_v = {op('tsr_v', element('tsr_k + 1'))};")
    for mask in ax.masks:  # the other lanes of the warp that hold the row or column
        bp.emit(f"tsr_v = {op('tsr_v', f'__shfl_xor_sync(0xffffffffu, tsr_v, {mask})')};")
    if s.buf:
        bp.emit(f"if ({ax.leader}) {_scratch(bp, s.buf, ax.at, ax.part, 'write')} = tsr_v;")
    else:
        bp.emit(f"{c_ident(s.dst)}[{ax.slot}] = tsr_v;")
    bp.depth -= 1
    bp.emit("}")
    bp.depth -= 1
    bp.emit("}")


def print_frag_combine(bp: BodyPrinter, s: L.FragCombine) -> None:
    ax = _Axis(layout_of(bp, s.dst), not is_column(bp, s.dst))
    dst = bp.fn.buffer(s.dst)
    assert dst is not None
    op = combiner(s.op, dst.elem)
    bp.emit(f"{{  // {s.dst}[:] <- {s.op}({s.buf} rows)", s.loc)
    bp.depth += 1
    lanes(bp)
    bp.emit(ax.origin)
    unrolled(bp, ax.slot, ax.slots, 1, "{")
    bp.depth += 1
    bp.emit(f"{dst.elem.c_compute} tsr_v = {_scratch(bp, s.buf, ax.at, '0', 'read')};")
    unrolled(bp, "tsr_w", ax.parts - 1, 1, f"tsr_v = {op('tsr_v', _scratch(bp, s.buf, ax.at, 'tsr_w + 1', 'read'))};")
    bp.emit(f"{c_ident(s.dst)}[{ax.slot}] = tsr_v;")
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
