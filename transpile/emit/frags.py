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

from collections.abc import Callable
from typing import TYPE_CHECKING

from tessera.base.errors import Loc
from tessera.transpile.emit.mma_checks import print_view_checks
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.frag_layout import MMA_KINDS, FragLayout, choose, uses_ldmatrix
from tessera.transpile.names import c_ident

if TYPE_CHECKING:
    from tessera.transpile.emit.stmts import BodyPrinter


def layout_of(bp: BodyPrinter, name: str) -> FragLayout:
    b = bp.fn.buffer(name)
    assert b is not None and b.space == "frag"
    m, n = (int(d.value) for d in b.shape if isinstance(d, L.Const))
    layout = choose(m, n, bp.fn.tile_count // 32)
    assert layout is not None, "the type checker (checks/frags.py) reports fragments that no division fits"
    return layout


def print_alloc(bp: BodyPrinter, b: L.Buffer, loc: Loc) -> None:
    lay = layout_of(bp, b.name)
    bp.emit(f"{b.elem.c_compute} {c_ident(b.name)}[{lay.per_lane}];  // {lay.describe(b.name)}", loc)


def print_fill(bp: BodyPrinter, s: L.Fill) -> None:
    b = bp.fn.buffer(s.buf)
    assert b is not None
    lay = layout_of(bp, s.buf)
    bp.emit(f"tsr_fill<{lay.per_lane}, {b.elem.c_compute}>(&{c_ident(s.buf)}[0], {bp.pr.expr(s.value)});", s.loc)


def _lanes(bp: BodyPrinter) -> None:
    bp.emit(f"const int tsr_tid = {bp.pr.tid()};")
    bp.emit("const int tsr_lane = tsr_tid & 31, tsr_warp = tsr_tid >> 5;")


def _unrolled(bp: BodyPrinter, var: str, stop: int, step: int, text: str) -> None:
    bp.emit("#pragma unroll")
    inc = f"++{var}" if step == 1 else f"{var} += {step}"
    bp.emit(f"for (int {var} = 0; {var} < {stop}; {inc}) {text}")


def print_mma(bp: BodyPrinter, s: L.Mma) -> None:
    lay = layout_of(bp, s.acc)
    a_buf, b_buf = bp.fn.buffer(s.a.buf), bp.fn.buffer(s.b.buf)
    assert a_buf is not None and b_buf is not None
    elem = a_buf.elem
    kind = MMA_KINDS[elem.name]
    k_total = [x for x in s.a.extents if x is not None][1]
    pa, sa_all, _, _ = bp.view_lists(s.a)
    pb, sb_all, _, _ = bp.view_lists(s.b)
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
    _lanes(bp)
    bp.emit(f"const {ctype}* tsr_pa = {pa} + (tsr_warp / {lay.warps_n}) * {lay.warp_m} * {sa};")
    warp_col = f"(tsr_warp % {lay.warps_n}) * {lay.warp_n}"
    bp.emit(f"const {ctype}* tsr_pb = {pb} + {warp_col}{f' * {sb}' if s.trans_b else ''};")
    _unrolled(bp, "tsr_k", k_total, kind.k, "{")
    bp.depth += 1
    bp.emit(f"unsigned tsr_a[{tm}][4], tsr_b[{tn}][2];")
    if uses_ldmatrix(elem, "a", s.trans_b):
        _unrolled(bp, "tsr_i", tm, 1, f"tsr_ldmatrix_x4(tsr_a[tsr_i], tsr_pa + (tsr_i * 16 + (tsr_lane & 15)) * {sa} "
                  f"+ tsr_k + (tsr_lane >> 4) * {per16}, tsr_tid{line and f'{line}, {elem.size}'});")
    else:
        _unrolled(bp, "tsr_i", tm, 1, f"tsr_load_a_tf32(tsr_a[tsr_i], tsr_pa + tsr_i * 16 * {sa} + tsr_k, {sa}, "
                  f"tsr_tid{line});")
    _b_loads(bp, s, elem.size, tn, sb, per16, line)
    fn = {"f16": "tsr_mma_m16n8k16_f16", "bf16": "tsr_mma_m16n8k16_bf16", "f32": "tsr_mma_m16n8k8_tf32",
          "i8": "tsr_mma_m16n8k32_s8", "u8": "tsr_mma_m16n8k32_u8"}[elem.name]
    _unrolled(bp, "tsr_i", tm, 1, "{")
    bp.depth += 1
    _unrolled(bp, "tsr_j", tn, 1, f"{fn}(&{c_ident(s.acc)}[(tsr_i * {tn} + tsr_j) * 4], tsr_a[tsr_i], tsr_b[tsr_j], "
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
        _unrolled(bp, "tsr_j", tn, 1, call.format(sb=sb, line=line))
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
        _unrolled(bp, "tsr_j", tn - tn % 2, 2, f"{x4}(tsr_b[tsr_j], {addr(True, 'tsr_j')}, tsr_tid{line});")
    if tn % 2:
        bp.emit(f"{x2}(tsr_b[{tn - 1}], {addr(False, str(tn - 1))}, tsr_tid{line});")


def _positions(bp: BodyPrinter, lay: FragLayout) -> None:
    """Opens the loop over the lane's elements with `tsr_r`, `tsr_c` their row and column."""
    _lanes(bp)
    bp.emit(f"const int tsr_r0 = (tsr_warp / {lay.warps_n}) * {lay.warp_m} + (tsr_lane >> 2), "
            f"tsr_c0 = (tsr_warp % {lay.warps_n}) * {lay.warp_n} + (tsr_lane & 3) * 2;")
    _unrolled(bp, "tsr_e", lay.per_lane, 1, "{")
    bp.depth += 1
    bp.emit(f"const int tsr_r = tsr_r0 + (tsr_e / {4 * lay.tiles_n}) * 16 + ((tsr_e >> 1) & 1) * 8;")
    bp.emit(f"const int tsr_c = tsr_c0 + ((tsr_e >> 2) % {lay.tiles_n}) * 8 + (tsr_e & 1);")


def _view_frame(bp: BodyPrinter, v: L.View, const: bool) -> tuple[str, str, str]:
    """Declares `tsr_p`, `tsr_rows`, `tsr_cols` of a 2-D view (and `tsr_rlo`, `tsr_clo` where it
    may start before its tensor); returns its row and column strides and the test that element
    (`tsr_r`, `tsr_c`) is inside the tensor."""
    b = bp.pr.ctx.buffers[v.buf]
    ptr, strides, limits, lows = bp.view_lists(v)
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
    bp.emit(f"{{  // tload({s.acc}, {s.src.buf}[...])", s.loc)
    bp.depth += 1
    rs, cs, inside = _view_frame(bp, s.src, True)
    _positions(bp, lay)
    saved = bp.pr.elements.get(s.src.buf)
    bp.pr.elements[s.src.buf] = f"tsr_p[{_offset(rs, cs)}]"
    value = bp.pr.cast_to(L.Load(s.src.buf, (), src.elem), acc.elem)
    _restore(bp, s.src.buf, saved)
    zero = "0.0f" if acc.elem.is_float else "0"
    bp.emit(f"{c_ident(s.acc)}[tsr_e] = {inside} ? {value} : {zero};")
    _close(bp)


def print_frag_store(bp: BodyPrinter, s: L.FragStore) -> None:
    lay = layout_of(bp, s.acc)
    acc = bp.fn.buffer(s.acc)
    dst = bp.pr.ctx.buffers[s.dst.buf]
    assert acc is not None
    bp.emit(f"{{  // tstore({s.dst.buf}[...], {s.acc})", s.loc)
    bp.depth += 1
    rs, cs, inside = _view_frame(bp, s.dst, False)
    _positions(bp, lay)
    value = _with_fragments(bp, lambda: bp.pr.stored(L.Load(s.acc, (), acc.elem), dst.elem))
    saved = bp.pr.elements.get(s.dst.buf)
    bp.pr.elements[s.dst.buf] = f"tsr_p[{_offset(rs, cs)}]"
    target = bp.pr.access(s.dst.buf, (), "write")  # into shared memory: a write for the race detector
    _restore(bp, s.dst.buf, saved)
    bp.emit(f"if ({inside}) {target} = {value};")
    _close(bp)


def print_frag_assign(bp: BodyPrinter, s: L.FragAssign) -> None:
    lay = layout_of(bp, s.acc)
    acc = bp.fn.buffer(s.acc)
    assert acc is not None
    lhs = f"{c_ident(s.acc)}[tsr_e]"
    _unrolled(bp, "tsr_e", lay.per_lane, 1, "{")
    bp.depth += 1

    def body() -> str:
        if s.op is None:
            bp.emit(f"{lhs} = {bp.pr.cast_to(s.value, acc.elem)};", s.loc)
        else:
            bp.update(lhs, L.Load(s.acc, (), acc.elem), s.op, s.op_type, s.value, s.loc, None)
        return ""

    _with_fragments(bp, body)
    bp.depth -= 1
    bp.emit("}")


def _with_fragments(bp: BodyPrinter, f: Callable[[], str]) -> str:
    """`f()` printed with every fragment's name meaning its element `tsr_e`."""
    names = [b.name for b in bp.fn.buffers if b.space == "frag"]
    saved = {n: bp.pr.elements.get(n) for n in names}
    for n in names:
        bp.pr.elements[n] = f"{c_ident(n)}[tsr_e]"
    try:
        return f()
    finally:
        for n in names:
            _restore(bp, n, saved[n])


def _restore(bp: BodyPrinter, name: str, saved: str | None) -> None:
    if saved is None:
        bp.pr.elements.pop(name, None)
    else:
        bp.pr.elements[name] = saved


def _close(bp: BodyPrinter) -> None:
    bp.depth -= 1
    bp.emit("}")
    bp.depth -= 1
    bp.emit("}")


__all__ = ["layout_of", "print_alloc", "print_fill", "print_frag_assign", "print_frag_load", "print_frag_store",
           "print_mma"]
