"""Printing a map kernel's `ElementLoop` (spec section 8) as C.

Each group takes steps of `tiles x width` consecutive elements, striding over the grid (one
step per group when the grid is derived from the element count). The generic variant gives tile
`t` the elements `step + e * tiles + t` for `e < width`, so that every access of a warp is
coalesced. The aligned variant gives tile `t` the `width` consecutive elements from
`step + t * width`: a whole step loads each tensor the body reads into a register array with
16-byte words where the type allows (`tsr_vload`), runs the body once per element on the
registers and stores each written tensor the same way (`tsr_vstore`); a tile whose elements run
past the end takes them one at a time (the scalar tail). The body is printed as the statements
are, a tensor's element being `X[j]` or `tsr_lanes_X[tsr_e]` (the printer's `elements`).

    const long long tsr_count = (long long)n;  // line 3: the map's elements
    for (long long tsr_step = (long long)tsr_group_linear_id() * 1024; tsr_step < tsr_count; ...) {
        const long long tsr_first = tsr_step + (long long)threadIdx.x * 4;
        if (tsr_first + 4 <= tsr_count) {
            alignas(16) float tsr_lanes_X[4]; tsr_vload(tsr_lanes_X, X + tsr_first);
            ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tessera.transpile import lir as L
from tessera.transpile.lir_visit import statements, stmt_walk
from tessera.transpile.names import c_ident

if TYPE_CHECKING:
    from tessera.transpile.cstmt import BodyPrinter


def map_tensors(loop: L.ElementLoop) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The tensors whose elements the body reads before writing them (loaded first), and those it
    writes, each in order of first use."""
    read: list[str] = []
    written: list[str] = []
    for s in statements(loop.body):
        for e in stmt_walk(s):
            if isinstance(e, L.Load) and not e.index and e.buf not in read and e.buf not in written:
                read.append(e.buf)
        if isinstance(s, L.Store) and not s.index:
            if s.op is not None and s.buf not in read and s.buf not in written:
                read.append(s.buf)
            if s.buf not in written:
                written.append(s.buf)
    return tuple(read), tuple(written)


def element_loop(fn: L.Function) -> L.ElementLoop | None:
    """The loop of a map kernel (None for other functions)."""
    return next((s for s in fn.body if isinstance(s, L.ElementLoop)), None)


def has_vector_variant(fn: L.Function) -> bool:
    """Whether the aligned variant of `fn` moves elements in words wider than one element."""
    loop = element_loop(fn)
    return loop is not None and loop.width > 1


def print_element_loop(bp: BodyPrinter, s: L.ElementLoop) -> None:
    pr = bp.pr
    tiles, width = bp.fn.tile_count, s.width
    step = tiles * width
    bp.emit(f"// every element of the map's tensors, {width} per tile and step")
    bp.emit(f"const long long tsr_count = {pr.expr(s.count)};", s.loc)
    bp.emit(f"for (long long tsr_step = (long long)tsr_group_linear_id() * {step}; tsr_step < tsr_count; "
            f"tsr_step += (long long)tsr_grid_groups() * {step}) {{")
    bp.depth += 1
    if bp.fn.aligned and width > 1:
        _vector_step(bp, s)
    elif width == 1:
        bp.emit(f"const long long tsr_j = tsr_step + {pr.tid()};")
        _guarded(bp, s, "tsr_j")
    else:
        bp.emit("#pragma unroll")
        bp.emit(f"for (int tsr_e = 0; tsr_e < {width}; ++tsr_e) {{")
        bp.depth += 1
        bp.emit(f"const long long tsr_j = tsr_step + tsr_e * {tiles} + {pr.tid()};")
        _guarded(bp, s, "tsr_j")
        bp.depth -= 1
        bp.emit("}")
    bp.depth -= 1
    bp.emit("}")


def _guarded(bp: BodyPrinter, s: L.ElementLoop, j: str) -> None:
    bp.emit(f"if ({j} < tsr_count) {{")
    _body(bp, s, {t: f"{c_ident(t)}[{j}]" for t in _all(s)})
    bp.emit("}")


def _vector_step(bp: BodyPrinter, s: L.ElementLoop) -> None:
    width = s.width
    read, written = map_tensors(s)
    buffers = bp.pr.ctx.buffers
    bp.emit(f"const long long tsr_first = tsr_step + (long long){bp.pr.tid()} * {width};")
    bp.emit(f"if (tsr_first + {width} <= tsr_count) {{  // whole words")
    bp.depth += 1
    for t in dict.fromkeys(read + written):
        decl = f"alignas(16) {buffers[t].elem.c_storage} {_lanes(t)}[{width}];"
        bp.emit(decl + (f" tsr_vload({_lanes(t)}, {c_ident(t)} + tsr_first);" if t in read else ""))
    bp.emit("#pragma unroll")
    bp.emit(f"for (int tsr_e = 0; tsr_e < {width}; ++tsr_e) {{")
    _body(bp, s, {t: f"{_lanes(t)}[tsr_e]" for t in _all(s)})
    bp.emit("}")
    for t in written:
        bp.emit(f"tsr_vstore({c_ident(t)} + tsr_first, {_lanes(t)});")
    bp.depth -= 1
    bp.emit("} else {  // the tail: one element at a time")
    bp.depth += 1
    bp.emit("for (long long tsr_j = tsr_first; tsr_j < tsr_count; ++tsr_j) {")
    _body(bp, s, {t: f"{c_ident(t)}[tsr_j]" for t in _all(s)})
    bp.emit("}")
    bp.depth -= 1
    bp.emit("}")


def _lanes(tensor: str) -> str:
    return f"tsr_lanes_{c_ident(tensor)}"


def _all(s: L.ElementLoop) -> tuple[str, ...]:
    read, written = map_tensors(s)
    return read + written


def _body(bp: BodyPrinter, s: L.ElementLoop, elements: dict[str, str]) -> None:
    saved = bp.pr.elements
    bp.pr.elements = elements
    bp.block(s.body)
    bp.pr.elements = saved
