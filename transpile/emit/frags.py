"""Printing the tensor-core fragment statements (spec section 12) as C: the per-lane register array
of a `tfrag`, the per-k-step loops of `tmma` over the warp's mma tiles (operands through `ldmatrix`
or per-lane loads, device/mma.cuh), `tload`/`tstore` element by element at the positions the
m16n8 accumulator layout gives each lane (lir/frag_layout.py), and elementwise statements as a loop
over the lane's elements.

    float acc[32];  // acc: 2x2 warps, 32x32 per warp, 2x4 mma tiles
    {  // tmma(acc, As, Bs)
        ...
        for (int tsr_k = 0; tsr_k < 32; tsr_k += 16) {
            unsigned tsr_a[2][4], tsr_b[4][2];
            ... tsr_ldmatrix_x4(tsr_a[tsr_i], ...) ... tsr_ldmatrix_x4_trans(tsr_b[tsr_j], ...)
            ... tsr_mma_m16n8k16_f16(&acc[(tsr_i * 4 + tsr_j) * 4], tsr_a[tsr_i], tsr_b[tsr_j], tsr_tid)
        }
    }
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tessera.base.errors import Loc
from tessera.transpile.emit import frag_cols, frag_operands, frag_rows, frag_wgmma
from tessera.transpile.emit.frag_common import (
    assign,
    close,
    is_column,
    is_vector,
    lanes,
    layout_of,
    per_lane,
    restore,
    unrolled,
    with_fragments,
)
from tessera.transpile.emit.memory.views import view_lists
from tessera.transpile.emit.mma_checks import print_view_checks
from tessera.transpile.emit.terms import store_fn
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.frag_layout import (
    MMA_KINDS,
    FragLayout,
    uses_ldmatrix,
)
from tessera.transpile.lir.visit import walk
from tessera.transpile.names import c_ident

if TYPE_CHECKING:
    from tessera.transpile.emit.stmts import BodyPrinter


def print_alloc(bp: BodyPrinter, b: L.Buffer, loc: Loc) -> None:
    lay = layout_of(bp, b.name)
    what = f"{b.name}: a column vector, one register per column the lane holds" if is_column(bp, b.name) \
        else f"{b.name}: a row vector, one register per row the lane holds" if is_vector(bp, b.name) \
        else lay.describe(b.name)
    ctype = b.elem.c_storage if b.elem.is_half else b.elem.c_compute  # operands: 16-bit registers, packed by tmma
    bp.emit(f"{ctype} {c_ident(b.name)}[{per_lane(bp, b.name)}];  // {what}", loc)


def print_fill(bp: BodyPrinter, s: L.Fill) -> None:
    b = bp.fn.buffer(s.buf)
    assert b is not None
    n = per_lane(bp, s.buf)
    ctype, value = (b.elem.c_storage, bp.pr.stored(s.value, b.elem)) if b.elem.is_half else \
        (b.elem.c_compute, bp.pr.expr(s.value))
    bp.emit(f"tsr_fill<{n}, {ctype}>(&{c_ident(s.buf)}[0], {value});", s.loc)


def print_mma(bp: BodyPrinter, s: L.Mma) -> None:
    if bp.fn.wgmma:
        frag_wgmma.print_wgmma(bp, s)
        return
    lay = layout_of(bp, s.acc)
    a_buf, b_buf = bp.fn.buffer(s.a.buf), bp.fn.buffer(s.b.buf)
    assert a_buf is not None and b_buf is not None
    elem = a_buf.elem
    kind = MMA_KINDS[elem.name]
    k_total = [x for x in s.a.extents if x is not None][1]
    regs_a = a_buf.space == "frag"  # A from an operand fragment: packed from its elements, no loads
    pa, sa_all, _, _ = view_lists(bp.pr, s.a) if not regs_a else ("", ["", ""], [], [])
    pb, sb_all, _, _ = view_lists(bp.pr, s.b)
    sa, sb = sa_all[1], sb_all[1]
    ctype = elem.c_storage
    tm, tn = lay.tiles_m, lay.tiles_n
    per16 = 16 // elem.size  # elements in the 16 bytes of an ldmatrix row
    # check_bounds: the operand loads take the line, for the CPU backend's race detector
    line = f", {s.loc.line}" if bp.pr.ctx.check_bounds else ""
    what = f"tmma({s.acc}, {s.a.buf}, {s.b.buf}{', trans_b=True' if s.trans_b else ''})"
    print_view_checks(bp, s)
    bp.emit(f"{{  // {what}: {lay.describe(s.acc)}", s.loc)
    bp.depth += 1
    lanes(bp)
    if not regs_a:
        bp.emit(f"const {ctype}* tsr_pa = {pa} + (tsr_warp / {lay.warps_n}) * {lay.warp_m} * {sa};")
    warp_col = f"(tsr_warp % {lay.warps_n}) * {lay.warp_n}"
    bp.emit(f"const {b_buf.elem.c_storage}* tsr_pb = {pb} + {warp_col}{f' * {sb}' if s.trans_b else ''};")
    unrolled(bp, "tsr_k", k_total, kind.k, "{")
    bp.depth += 1
    bp.emit(f"unsigned tsr_a[{tm}][4], tsr_b[{tn}][2];")
    if regs_a:
        frag_operands.a_from_registers(bp, s.a.buf)
    elif uses_ldmatrix(elem, "a", s.trans_b):
        unrolled(bp, "tsr_i", tm, 1, f"tsr_ldmatrix_x4(tsr_a[tsr_i], tsr_pa + (tsr_i * 16 + (tsr_lane & 15)) * {sa} "
                  f"+ tsr_k + (tsr_lane >> 4) * {per16}, tsr_tid{line and f'{line}, {elem.size}'});")
    else:
        unrolled(bp, "tsr_i", tm, 1, f"tsr_load_a_tf32(tsr_a[tsr_i], tsr_pa + tsr_i * 16 * {sa} + tsr_k, {sa}, "
                  f"tsr_tid{line});")
    if regs_a and elem.size != 2:  # B's rows in the order of the fragment's column pairs (frag_layout.pair_k)
        _b_pair_loads(bp, s, elem.size, tn, sb, line)
    else:
        _b_loads(bp, s, elem.size, tn, sb, per16, line)
    fn = {"f16": "tsr_mma_m16n8k16_f16", "bf16": "tsr_mma_m16n8k16_bf16", "f32": "tsr_mma_m16n8k8_tf32",
          "i8": "tsr_mma_m16n8k32_s8", "u8": "tsr_mma_m16n8k32_u8"}[elem.name]
    if b_buf.elem != elem:  # 8-bit operands of mixed signedness
        fn = f"tsr_mma_m16n8k32_{kind.ptx}{MMA_KINDS[b_buf.elem.name].ptx}"
    unrolled(bp, "tsr_i", tm, 1, "{")
    bp.depth += 1
    unrolled(bp, "tsr_j", tn, 1, f"{fn}(&{c_ident(s.acc)}[(tsr_i * {tn} + tsr_j) * 4], tsr_a[tsr_i], tsr_b[tsr_j], "
              "tsr_tid);")
    bp.depth -= 1
    bp.emit("}")
    bp.depth -= 1
    bp.emit("}")
    bp.depth -= 1
    bp.emit("}")


def _b_loads(bp: BodyPrinter, s: L.Mma, size: int, tn: int, sb: str, per16: int, line: str) -> None:
    """The B registers of the warp's n8 tiles for one k step: ldmatrix pairs of tiles (.x4) and
    a last single tile (.x2), or per-lane loads; `line` is the extra argument of check_bounds builds."""
    b_buf = bp.fn.buffer(s.b.buf)
    assert b_buf is not None
    if not uses_ldmatrix(b_buf.elem, "b", s.trans_b):
        if size == 4:
            call = ("tsr_load_bt_tf32(tsr_b[tsr_j], tsr_pb + tsr_j * 8 * {sb} + tsr_k, {sb}, tsr_tid{line});"
                    if s.trans_b else "tsr_load_b_tf32(tsr_b[tsr_j], tsr_pb + tsr_k * {sb} + tsr_j * 8, {sb}, tsr_tid{line});")
        else:
            call = "tsr_load_b_8bit(tsr_b[tsr_j], tsr_pb + tsr_k * {sb} + tsr_j * 8, {sb}, tsr_tid{line});"
        unrolled(bp, "tsr_j", tn, 1, call.format(sb=sb, line=line))
        return
    if s.trans_b:  # Bt[N, K]: rows are n, matrices (n tile, k half)
        def addr(pair: bool, j: str) -> str:
            n = f"{j} * 8 + (tsr_lane & 7){' + (tsr_lane >> 4) * 8' if pair else ''}"
            return f"tsr_pb + ({n}) * {sb} + tsr_k + ((tsr_lane >> 3) & 1) * {per16}"
        x4, x2 = "tsr_ldmatrix_x4", "tsr_ldmatrix_x2"
        line = line and f"{line}, {size}"  # and the element size (8-bit or 16-bit)
    else:  # B[K, N], 16-bit: rows are k, transposed by ldmatrix
        def addr(pair: bool, j: str) -> str:
            col = f"{j} * 8{' + (tsr_lane >> 4) * 8' if pair else ''}"
            return f"tsr_pb + (tsr_k + (tsr_lane & 7) + ((tsr_lane >> 3) & 1) * 8) * {sb} + {col}"
        x4, x2 = "tsr_ldmatrix_x4_trans", "tsr_ldmatrix_x2_trans"
    if tn >= 2:
        unrolled(bp, "tsr_j", tn - tn % 2, 2, f"{x4}(tsr_b[tsr_j], {addr(True, 'tsr_j')}, tsr_tid{line});")
    if tn % 2:
        bp.emit(f"{x2}(tsr_b[{tn - 1}], {addr(False, str(tn - 1))}, tsr_tid{line});")


def _b_pair_loads(bp: BodyPrinter, s: L.Mma, size: int, tn: int, sb: str, line: str) -> None:
    """The B registers of one k step for an A from an operand fragment of TF32 or 8-bit elements:
    per-lane loads of B's rows in the order of the fragment's column pairs (device/mma.cuh `_pairs`)."""
    kind = "tf32" if size == 4 else "8bit"
    if s.trans_b:
        call = f"tsr_load_bt_{kind}_pairs(tsr_b[tsr_j], tsr_pb + tsr_j * 8 * {sb} + tsr_k, {sb}, tsr_tid{line});"
    else:
        call = f"tsr_load_b_{kind}_pairs(tsr_b[tsr_j], tsr_pb + tsr_k * {sb} + tsr_j * 8, {sb}, tsr_tid{line});"
    unrolled(bp, "tsr_j", tn, 1, call)


def _positions(bp: BodyPrinter, lay: FragLayout) -> None:
    """Opens the loop over the lane's elements with `tsr_r`, `tsr_c` their row and column."""
    lanes(bp)
    bp.emit(lay.c_origin())
    unrolled(bp, "tsr_e", lay.per_lane, 1, "{")
    bp.depth += 1
    bp.emit(f"const int tsr_r = {lay.c_row('tsr_e')};")
    bp.emit(f"const int tsr_c = {lay.c_col('tsr_e')};")


def _view_frame(bp: BodyPrinter, v: L.View, const: bool) -> tuple[str, str, str]:
    """Declares `tsr_p`, `tsr_rows`, `tsr_cols` of a 2-D view (and `tsr_rlo`, `tsr_clo` where it
    may start before its tensor); returns its row and column strides and the test that element
    (`tsr_r`, `tsr_c`) is inside the tensor."""
    b = bp.pr.ctx.buffers[v.buf]
    ptr, strides, limits, lows = view_lists(bp.pr, v)
    bp.emit(f"{'const ' if const else ''}{b.elem.c_storage}* tsr_p = {ptr};")
    rows = limits[1] if limits[0] == "1" else f"({limits[0]}) > 0 ? {limits[1]} : 0"  # an indexed dimension's guard
    bp.emit(f"const int tsr_rows = {rows}, tsr_cols = {limits[2]};")
    inside = ["tsr_r < tsr_rows", "tsr_c < tsr_cols"]
    below = [f"tsr_{x} = {lo}" for x, lo in (("rlo", lows[1]), ("clo", lows[2])) if lo != "0"]
    if below:  # a view that starts before the tensor: those rows and columns are outside too
        bp.emit(f"const int {', '.join(below)};")
        inside = [f"tsr_{x[4]} >= tsr_{x[4]}lo" for x in below] + inside
    return strides[1], strides[2], " && ".join(inside)


def _offset(rs: str, cs: str) -> str:
    col = "tsr_c" if cs == "1" else f"tsr_c * {cs}"
    return f"(long long)tsr_r * {rs} + {col}"


def print_frag_load(bp: BodyPrinter, s: L.FragLoad) -> None:
    lay = layout_of(bp, s.acc)
    acc = bp.fn.buffer(s.acc)
    src = bp.pr.ctx.buffers[s.src.buf]
    assert acc is not None
    if frag_operands.loads_with_ldmatrix(bp, s):
        frag_operands.print_ldmatrix_load(bp, s)
        return
    bp.emit(f"{{  // tload({s.acc}, {s.src.buf}[...])", s.loc)
    bp.depth += 1
    rs, cs, inside = _view_frame(bp, s.src, True)
    if is_vector(bp, s.acc):
        element = f"{c_ident(s.acc)}[{_vector_positions(bp, lay, is_column(bp, s.acc))}]"
    else:
        _positions(bp, lay)
        element = f"{c_ident(s.acc)}[tsr_e]"
    saved = bp.pr.elements.get(s.src.buf)
    bp.pr.elements[s.src.buf] = f"tsr_p[{_offset(rs, cs)}]"
    if acc.elem.is_half:  # an operand fragment: its own type moves as is, another one rounds once
        value = bp.pr.elements[s.src.buf] if src.elem == acc.elem else bp.pr.stored(L.Load(s.src.buf, (), src.elem),
                                                                                    acc.elem)
    else:
        value = bp.pr.cast_to(L.Load(s.src.buf, (), src.elem), acc.elem)
    restore(bp, s.src.buf, saved)
    zero = "0.0f" if acc.elem.is_float else "0"
    if acc.elem.is_half:
        zero = f"{store_fn(acc.elem)}(0.0f)"
    bp.emit(f"{element} = {inside} ? {value} : {zero};")
    close(bp)


def _vector_positions(bp: BodyPrinter, lay: FragLayout, column: bool) -> str:
    """Opens the loop over a row vector's slots (`tsr_q`) for a 1-D view: `tsr_r` is the view's one
    row (0), `tsr_c` the slot's row of the fragment, the position in the view (a column vector:
    emit/frag_cols.py). Returns the slot's name."""
    if column:
        frag_cols.print_column_positions(bp, lay)
        return "tsr_cq"
    lanes(bp)
    bp.emit(f"const int tsr_r0 = {lay.c_row0()};")
    unrolled(bp, "tsr_q", lay.slots, 1, "{")
    bp.depth += 1
    bp.emit(f"const int tsr_r = 0, tsr_c = {lay.c_slot_row('tsr_q')};")
    return "tsr_q"


def print_frag_store(bp: BodyPrinter, s: L.FragStore) -> None:
    lay = layout_of(bp, s.acc)
    acc = bp.fn.buffer(s.acc)
    dst = bp.pr.ctx.buffers[s.dst.buf]
    assert acc is not None
    bp.emit(f"{{  // tstore({s.dst.buf}[...], {s.acc})", s.loc)
    bp.depth += 1
    rs, cs, inside = _view_frame(bp, s.dst, False)
    if is_vector(bp, s.acc):  # the 4 lanes of a quad hold the row: its first lane writes it
        column = is_column(bp, s.acc)
        _vector_positions(bp, lay, column)
        inside = f"{lay.c_col_writer() if column else lay.c_row_leader()} && {inside}"
    else:
        _positions(bp, lay)
    value = with_fragments(bp, lambda: bp.pr.stored(L.Load(s.acc, (), acc.elem), dst.elem))
    saved = bp.pr.elements.get(s.dst.buf)
    bp.pr.elements[s.dst.buf] = f"tsr_p[{_offset(rs, cs)}]"
    target = bp.pr.access(s.dst.buf, (), "write")  # into shared memory: a write for the race detector
    restore(bp, s.dst.buf, saved)
    bp.emit(f"if ({inside}) {target} = {value};")
    close(bp)


def _uses_coordinates(e: L.Expr) -> bool:
    return any(isinstance(x, L.Intrinsic) and x.op in ("row_index", "col_index") for x in walk(e))


def print_frag_assign(bp: BodyPrinter, s: L.FragAssign) -> None:
    lay = layout_of(bp, s.acc)
    acc = bp.fn.buffer(s.acc)
    assert acc is not None
    vector, reductions = is_vector(bp, s.acc), frag_rows.reductions(s.value)
    reads_vectors = any(isinstance(x, L.Load) and is_vector(bp, x.buf) for x in walk(s.value))
    if vector or reductions or reads_vectors:
        frag_rows.print_row_statement(bp, s, lay, reductions)
        return
    lhs = f"{c_ident(s.acc)}[tsr_e]"
    coordinates = _uses_coordinates(s.value)
    if coordinates:  # row_index() and col_index(): the element's position, tsr_r and tsr_c
        bp.emit(f"{{  // {s.acc}[:] = ... (with the element's coordinates)", s.loc)
        bp.depth += 1
        _positions(bp, lay)
    else:
        unrolled(bp, "tsr_e", lay.per_lane, 1, "{")
        bp.depth += 1
    with_fragments(bp, lambda: assign(bp, s, lhs))
    if coordinates:
        close(bp)
        return
    bp.depth -= 1
    bp.emit("}")


__all__ = ["print_alloc", "print_fill", "print_frag_assign", "print_frag_load", "print_frag_store", "print_mma"]
