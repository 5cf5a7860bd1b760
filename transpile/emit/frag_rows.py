"""Printing whole-fragment statements with row or column vectors and row reductions (spec section
14) as C: each reduction first, one value per row the lane holds (its own elements of the row, then
the other lanes of the row through xor shuffles: lir/frag_layout.py ROW_LANE_MASKS), then the
statement over the lane's elements (`tsr_e`, the slot of its row `tsr_q`, of its column `tsr_cq`)
or, for a vector target, over its slots. A row vector read in a 2-D statement is the slot of the
element's row, a column vector the slot of its column (column reductions were made column vectors
by passes/frag_scratch.py; emit/frag_cols.py prints them).

    {  // l[:] = ... (rows)
        float tsr_red0[2];  // tsum(S, axis=1): one value per row the lane holds
        for (int tsr_q = 0; tsr_q < 2; ++tsr_q) {
            float tsr_v = S[...];
            for (int tsr_k = 0; tsr_k < 7; ++tsr_k) tsr_v = tsr_v + S[...];
            tsr_v = tsr_v + __shfl_xor_sync(0xffffffffu, tsr_v, 1);
            tsr_v = tsr_v + __shfl_xor_sync(0xffffffffu, tsr_v, 2);
            tsr_red0[tsr_q] = tsr_v;
        }
        for (int tsr_q = 0; tsr_q < 2; ++tsr_q) {
            l[tsr_q] = l[tsr_q] + tsr_red0[tsr_q];
        }
    }
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tessera.transpile.emit.frag_common import (
    assign,
    close,
    is_column,
    is_vector,
    lanes,
    layout_of,
    unrolled,
    with_fragments,
)
from tessera.transpile.emit.terms import load_fn
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.frag_layout import REDUCTIONS, ROW_LANE_MASKS, FragLayout
from tessera.transpile.lir.visit import walk
from tessera.transpile.names import c_ident

if TYPE_CHECKING:
    from tessera.transpile.emit.stmts import BodyPrinter


def reductions(e: L.Expr) -> list[L.Intrinsic]:
    """The row reductions `e` reads (`tsum(S, axis=1)`: Intrinsic tsum of S's element), each once."""
    out: list[L.Intrinsic] = []
    for x in walk(e):
        if isinstance(x, L.Intrinsic) and x.op in REDUCTIONS and x not in out:
            out.append(x)
    return out


def _reduced(x: L.Intrinsic) -> str:
    load = x.args[0]
    assert isinstance(load, L.Load)
    return load.buf


def print_row_statement(bp: BodyPrinter, s: L.FragAssign, lay: FragLayout, reductions: list[L.Intrinsic]) -> None:
    """A statement with row vectors or row reductions: each reduction first, one value per slot
    (the lane's elements of the row, then the other lanes of its quad), then the statement over the
    lane's elements (tsr_e, its slot tsr_q) or, for a row-vector target, over its slots."""
    coords = {x.op for x in walk(s.value) if isinstance(x, L.Intrinsic) and x.op in ("row_index", "col_index")}
    bp.emit(f"{{  // {s.acc}[:] = ... (rows)", s.loc)
    bp.depth += 1
    if coords:
        lanes(bp)
        origin = [f"tsr_{x} = {c}" for x, c, op in (("r0", lay.c_row0(), "row_index"), ("c0", lay.c_col0(), "col_index"))
                  if op in coords]
        bp.emit(f"const int {', '.join(origin)};")
    for k, x in enumerate(reductions):
        _print_reduction(bp, layout_of(bp, _reduced(x)), x, f"tsr_red{k}")
        bp.pr.elements[f"{x.op}({_reduced(x)})"] = f"tsr_red{k}[tsr_q]"
    columns = any(isinstance(x, L.Load) and is_column(bp, x.buf) for x in walk(s.value))
    if is_column(bp, s.acc):  # a column-vector target: over the lane's column slots (tsr_cq)
        unrolled(bp, "tsr_cq", lay.col_slots, 1, "{")
        bp.depth += 1
        if "col_index" in coords:
            bp.emit(f"const int tsr_c = {lay.c_col_slot_col('tsr_cq')};")
        lhs = f"{c_ident(s.acc)}[tsr_cq]"
    elif is_vector(bp, s.acc):
        unrolled(bp, "tsr_q", lay.slots, 1, "{")
        bp.depth += 1
        if "row_index" in coords:
            bp.emit(f"const int tsr_r = {lay.c_slot_row('tsr_q')};")
        lhs = f"{c_ident(s.acc)}[tsr_q]"
    else:
        unrolled(bp, "tsr_e", lay.per_lane, 1, "{")
        bp.depth += 1
        bp.emit(f"const int tsr_q = {lay.c_slot('tsr_e')};")
        if columns:
            bp.emit(f"const int tsr_cq = {lay.c_col_slot('tsr_e')};")
        if "row_index" in coords:
            bp.emit(f"const int tsr_r = {lay.c_row('tsr_e')};")
        if "col_index" in coords:
            bp.emit(f"const int tsr_c = {lay.c_col('tsr_e')};")
        lhs = f"{c_ident(s.acc)}[tsr_e]"
    with_fragments(bp, lambda: assign(bp, s, lhs))
    for x in reductions:
        bp.pr.elements.pop(f"{x.op}({_reduced(x)})", None)
    close(bp)


def _print_reduction(bp: BodyPrinter, lay: FragLayout, x: L.Intrinsic, name: str) -> None:
    src = _reduced(x)
    b = bp.fn.buffer(src)
    assert b is not None
    ctype = b.elem.c_compute
    if x.op == "tsum":
        def op(a: str, c: str) -> str:
            return f"{a} + {c}"
    else:
        fn = ("fmaxf" if x.op == "tmax" else "fminf") if b.elem.is_float else ("max" if x.op == "tmax" else "min")

        def op(a: str, c: str) -> str:
            return f"{fn}({a}, {c})"
    bp.emit(f"{ctype} {name}[{lay.slots}];  // {x.op}({src}, axis=1): one value per row the lane holds")
    unrolled(bp, "tsr_q", lay.slots, 1, "{")
    bp.depth += 1
    first, other = lay.c_slot_element("tsr_q", "0"), lay.c_slot_element("tsr_q", "tsr_k + 1")
    conv = load_fn(b.elem)  # an operand fragment's 16-bit elements, computed in f32

    def element(k: str) -> str:
        return f"{conv}({c_ident(src)}[{k}])" if conv else f"{c_ident(src)}[{k}]"
    bp.emit(f"{ctype} tsr_v = {element(first)};")
    nxt = op("tsr_v", element(other))
    unrolled(bp, "tsr_k", 2 * lay.tiles_n - 1, 1, f"tsr_v = {nxt};")
    for mask in ROW_LANE_MASKS:  # the other lanes of the row (whole rows per warp: no other warp)
        shuffled = op("tsr_v", f"__shfl_xor_sync(0xffffffffu, tsr_v, {mask})")
        bp.emit(f"tsr_v = {shuffled};")
    bp.emit(f"{name}[tsr_q] = tsr_v;")
    bp.depth -= 1
    bp.emit("}")


__all__ = ["print_row_statement", "reductions"]
