"""What the printers of fragment statements share (emit/frags.py, frag_rows.py, frag_operands.py):
each fragment's division and per-lane register count (lir/frag_layout.py), the lane and warp of the
tile, unrolled loops, and printing with every fragment's name meaning the element being computed."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.frag_buffers import is_column_vector_shape, layout_of_buffer
from tessera.transpile.lir.frag_layout import FragLayout
from tessera.transpile.names import c_ident

if TYPE_CHECKING:
    from tessera.transpile.emit.stmts import BodyPrinter


def layout_of(bp: BodyPrinter, name: str) -> FragLayout:
    return layout_of_buffer(bp.fn, name)


def is_vector(bp: BodyPrinter, name: str) -> bool:
    """A row vector (`tfrag(f32[M])`) or a column vector (`tfrag(f32[1, N])`)."""
    b = bp.fn.buffer(name)
    return b is not None and b.space == "frag" and (len(b.shape) == 1 or is_column_vector_shape(b.shape))


def is_column(bp: BodyPrinter, name: str) -> bool:
    b = bp.fn.buffer(name)
    return b is not None and b.space == "frag" and is_column_vector_shape(b.shape)


def per_lane(bp: BodyPrinter, name: str) -> int:
    """Registers of the fragment `name` in each lane (a row vector: its slots; a column vector:
    its column slots)."""
    lay = layout_of(bp, name)
    if is_column(bp, name):
        return lay.col_slots
    return lay.slots if is_vector(bp, name) else lay.per_lane


def lanes(bp: BodyPrinter) -> None:
    bp.emit(f"const int tsr_tid = {bp.pr.tid()};")
    bp.emit("const int tsr_lane = tsr_tid & 31, tsr_warp = tsr_tid >> 5;")


def unrolled(bp: BodyPrinter, var: str, stop: int, step: int, text: str) -> None:
    bp.emit("#pragma unroll")
    inc = f"++{var}" if step == 1 else f"{var} += {step}"
    bp.emit(f"for (int {var} = 0; {var} < {stop}; {inc}) {text}")


def assign(bp: BodyPrinter, s: L.FragAssign, lhs: str) -> str:
    """The statement `s` for one element `lhs`; float division in a 2-D statement (every element
    of the lane) as `tsr_fdiv` (emit/exprs.py `inline_division`; a row vector's few slots keep
    CUDA's `/`: its slow path, called, costs fewer registers there than inlined)."""
    bp.pr.in_fragment = not is_vector(bp, s.acc)
    try:
        _assign(bp, s, lhs)
    finally:
        bp.pr.in_fragment = False
    return ""


def _assign(bp: BodyPrinter, s: L.FragAssign, lhs: str) -> None:
    acc = bp.fn.buffer(s.acc)
    assert acc is not None
    if acc.elem.is_half:  # an operand fragment: stored rounded once (an update reads its element first)
        value = s.value if s.op is None else L.Binary(s.op, L.converted(L.Load(s.acc, (), acc.elem), s.op_type or acc.elem),
                                                          s.value, s.op_type or acc.elem)
        if isinstance(value, L.Cast) and value.dtype == acc.elem:  # rounded once, by the store
            value = value.x
        bp.emit(f"{lhs} = {bp.pr.stored(value, acc.elem)};", s.loc)
    elif s.op is None:
        bp.emit(f"{lhs} = {bp.pr.cast_to(s.value, acc.elem)};", s.loc)
    else:
        bp.update(lhs, L.Load(s.acc, (), acc.elem), s.op, s.op_type, s.value, s.loc, None)


def with_fragments(bp: BodyPrinter, f: Callable[[], str]) -> str:
    """`f()` printed with every fragment's name meaning its element `tsr_e` (a row vector: the
    slot `tsr_q` of the element's row; a column vector: the slot `tsr_cq` of its column)."""
    names = [b.name for b in bp.fn.buffers if b.space == "frag"]
    saved = {n: bp.pr.elements.get(n) for n in names}
    for n in names:
        slot = "tsr_cq" if is_column(bp, n) else "tsr_q" if is_vector(bp, n) else "tsr_e"
        bp.pr.elements[n] = f"{c_ident(n)}[{slot}]"
    try:
        return f()
    finally:
        for n in names:
            restore(bp, n, saved[n])


def restore(bp: BodyPrinter, name: str, saved: str | None) -> None:
    if saved is None:
        bp.pr.elements.pop(name, None)
    else:
        bp.pr.elements[name] = saved


def close(bp: BodyPrinter) -> None:
    bp.depth -= 1
    bp.emit("}")
    bp.depth -= 1
    bp.emit("}")


__all__ = ["assign", "close", "is_column", "is_vector", "lanes", "layout_of", "per_lane", "restore", "unrolled", "with_fragments"]
