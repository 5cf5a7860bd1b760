"""Which pipelined `tcopy_async` statements the tensor memory accelerator can move on sm_90a (spec
section 16), and the box each one moves (the analysis behind `Copy.tma`, which the pipeline-copies
pass records and the plan-copies pass activates in the aligned variant).

One `cp.async.bulk.tensor` moves a box of a global tensor of 2 to 5 dimensions into shared memory,
densely, and completes on an mbarrier. The PTX ISA and `cuTensorMapEncodeTiled` require:

- a box extent of at most 256 elements per dimension, and an innermost box row of a multiple of 16
  bytes (no interleave);
- elements of 1, 2, 4 or 8 bytes;
- a global base address on a 16-byte boundary and every global stride (bytes) a multiple of 16:
  known in the aligned variant (transpile/lir/copy_plan.py: its tensors are 16-byte aligned and
  the shape symbols that make up the strides multiples of 16), proven from divisibility here;
- a shared destination on a 128-byte boundary: the destination array is the whole box, unpadded
  (the compiler does not pad it for `ldmatrix` either), placed on 128 bytes, and each stage of it a
  multiple of 128 bytes.

Example: `tcopy_async(As, A[m0:m0 + 128, k0:k0 + 32])` with `A: f16[M, K]`, `As: f16[128, 32]`:
box (128, 32), rows of 64 bytes, stages of 8192 bytes; in the aligned variant K is a multiple of
16, so A's row stride is a multiple of 32 bytes.

A destination that a warpgroup MMA reads swizzled (passes/plan_wgmma.py, lir/swizzle.py) is written
swizzled by the TMA itself: the tensor map's swizzle is the array's mode (CU_TENSOR_MAP_SWIZZLE_32B,
64B or 128B), and the driver requires a box's innermost extent to be at most the mode's span in
bytes. So one box moves each panel of the matrix (its rows, `mode` bytes of columns), into the
panel's place (panel p at p * rows * mode bytes; every panel, like the array, on a multiple of the
pattern's repeat, 8 * mode bytes), where the TMA stores the 16-byte chunk c of the box's 128-byte
line L at chunk c ^ (L mod (mode / 16)) (PTX ISA, "Swizzling Modes"): the layout of
lir/swizzle.py. `Bs: f16[32, 128]` (128-byte mode, 2 panels) from `B[k0:k0 + 32, n0:n0 + 128]`:
two boxes (32, 64), at columns n0 and n0 + 64, into bytes 0 and 4096 of the stage.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.copy_plan import Divisors
from tessera.transpile.lir.visit import statements

MAX_BOX = 256        # elements per box dimension
ROW_BYTES = 16       # the innermost box row is a multiple of this
STAGE_ALIGN = 128    # bytes: where a bulk tensor copy may write shared memory
GLOBAL_ALIGN = 16    # bytes: global base address and strides
MAX_COPIES = 8       # bulk copies per stage (the CPU backend's mbarrier keeps as many in flight)
ELEM_SIZES = (1, 2, 4, 8)


def tma_box(c: L.Copy, buffers: Mapping[str, L.Buffer], aligned: Divisors, swizzle: int = 0) -> tuple[int, ...] | None:
    """The box (per global dimension, outermost first) a bulk tensor copy of `c` moves, or None
    where the TMA cannot move it. `aligned`: what divides the values of the kernel's aligned
    variant. `c` is the copy as written (its destination not yet staged). `swizzle`: the mode of a
    destination swizzled for a warpgroup MMA; the box is then one panel of it (`panels` boxes)."""
    src, dst = buffers.get(c.src.buf), buffers.get(c.dst.buf)
    if src is None or dst is None or src.space != "global" or dst.space != "shared" or not c.async_:
        return None
    size = src.elem.size
    if not 2 <= len(src.shape) <= 5 or size not in ELEM_SIZES or dst.elem != src.elem or dst.pad:
        return None
    if not all(isinstance(d, L.Const) for d in dst.shape):
        return None
    shape = [int(d.value) for d in dst.shape]  # type: ignore[union-attr]
    whole = all(isinstance(x, L.Const) and int(x.value) == 0 for x in c.dst.starts) and list(c.dst.extents) == shape
    if not whole or [x for x in c.src.extents if x is not None] != shape:
        return None
    box = tuple(1 if x is None else x for x in c.src.extents)
    if swizzle:
        # One box per panel; panels follow each other only in a single matrix (2-D destination).
        panel = swizzle // size
        if c.src.extents[-1] is None or box[-1] % panel or (box[-1] != panel and len(shape) != 2):
            return None
        box = (*box[:-1], panel)
    if any(b > MAX_BOX for b in box) or (box[-1] * size) % ROW_BYTES or (math.prod(box) * size) % STAGE_ALIGN:
        return None
    for k in range(len(src.shape) - 1):  # the stride of dimension k: the dimensions after it
        stride = size
        for d in src.shape[k + 1:]:
            stride = min(stride * aligned.of(d), 1 << 30)
        if stride % GLOBAL_ALIGN:
            return None
    return box


def panels(box: tuple[int, ...], swizzle: int, dst: L.Buffer) -> int:
    """How many boxes `box` a bulk tensor copy into `dst` in swizzle mode `swizzle` moves: one per
    panel of a swizzled destination, else one."""
    last = dst.shape[-1]
    return int(last.value) // box[-1] if swizzle and isinstance(last, L.Const) else 1


def pipeline_boxes(fn: L.Function, lead: tuple[L.Copy, ...], swizzled: Mapping[str, int]
                   ) -> tuple[tuple[tuple[int, ...], int], ...] | None:
    """The (box, swizzle mode) of each of a pipeline's leading copies where the TMA can move every
    one of them (a pipeline waits on mbarriers or on cp.async groups, not both), else None.
    `swizzled`: the modes of the arrays a warpgroup MMA will read."""
    if not lead:
        return None
    buffers = {b.name: b for b in fn.buffers}
    aligned = Divisors(dataclasses.replace(fn, aligned=True))
    out = []
    count = 0
    for c in lead:
        mode = swizzled.get(c.dst.buf, 0)
        box = tma_box(c, buffers, aligned, mode)
        if box is None:
            return None
        out.append((box, mode))
        count += panels(box, mode, buffers[c.dst.buf])
    return tuple(out) if count <= MAX_COPIES else None


def tma_destinations(fn: L.Function) -> frozenset[str]:
    """The shared arrays that a bulk tensor copy of `fn` may write (placed on 128 bytes, not padded)."""
    return frozenset(s.dst.buf for s in statements(fn.body) if isinstance(s, L.Copy) and s.tma is not None)


def active_copies(fn: L.Function) -> list[L.Copy]:
    """The copies this variant of `fn` moves with the TMA."""
    return [s for s in statements(fn.body) if isinstance(s, L.Copy) and s.tma is not None and s.tma.active]


def tensor_maps(fn: L.Function) -> tuple[tuple[str, tuple[int, ...], int], ...]:
    """The tensor maps this variant of kernel `fn` receives, in parameter order: one per copied
    tensor, box and swizzle mode (the runtime builds and caches them at launch)."""
    return tuple(dict.fromkeys((c.src.buf, c.tma.box, c.tma.swizzle) for c in active_copies(fn) if c.tma is not None))


__all__ = ["MAX_BOX", "MAX_COPIES", "active_copies", "panels", "pipeline_boxes", "tensor_maps", "tma_box",
           "tma_destinations"]
