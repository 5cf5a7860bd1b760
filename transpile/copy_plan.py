"""How each `tcopy` / `tcopy_async` moves its data (an analysis for the C printer): the chunk width
and whether alignment must be tested at run time.

A chunk of VB bytes (16, 8, 4 or the element size) can be moved whole when both views' origins are
VB-aligned and every stride and innermost extent is a multiple of the chunk's elements (then a chunk
is wholly inside the tensor or wholly outside). What is constant (shared-memory strides, extents,
padding) bounds VB; what is known only at run time is proven where it can be from divisibility:

- a shape symbol is divisible by 16 in a kernel's aligned variant (`Function.aligned`, chosen at
  launch when the arrays allow it) and global base pointers are 16-byte aligned there;
- a constant divides itself; `a + b` by what divides both, `a * b` by the product, `a << c` by
  `2**c`; a loop variable by what divides its start and step, a local assigned once by what
  divides its value.

What is not proven is tested once per copy (`check`), falling back to single elements.

Example: `tcopy_async(As, A[r0:r0 + 64, k0:k0 + 16])` with `A: f32[M, K]`, `r0 = group_id(1) * 64`,
`for k0 in range(0, K, 16)`: in the aligned variant K is a multiple of 16, so the origin
`r0 * K + k0` and the stride K are multiples of 4 elements: 16-byte chunks, no test.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from tessera.transpile import lir as L
from tessera.transpile.lir_visit import statements

ALIGN = 16  # bytes: what the aligned variant assumes of global base pointers, and of shape symbols
_BIG = 1 << 30  # divides zero


@dataclass(frozen=True)
class CopyPlan:
    vb: int       # bytes per chunk
    check: bool   # test the alignment at run time (else proven)


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
    """The global tensors a kernel's copies read or write (their alignment matters)."""
    names = {v.buf for s in statements(fn.body) if isinstance(s, L.Copy) for v in (s.dst, s.src)}
    return tuple(b.name for b in fn.buffers if b.space == "global" and b.name in names)


def aligned_symbols(fn: L.Function) -> tuple[str, ...]:
    """The shape symbols that set the strides and row lengths of the copied tensors (all their
    dimensions but the first): multiples of 16 in the aligned variant."""
    out: list[str] = []
    for name in copied_tensors(fn):
        b = fn.buffer(name)
        assert b is not None
        out += [d.name for d in b.shape[1:] if isinstance(d, L.Var) and d.name not in out]
    return tuple(out)


def _strides(b: L.Buffer, div: Divisors) -> tuple[tuple[int, ...], int]:
    """Per dimension, what divides its stride (elements), and the base alignment in bytes."""
    dims = [div.of(d) for d in b.shape]
    if b.space == "shared":
        dims[-1] = int(b.shape[-1].value) + b.pad  # type: ignore[union-attr]
    strides = [1] * len(dims)
    for k in range(len(dims) - 2, -1, -1):
        strides[k] = min(strides[k + 1] * dims[k + 1], _BIG)
    base = ALIGN if b.space == "shared" or div.aligned else b.elem.size
    return tuple(strides), base


def _side(b: L.Buffer, v: L.View, div: Divisors) -> tuple[int, int, int]:
    """(what divides the origin offset, what divides every outer stride, what divides the count of
    innermost elements from the origin), all in elements."""
    strides, _ = _strides(b, div)
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
    return origin or _BIG, outer or _BIG, limit


def copy_plan(fn: L.Function, s: L.Copy, buffers: Mapping[str, L.Buffer], div: Divisors) -> CopyPlan:
    dst, src = buffers[s.dst.buf], buffers[s.src.buf]
    size = dst.elem.size
    row = next(x for x in reversed(s.dst.extents) if x is not None) * size
    sides = [(b, v) for b, v in ((dst, s.dst), (src, s.src))]
    vb = size
    if any(v.extents[-1] is None for _, v in sides):  # a column: its elements are not contiguous
        return CopyPlan(vb, False)
    for cand in (16, 8, 4):
        if cand <= size or row % cand:
            continue
        e = cand // size
        # Constant strides of shared memory (padding) rule a width out for good.
        if any(b.space == "shared" and _side(b, v, div)[1] % e for b, v in sides):
            continue
        vb = cand
        break
    if vb == size:
        return CopyPlan(vb, False)
    e = vb // size
    proven = all(_strides(b, div)[1] % vb == 0 and all(x % e == 0 for x in _side(b, v, div)) for b, v in sides)
    return CopyPlan(vb, not proven)


__all__ = ["ALIGN", "CopyPlan", "Divisors", "aligned_symbols", "copied_tensors", "copy_plan"]
