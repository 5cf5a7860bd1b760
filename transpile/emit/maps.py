"""Printing a map kernel's `ElementLoop` (spec section 8) as C.

Each group takes steps of `tiles x width` consecutive elements, striding over the grid (one
step per group when the grid is derived from the element count). The generic variant gives tile
`t` the elements `step + e * tiles + t` for `e < width`, so that every access of a warp is
coalesced. The aligned variant gives tile `t` the `width` consecutive elements from
`step + t * width`: a whole step loads each tensor the body reads into a register array with
16-byte words where the type allows (`tsr_vload`), runs the body once per element on the
registers and stores each written tensor the same way (`tsr_vstore`); a tile whose elements run
past the end takes them one at a time (the scalar tail). The body is printed as the statements
are, a tensor's element being `X[j]` or `tsr_lanes_X[tsr_e]` (the printer's `elements`). A tensor
that broadcasts to the map's shape (spec section 15) is indexed by the coordinates of the position
(`b[j % N]`); in the aligned variant, whose rows are whole steps (the map's last dimension a
multiple of 16), one contiguous along the last dimension is loaded with vector accesses too, and
any other is gathered into its register array element by element.

    const long long tsr_count = (long long)n;  // line 3: the map's elements
    for (long long tsr_step = (long long)tsr_group_linear_id() * 1024; tsr_step < tsr_count; ...) {
        const long long tsr_first = tsr_step + (long long)threadIdx.x * 4;
        if (tsr_first + 4 <= tsr_count) {
            alignas(16) float tsr_lanes_X[4]; tsr_vload(tsr_lanes_X, X + tsr_first);
            ...
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tessera.base.dtypes import F32, c_literal
from tessera.transpile.emit.terms import UNARY
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.maps import broadcast_dims, contiguous
from tessera.transpile.names import c_ident, var_name

if TYPE_CHECKING:
    from tessera.transpile.emit.stmts import BodyPrinter


def print_element_loop(bp: BodyPrinter, s: L.ElementLoop,
                       tile_loop: tuple[Callable[[], None], Callable[[], None]] | None = None) -> None:
    """`tile_loop`: region mode's opening and closing of the loop over the group's tiles, printed
    inside the grid-stride loop (which is the same for every tile of the group). Region mode runs
    a step's elements in order instead, one loop over them all (`_whole_step`), except in pair mode."""
    pr = bp.pr
    tiles, width = bp.fn.tile_count, s.width
    step = tiles * width
    bp.emit(f"// every element of the map's tensors, {width} per tile and step")
    bp.emit(f"const long long tsr_count = {pr.expr(s.count)};", s.loc)
    bp.emit(f"for (long long tsr_step = (long long)tsr_group_linear_id() * {step}; tsr_step < tsr_count; "
            f"tsr_step += (long long)tsr_grid_groups() * {step}) {{")
    bp.depth += 1
    if tile_loop is not None and s.pair is None:
        _whole_step(bp, s, step)
        bp.depth -= 1
        bp.emit("}")
        return
    if tile_loop is not None:
        tile_loop[0]()
    read, written = s.read, s.written
    assert written, "plan-maps plans every element loop"
    if bp.fn.aligned and width > 1:
        _vector_step(bp, s, read, written)
    elif width == 1:
        bp.emit(f"const long long tsr_j = tsr_step + {pr.tid()};")
        _guarded(bp, s, read + written, "tsr_j")
    else:
        bp.emit("#pragma unroll")
        bp.emit(f"for (int tsr_e = 0; tsr_e < {width}; ++tsr_e) {{")
        bp.depth += 1
        bp.emit(f"const long long tsr_j = tsr_step + tsr_e * {tiles} + {pr.tid()};")
        _guarded(bp, s, read + written, "tsr_j")
        bp.depth -= 1
        bp.emit("}")
    if tile_loop is not None:
        tile_loop[1]()
    bp.depth -= 1
    bp.emit("}")


def _whole_step(bp: BodyPrinter, s: L.ElementLoop, step: int) -> None:
    """Region mode's step: every tile of the group computes the elements of the step between them,
    each element on its own (the body names no tile), so one loop over the step's elements in order
    computes the same values: a contiguous loop of a constant trip count, without a test per element,
    which the C compiler vectorizes where the body allows; the last step, cut short, counts to the end."""
    elements = {t: _element(bp, s, t, "tsr_j") for t in dict.fromkeys(s.read + s.written)}
    bp.emit(f"if (tsr_step + {step} <= tsr_count) {{  // a whole step: its elements in order")
    bp.depth += 1
    bp.emit(f"for (long long tsr_e = 0; tsr_e < {step}; ++tsr_e) {{")
    bp.depth += 1
    bp.emit("const long long tsr_j = tsr_step + tsr_e;")
    bp.depth -= 1
    _body(bp, s, elements)
    bp.emit("}")
    bp.depth -= 1
    bp.emit("} else {  // the last step")
    bp.depth += 1
    bp.emit("for (long long tsr_j = tsr_step; tsr_j < tsr_count; ++tsr_j) {")
    _body(bp, s, elements)
    bp.emit("}")
    bp.depth -= 1
    bp.emit("}")


def _guarded(bp: BodyPrinter, s: L.ElementLoop, tensors: tuple[str, ...], j: str) -> None:
    bp.emit(f"if ({j} < tsr_count) {{")
    _body(bp, s, {t: _element(bp, s, t, j) for t in tensors})
    bp.emit("}")


def _element(bp: BodyPrinter, s: L.ElementLoop, tensor: str, j: str) -> str:
    """The C lvalue of `tensor`'s element at the map's flat position `j`."""
    return f"{c_ident(tensor)}[{_index(bp, s, tensor, j)}]"


def _index(bp: BodyPrinter, s: L.ElementLoop, tensor: str, j: str) -> str:
    """The index of `tensor`'s element at the map's flat position `j`: `j`, or for a tensor that
    broadcasts (lir/maps.py broadcast_dims) the element the position maps to, from the position's
    coordinates along the map's dimensions (`j % N` for a row `b: f32[N]` over `f32[M, N]`; a
    dimension whose extent only the launch knows counts when it is not 1)."""
    b = bp.pr.ctx.buffers[tensor]
    if b.shape == s.shape:
        return j
    dims = broadcast_dims(b.shape, s.shape)
    assert dims is not None, "the type checker makes every tensor a map reads broadcast"
    out = [bp.pr.wrap(d, UNARY) for d in s.shape]
    terms: list[str] = []
    stride: list[str] = []  # the tensor's extents after the dimension at hand
    for k in range(len(b.shape) - 1, -1, -1):
        o, how = dims[k]
        if how != "one":
            after = out[o + 1:]
            coord = (f"{j} / " + (f"({' * '.join(after)})" if len(after) > 1 else after[0])) if after else j
            if o > 0:
                coord = f"({coord}) % {out[o]}" if after else f"{coord} % {out[o]}"
            if how == "launch":
                coord = f"({bp.pr.wrap(b.shape[k], UNARY)} == 1 ? 0LL : {coord})"
            factors = [x for x in stride if x != "1"]
            terms.append(f"({coord})" + "".join(f" * {x}" for x in factors) if factors else coord)
        stride.insert(0, bp.pr.wrap(b.shape[k], UNARY))
    return " + ".join(terms) or "0"


def _vector_step(bp: BodyPrinter, s: L.ElementLoop, read: tuple[str, ...], written: tuple[str, ...]) -> None:
    width = s.width
    tensors = tuple(dict.fromkeys(read + written))
    buffers = bp.pr.ctx.buffers
    pair = s.pair
    lanes, ctype = (width // 2, _PAIRS[pair][0]) if pair else (width, "")
    bp.emit(f"const long long tsr_first = tsr_step + (long long){bp.pr.tid()} * {width};")
    bp.emit(f"if (tsr_first + {width} <= tsr_count) {{  // whole words")
    bp.depth += 1
    for t in tensors:
        b = buffers[t]
        first = _index(bp, s, t, "tsr_first")
        first = f"({first})" if " " in first else first
        ptr = f"reinterpret_cast<const {ctype}*>({c_ident(t)} + {first})" if pair else f"{c_ident(t)} + {first}"
        decl = f"alignas(16) {ctype or b.elem.c_storage} {_lanes(t)}[{lanes}];"
        if t in read and b.shape != s.shape and not contiguous(b, s):  # gathered element by element
            storage = f"reinterpret_cast<{b.elem.c_storage}*>({_lanes(t)})" if pair else _lanes(t)
            bp.emit(decl + f" for (int tsr_e = 0; tsr_e < {width}; ++tsr_e) {storage}[tsr_e] = "
                    f"{_element(bp, s, t, '(tsr_first + tsr_e)')};")
            continue
        bp.emit(decl + (f" tsr_vload({_lanes(t)}, {ptr});" if t in read else ""))
    bp.emit("#pragma unroll")
    bp.emit(f"for (int tsr_e = 0; tsr_e < {lanes}; ++tsr_e) {{" + ("  // two elements at a time" if pair else ""))
    if pair:
        _PairPrinter(bp, pair).block(s.body)
    else:
        _body(bp, s, {t: f"{_lanes(t)}[tsr_e]" for t in tensors})
    bp.emit("}")
    for t in written:
        ptr = f"reinterpret_cast<{ctype}*>({c_ident(t)} + tsr_first)" if pair else f"{c_ident(t)} + tsr_first"
        bp.emit(f"tsr_vstore({ptr}, {_lanes(t)});")
    bp.depth -= 1
    bp.emit("} else {  // the tail: one element at a time")
    bp.depth += 1
    bp.emit("for (long long tsr_j = tsr_first; tsr_j < tsr_count; ++tsr_j) {")
    _body(bp, s, {t: _element(bp, s, t, "tsr_j") for t in tensors})
    bp.emit("}")
    bp.depth -= 1
    bp.emit("}")


# f16/bf16 pair math: the C pair type, the splat of a float, and + - * as correctly rounded pair
# operations (the `_rn` forms are never contracted into a fused multiply-add).
_PAIRS = {"f16": ("__half2", "__float2half2_rn"), "bf16": ("__nv_bfloat162", "__float2bfloat162_rn")}
_PAIR_OPS = {"+": "__hadd2_rn", "-": "__hsub2_rn", "*": "__hmul2_rn"}


class _PairPrinter:
    """The body of a map kernel's vector step over pairs of f16/bf16 elements (`ElementLoop.pair`)."""

    def __init__(self, bp: BodyPrinter, half: str) -> None:
        self.bp = bp
        self.ctype, self.splat = _PAIRS[half]
        self.scalars = {p.name for p in bp.fn.params if p.kind != "tensor"}

    def block(self, body: tuple[L.Stmt, ...]) -> None:
        self.bp.depth += 1
        for st in body:
            if isinstance(st, L.Decl):
                assert st.init is not None
                self.bp.emit(f"{self.ctype} {var_name(st.var.name)} = {self.expr(st.init)};", st.loc)
            elif isinstance(st, L.Assign):
                self.bp.emit(f"{var_name(st.var.name)} = {self.update(var_name(st.var.name), st.op, st.value)};",
                             st.loc)
            else:
                assert isinstance(st, L.Store)
                self.bp.emit(f"{_lanes(st.buf)}[tsr_e] = {self.update(_lanes(st.buf) + '[tsr_e]', st.op, st.value)};",
                             st.loc)
        self.bp.depth -= 1

    def update(self, target: str, op: str | None, value: L.Expr) -> str:
        return self.expr(value) if op is None else f"{_PAIR_OPS[op]}({target}, {self.expr(value)})"

    def expr(self, e: L.Expr) -> str:
        if isinstance(e, L.Load):
            return f"{_lanes(e.buf)}[tsr_e]"
        if isinstance(e, L.Var):
            name = var_name(e.name)
            return f"{self.splat}({name})" if e.name in self.scalars else name
        if isinstance(e, L.Const):
            return f"{self.splat}({c_literal(float(e.value), F32)})"
        if isinstance(e, L.Unary):
            return f"__hneg2({self.expr(e.x)})"
        assert isinstance(e, L.Binary)
        return f"{_PAIR_OPS[e.op]}({self.expr(e.a)}, {self.expr(e.b)})"


def _lanes(tensor: str) -> str:
    return f"tsr_lanes_{c_ident(tensor)}"


def _body(bp: BodyPrinter, s: L.ElementLoop, elements: dict[str, str]) -> None:
    saved = bp.pr.elements
    bp.pr.elements = elements
    bp.block(s.body)
    bp.pr.elements = saved
