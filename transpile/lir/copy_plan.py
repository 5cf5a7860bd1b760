"""How each `tcopy` / `tcopy_async` and each tile's vector access (`r[:] = X[i, j:j + 8]`) moves
its data (the analysis of the plan-copies pass): the chunk width and whether alignment must be
tested at run time.

A chunk of VB bytes (16, 8, 4 or the element size) can be moved whole when both views' origins are
VB-aligned and every stride and innermost extent is a multiple of the chunk's elements (then a chunk
is wholly inside the tensor or wholly outside). What is constant (shared-memory strides, extents,
padding) bounds VB; what is known only at run time is proven where it can be from divisibility:

- the shape symbols that `aligned_symbols` names are divisible by 16 in a kernel's aligned variant
  (`Function.aligned`, chosen at launch when the arrays allow it) and global base pointers are
  16-byte aligned there;
- a constant divides itself; `a + b` by what divides both, `a * b` by the product, `a << c` by
  `2**c`; a loop variable by what divides its start and step, a local assigned once by what
  divides its value.

What is not proven is tested once per copy (`check`), falling back to single elements.

Example: `tcopy_async(As, A[r0:r0 + 64, k0:k0 + 16])` with `A: f32[M, K]`, `r0 = group_id(1) * 64`,
`for k0 in range(0, K, 16)`: in the aligned variant K is a multiple of 16, so the origin
`r0 * K + k0` and the stride K are multiples of 4 elements: 16-byte chunks, no test.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from tessera.base.irnode import ir_node
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.maps import element_loop, map_tensors, row_symbols
from tessera.transpile.lir.visit import statements

ALIGN = 16  # bytes: what the aligned variant assumes of global base pointers, and of shape symbols
_BIG = 1 << 30  # divides zero


class Divisors:
    """What is known to divide the integer values of one function (see the module docstring)."""

    def __init__(self, fn: L.Function) -> None:
        self.facts: dict[str, int] = {}
        self.aligned = fn.aligned
        if fn.aligned:
            for name in aligned_symbols(fn):
                self.facts[name] = ALIGN
        assigned = {s.var.name for s in statements(fn.body) if isinstance(s, L.Assign)}
        for s in statements(fn.body):
            if isinstance(s, L.Decl) and s.init is not None and s.var.name not in assigned:
                self._learn(s.var.name, self.of(s.init))
            elif isinstance(s, L.For) and s.var.name not in assigned:
                self._learn(s.var.name, math.gcd(self.of(s.start), self.of(s.step)))

    def _learn(self, name: str, d: int) -> None:
        # A name declared twice (in two blocks) keeps what divides both values.
        self.facts[name] = math.gcd(self.facts[name], d) if name in self.facts else d

    def of(self, e: L.Expr) -> int:
        if isinstance(e, L.Const):
            v = e.value
            return _BIG if v == 0 else abs(int(v)) if isinstance(v, int) and not isinstance(v, bool) else 1
        if isinstance(e, L.Var):
            return self.facts.get(e.name, 1)
        if isinstance(e, L.Affine):
            return self.of(e.source)
        if isinstance(e, L.Cast) and e.dtype.is_int and e.x.dtype.is_int:
            return self.of(e.x)
        if isinstance(e, L.Binary):
            a, b = self.of(e.a), self.of(e.b)
            if e.op in ("+", "-"):
                return math.gcd(a, b)
            if e.op == "*":
                return min(a * b, _BIG)
            if e.op == "<<" and isinstance(e.b, L.Const) and 0 <= int(e.b.value) < 31:
                return min(a << int(e.b.value), _BIG)
        if isinstance(e, L.Select):
            return math.gcd(self.of(e.a), self.of(e.b))
        return 1


def copied_tensors(fn: L.Function) -> tuple[str, ...]:
    """The global tensors a kernel's copies and vector accesses read or write (their alignment matters)."""
    names = {v.buf for s in statements(fn.body) if isinstance(s, L.Copy) for v in (s.dst, s.src)}
    names |= {s.view.buf for s in statements(fn.body) if isinstance(s, L.VecMove)}
    return tuple(b.name for b in fn.buffers if b.space == "global" and b.name in names)


def aligned_symbols(fn: L.Function) -> tuple[str, ...]:
    """The shape symbols that the aligned variant takes to be multiples of 16, only as many as
    make the copied tensors' rows and strides 16-byte multiples: a tensor's innermost dimension
    when it is a symbol and not the first (its row length), and for each stride (the product of the dimensions after
    one) that its constant factors do not already make a multiple of 16 bytes and no symbol taken
    so far divides, the innermost symbol among those dimensions. `f32[M, K]` takes K; an attention
    kernel's `f16[Z, H, N_CTX, 64]` takes none, and `f16[Z, H, N_CTX, D]` only D. A 1-D tensor that a
    vector access moves takes its length too (it ends its only row)."""
    vectors = {s.view.buf for s in statements(fn.body) if isinstance(s, L.VecMove)}
    out: list[str] = []
    for name in copied_tensors(fn):
        b = fn.buffer(name)
        assert b is not None
        if (len(b.shape) > 1 or name in vectors) and isinstance(b.shape[-1], L.Var) and b.shape[-1].name not in out:
            out.append(b.shape[-1].name)
        for k in range(len(b.shape) - 2, -1, -1):
            after = b.shape[k + 1:]
            constant = b.elem.size * math.prod(int(d.value) for d in after if isinstance(d, L.Const))
            symbols = [d.name for d in after if isinstance(d, L.Var)]
            if constant % ALIGN and symbols and not set(symbols) & set(out):
                out.append(symbols[-1])
    return tuple(out)


@ir_node
class _Side:
    """What is known of one view of a copy: all but `base` in elements."""

    shared: bool
    base: int    # what divides the buffer's base address (bytes)
    origin: int  # what divides the view's offset from the base
    outer: int   # what divides every stride of the outer sliced dimensions
    limit: int   # what divides the count of innermost elements from the origin (a tensor's edge)

    def whole_chunks(self, vb: int, e: int) -> bool:
        """Whether chunks of `vb` bytes (`e` elements) are aligned and wholly in or out."""
        return self.base % vb == 0 and self.origin % e == 0 and self.outer % e == 0 and self.limit % e == 0


def _side(b: L.Buffer, v: L.View, div: Divisors) -> _Side:
    dims = [div.of(d) for d in b.shape]
    if b.space == "shared":
        dims[-1] = int(b.shape[-1].value) + b.pad  # type: ignore[union-attr]
    strides = [1] * len(dims)
    for k in range(len(dims) - 2, -1, -1):
        strides[k] = min(strides[k + 1] * dims[k + 1], _BIG)
    origin = 0
    for start, stride in zip(v.starts, strides):
        origin = math.gcd(origin, min(div.of(start) * stride, _BIG))
    outer = 0
    sliced = [k for k, x in enumerate(v.extents) if x is not None]
    for k in sliced[:-1]:
        outer = math.gcd(outer, strides[k])
    dim, start, d2 = b.shape[-1], v.starts[-1], v.extents[-1]
    if isinstance(dim, L.Const) and isinstance(start, L.Const) and d2 is not None and \
            int(dim.value) - int(start.value) >= d2:
        limit = _BIG  # the whole row exists
    else:
        limit = math.gcd(div.of(dim), div.of(start))
    base = ALIGN if b.space == "shared" or div.aligned else b.elem.size
    return _Side(b.space == "shared", base, origin or _BIG, outer or _BIG, limit)


def copy_plan(s: L.Copy, buffers: Mapping[str, L.Buffer], div: Divisors) -> L.CopyPlan:
    views = (s.dst, s.src)
    size = buffers[s.dst.buf].elem.size
    if any(v.extents[-1] is None for v in views):  # a column: its elements are not contiguous
        return L.CopyPlan(size, False)
    row = next(x for x in reversed(s.dst.extents) if x is not None) * size
    sides = [_side(buffers[v.buf], v, div) for v in views]
    for vb in (16, 8, 4):
        e = vb // size
        # Constant strides of shared memory (padding) rule a width out for good.
        if vb <= size or row % vb or any(side.shared and side.outer % e for side in sides):
            continue
        return L.CopyPlan(vb, not all(side.whole_chunks(vb, e) for side in sides))
    return L.CopyPlan(size, False)


def vec_plan(s: L.VecMove, buffers: Mapping[str, L.Buffer], div: Divisors) -> L.CopyPlan:
    """How one tile moves its register array to or from a 1-D view (spec section 15): the widest
    access that divides the row and that alignment allows, tested at run time where the view's
    side is not proven (the register side is always aligned), always for a device function's array
    parameter (its address and row strides are the caller's) and a shared array sized at launch
    (its offset is the launch's). A column's elements are not contiguous: one at a time."""
    b = buffers[s.view.buf]
    size = b.elem.size
    extent = next(x for x in s.view.extents if x is not None)
    if s.view.extents[-1] is None:
        return L.CopyPlan(size, False)
    sized = b.space == "shared" and not all(isinstance(d, L.Const) for d in b.shape)
    side = None if b.space == "ref" or sized else _side(b, s.view, div)
    for vb in (16, 8, 4):
        e = vb // size
        if vb <= size or (extent * size) % vb:
            continue
        return L.CopyPlan(vb, side is None or not side.whole_chunks(vb, e))
    return L.CopyPlan(size, False)


def alignment_of(fn: L.Function) -> L.Alignment | None:
    """What an aligned variant of kernel `fn` would assume, when it would differ from the generic
    one: it copies in wider chunks or with fewer tests, moves a pipeline's copies with the tensor
    memory accelerator (sm_90a), or moves a map kernel's elements with vector accesses. None: the
    kernel has one variant."""
    if fn.kind != "kernel" or fn.aligned:
        return None
    loop = element_loop(fn)
    if loop is not None:
        if loop.width <= 1:
            return None
        read, written = map_tensors(loop)
        return L.Alignment(tuple(dict.fromkeys(read + written)), row_symbols(fn, loop))
    if not copied_tensors(fn):
        return None
    aligned = dataclasses.replace(fn, aligned=True)
    generic_div, aligned_div = Divisors(fn), Divisors(aligned)
    buffers = {b.name: b for b in fn.buffers}
    copies = [s for s in statements(fn.body) if isinstance(s, L.Copy)]
    vectors = [s for s in statements(fn.body) if isinstance(s, L.VecMove)]
    if any(s.tma is not None for s in copies):  # sm_90a: the TMA needs aligned tensors (lir/tma.py)
        return L.Alignment(copied_tensors(fn), aligned_symbols(fn))
    if all(copy_plan(s, buffers, generic_div) == copy_plan(s, buffers, aligned_div) for s in copies) and \
            all(vec_plan(s, buffers, generic_div) == vec_plan(s, buffers, aligned_div) for s in vectors):
        return None
    return L.Alignment(copied_tensors(fn), aligned_symbols(fn))


__all__ = ["ALIGN", "Divisors", "aligned_symbols", "alignment_of", "copied_tensors", "copy_plan", "vec_plan"]
