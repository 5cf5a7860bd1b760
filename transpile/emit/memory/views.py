"""The C of a view (`L.View`: a rectangle of a global tensor or of a shared or register array) as
the copy and access helpers of the device header take it (tsr_copy, tsr_vec_*, the fragments' and
bulk copies' pointers): its origin pointer, and for each of three copied dimensions (outer first;
missing ones are 1 element wide) its stride in elements, how many of its elements exist from the
origin, and how many lie before the tensor (a start below 0, "0" where the start is proven not
negative). An indexed (dropped) dimension of a checked view must be in range: where it is not,
the first limit is 0 and nothing is accessed."""

from __future__ import annotations

from tessera.transpile.emit.exprs import CPrinter, padded_dims, stride_name
from tessera.transpile.lir import nodes as L
from tessera.transpile.names import c_ident


def const_shape(b: L.Buffer) -> tuple[int, ...]:
    """The constant dimensions of array `b` (a launch-sized dimension is left out); the declarations
    of arrays (memory/declarations.py) print them too."""
    return tuple(int(d.value) for d in b.shape if isinstance(d, L.Const))


def view_parts(pr: CPrinter, v: L.View) -> tuple[str, str, str, str]:
    """Origin pointer, the strides (elements) of the three copied dimensions, how many
    elements of each exist from the origin, and how many of them lie before the tensor (a start
    below 0; "0" where the start is proven non-negative)."""
    ptr, strides, limits, lows = view_lists(pr, v)
    return ptr, ", ".join(strides), ", ".join(limits), ", ".join(lows)


def view_lists(pr: CPrinter, v: L.View) -> tuple[str, list[str], list[str], list[str]]:
    """`view_parts` as lists (three of each, outer dimensions first)."""
    b = pr.ctx.buffers[v.buf]
    name = c_ident(v.buf)
    dims = [pr.expr(d) for d in b.shape]
    sized = b.space == "shared" and not all(isinstance(d, L.Const) for d in b.shape)  # a flat pointer
    phys = [pr.expr(d) for d in padded_dims(b)] if sized else \
        dims[:-1] + [str(const_shape(b)[-1] + b.pad)] if b.space == "shared" else dims
    rank = len(dims)
    strides = ["1"] * rank  # innermost is contiguous
    for k in range(rank - 2, -1, -1):
        strides[k] = phys[k + 1] if strides[k + 1] == "1" else f"{strides[k + 1]} * {phys[k + 1]}"
    if b.space == "ref":  # a device function's array parameter: the caller's row strides
        strides = [stride_name(v.buf, k) for k in range(rank - 1)] + ["1"]
    starts: list[str] = []
    kept: list[tuple[str, str, str]] = []  # (stride, limit, elements before the tensor) of sliced dimensions
    guards: list[str] = []                 # indexed (dropped) dimensions must be in range
    assert len(v.nonneg) == rank, "plan-copies proves the starts of every view"
    for k, (start_e, extent) in enumerate(zip(v.starts, v.extents)):
        start = pr.expr(start_e)
        starts.append(start)
        below = "0" if v.nonneg[k] else f"(int)(-({start}))"
        if extent is not None:
            kept.append((strides[k], dims[k] if start == "0" else f"{dims[k]} - ({start})", below))
        elif v.checked:
            if below != "0":
                guards.append(f"({start}) >= 0")
            guards.append(f"({start}) < {dims[k]}")
    offset = " + ".join(f"({s}) * ({st})" if st != "1" else f"({s})" for s, st in zip(starts, strides)
                        if s != "0") or "0"
    while len(kept) < 3:
        kept.insert(0, ("0", "1", "0"))
    if b.space in ("global", "ref") or sized:
        ptr = f"{name} + {offset}" if offset != "0" else name
    else:
        ptr = f"&{name}" + "[0]" * rank + (f" + {offset}" if offset != "0" else "")
    lim = [f"(int)({x})" if x not in dims and not x.isdigit() else x for _, x, _ in kept]
    if guards:
        lim[0] = f"({' && '.join(guards)}) ? {lim[0]} : 0"
    return ptr, [st for st, _, _ in kept], lim, [lo for _, _, lo in kept]


__all__ = ["const_shape", "view_lists", "view_parts"]
