"""Which division (lir/frag_layout.py) each fragment of a lowered kernel has: whether the kernel
divides its fragments into whole rows per warp, the layout of a fragment buffer (a row or column
vector: that of the fragments it follows), and the `--info` lines that describe them.
"""

from __future__ import annotations

from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.frag_layout import (
    MMA_M,
    MMA_N,
    REDUCTIONS,
    WGMMA_M,
    FragLayout,
    choose,
    is_operand_fragment,
    row_division,
    wgmma_division,
)
from tessera.transpile.lir.visit import all_exprs, statements


def kernel_whole_rows(fn: L.Function) -> bool:
    """Whether a lowered kernel divides its fragments into whole rows per warp: it has a row vector
    (a 1-D fragment) or a column vector, an operand fragment (f16/bf16/i8/u8, or an f32 fragment that is tmma's A: a
    warp's A rows with all of K) or a row reduction. The type checker decides the same from the syntax tree
    (checks/frag_vectors.py `uses_rows`)."""
    if any(b.space == "frag" and (len(b.shape) == 1 or is_column_vector_shape(b.shape) or is_operand_fragment(b.elem))
           for b in fn.buffers):
        return True
    frags = {b.name for b in fn.buffers if b.space == "frag"}
    if any(isinstance(s, L.Mma) and s.a.buf in frags for s in statements(fn.body)):
        return True  # an f32 fragment as tmma's A (TF32): a warp's rows with all of K
    return any(isinstance(e, L.Intrinsic) and e.op in REDUCTIONS for e in all_exprs(fn.body))


def is_column_vector_shape(shape: tuple[object, ...]) -> bool:
    """Whether a fragment buffer's shape is that of a column vector, `[1, N]` (spec section 14: the
    way this implementation declares one, `tfrag(f32[1, N])`)."""
    return len(shape) == 2 and isinstance(shape[0], L.Const) and shape[0].value == 1


def layout_of_buffer(fn: L.Function, name: str) -> FragLayout:
    """The division of the fragment `name` of a lowered kernel (a row vector: that of its rows)."""
    b = fn.buffer(name)
    assert b is not None and b.space == "frag"
    dims = [int(d.value) for d in b.shape if isinstance(d, L.Const)]
    warps = fn.tile_count // 32
    n = dims[1] if len(dims) == 2 else MMA_N
    if is_column_vector_shape(b.shape):  # the columns of the N-column fragments (any rows: whole rows per warp)
        dims[0] = WGMMA_M * (warps // 4) if fn.wgmma else MMA_M * warps
    if fn.wgmma:
        layout = wgmma_division(dims[0], n, warps)
    else:
        rows_first = kernel_whole_rows(fn) if fn.rows_first is None else fn.rows_first
        layout = row_division(dims[0], n, warps) if rows_first else choose(dims[0], dims[1], warps)
        if layout is None and len(dims) == 1:  # a row vector spread over several warps' columns
            layout = row_division(dims[0], n * warps, warps)
    assert layout is not None, "the type checker (checks/frags.py) reports fragments that no division fits"
    return layout


def fragment_info(fn: L.Function) -> list[str]:
    """`--info` lines for a lowered kernel: each fragment's warp division and the padding of the
    shared arrays its tmma reads."""
    out = []
    for b in fn.buffers:
        if b.space == "frag" and len(b.shape) == 1:
            lay = layout_of_buffer(fn, b.name)
            out.append(f"{b.name}: a row vector of {lay.m} rows, {lay.slots} registers per tile")
        elif b.space == "frag" and is_column_vector_shape(b.shape):
            lay = layout_of_buffer(fn, b.name)
            out.append(f"{b.name}: a column vector of {lay.n} columns, {lay.col_slots} registers per tile")
        elif b.space == "frag":
            out.append(layout_of_buffer(fn, b.name).describe(b.name))
    if out and fn.wgmma:
        swizzled = ", ".join(f"{b.name} {b.swizzle}-byte" for b in fn.buffers if b.swizzle)
        out.append(f"tmma: warpgroup MMA (wgmma.mma_async); swizzled shared arrays: {swizzled}")
    if out:
        for b in fn.buffers:
            if b.space == "shared" and b.pad:
                how = "chosen by the compiler" if b.auto_pad else "pad= as written"
                out.append(f"{b.name}: rows padded by {b.pad} elements ({how})")
    return out
