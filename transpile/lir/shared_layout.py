"""Shared memory: where each shared array of a kernel lives (the analysis `place_shared`, whose
result the plan-shared pass, transpile/passes/plan_shared.py, stores on the kernel as
`Function.shared`) and the limits it is checked against.

    a = tshared.alloc(f16[3, 5], pad=1);  b = tshared.alloc(f32[4]);  group_sum(...)
    -> a @ 0 (36 bytes), b @ 48 (16 bytes), 16 bytes of reduction scratch, static (<= 48 KiB)

Slots are 16-byte aligned (1024-byte for the swizzled arrays of a warpgroup MMA, lir/swizzle.py; 128-byte for the destinations of bulk tensor copies, lir/tma.py), each at the lowest offset where it overlaps no array it conflicts with
(lir/shared_lifetimes.py: arrays live in one barrier interval conflict), taking the arrays in
declaration order or, where that needs less, largest first; without reuse every array conflicts
with every other and the slots follow each other in declaration order. Above 48 KiB the kernel
uses dynamic shared memory (the runtime opts in to the larger size). Launch-sized arrays (a
dimension that is an integer parameter) also make it dynamic: they follow the constant slots, each
16-byte aligned, at offsets the kernel computes from its parameters; the launch checks their total
against the device's limit. Group reductions need a small scratch buffer outside the user's budget.
"""

from __future__ import annotations

import math

from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.shared_lifetimes import conflicts
from tessera.transpile.lir.swizzle import ALIGN as SWIZZLE_ALIGN
from tessera.transpile.lir.tma import tma_destinations
from tessera.transpile.lir.visit import all_exprs

STATIC_LIMIT = 48 * 1024
# Largest shared memory one group may use (opt-in), per architecture.
ARCH_LIMITS = {75: 64 * 1024, 80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024,
               90: 227 * 1024, 100: 227 * 1024, 120: 99 * 1024}


def arch_number(arch: str) -> int:
    digits = "".join(ch for ch in arch if ch.isdigit())
    return int(digits) if digits else 90


def arch_limit(arch: str) -> int:
    n = arch_number(arch)
    if n in ARCH_LIMITS:
        return ARCH_LIMITS[n]
    known = [a for a in ARCH_LIMITS if a <= n]
    return ARCH_LIMITS[max(known)] if known else 48 * 1024


SharedSlot = L.SharedSlot
SharedLayout = L.SharedLayout


def _align(n: int, a: int = 16) -> int:
    return (n + a - 1) // a * a


def launch_sized(b: L.Buffer) -> bool:
    """A shared array with a dimension set at launch (an integer parameter)."""
    return b.space == "shared" and not all(isinstance(d, L.Const) for d in b.shape)


def buffer_bytes(b: L.Buffer) -> int:
    """The footprint of a shared array: its rows padded."""
    dims = [int(d.value) for d in b.shape if isinstance(d, L.Const)]
    return math.prod(dims[:-1]) * (dims[-1] + b.pad) * b.elem.size


def uses_group_reduction(fn: L.Function) -> bool:
    return any(isinstance(e, L.Collective) and e.op.startswith("group_") for e in all_exprs(fn.body))


def scratch_bytes(fn: L.Function) -> int:
    if fn.kind != "kernel" or not uses_group_reduction(fn):
        return 0
    nt = fn.tile_count
    return (nt // 32 if nt % 32 == 0 else nt) * 8


_memo: dict[tuple[int, bool], tuple[L.Function, SharedLayout]] = {}


def shared_layout(fn: L.Function) -> SharedLayout:
    """The layout the plan-shared pass chose for kernel `fn`, or before that pass (a dump of an
    earlier pass) the one it would choose with reuse."""
    return fn.shared if fn.shared is not None else place_shared(fn)


def place_shared(fn: L.Function, reuse: bool = True) -> SharedLayout:
    """Where `fn`'s shared arrays go; with `reuse`, arrays whose lifetimes a barrier separates may
    share memory (remembered per function object: functions are frozen)."""
    hit = _memo.get((id(fn), reuse))
    if hit is not None and hit[0] is fn:
        return hit[1]
    layout = _layout(fn, reuse)
    if len(_memo) > 256:
        _memo.clear()
    _memo[(id(fn), reuse)] = (fn, layout)
    return layout


def _first_fit(order: list[L.Buffer], clash: frozenset[frozenset[str]], reuse: bool,
               wide: frozenset[str] = frozenset()) -> dict[str, int]:
    """Offsets for the arrays in `order`: each at the lowest 16-byte-aligned offset (1024-byte for
    the swizzled arrays of a warpgroup MMA, 128-byte for the arrays in `wide`, which bulk tensor
    copies write) where it overlaps none of the arrays placed before it that it conflicts with."""
    placed: dict[str, tuple[int, int]] = {}
    for b in order:
        nbytes = buffer_bytes(b)
        taken = sorted(span for name, span in placed.items() if not reuse or frozenset((name, b.name)) in clash)
        offset = 0
        align = SWIZZLE_ALIGN if b.swizzle else 128 if b.name in wide else 16
        for lo, hi in taken:
            if offset + nbytes <= lo:
                break
            offset = max(offset, _align(hi, align))
        placed[b.name] = (offset, offset + nbytes)
    return {name: span[0] for name, span in placed.items()}


def _layout(fn: L.Function, reuse: bool) -> SharedLayout:
    arrays = [b for b in fn.buffers if b.space == "shared" and not launch_sized(b)]
    clash = conflicts(fn) if reuse and fn.kind == "kernel" else frozenset()
    best: dict[str, int] = {}
    total = -1
    for order in (arrays, sorted(arrays, key=lambda b: -buffer_bytes(b))):
        offsets = _first_fit(order, clash, reuse, tma_destinations(fn))
        end = max((_align(offsets[b.name] + buffer_bytes(b)) for b in arrays), default=0)
        if total < 0 or end < total:
            best, total = offsets, end
    slots = tuple(SharedSlot(b.name, best[b.name], buffer_bytes(b)) for b in arrays)
    scratch = scratch_bytes(fn)
    sized = tuple(b.name for b in fn.buffers if launch_sized(b))
    return SharedLayout(slots, scratch, total, total + scratch + barrier_bytes(fn) > STATIC_LIMIT or bool(sized), sized)


def barrier_bytes(fn: L.Function) -> int:
    """sm_90a: the mbarriers of bulk tensor copies, static shared memory beside the arrays."""
    return sum(8 * s.stages for s in fn.body if isinstance(s, L.MbarInit))


def shared_info(fn: L.Function) -> list[str]:
    """Kernel `fn`'s shared-memory placement as `tesserac --info` shows it: each array's offset and
    size (and which arrays share its memory), and the peak, with the sum where reuse made it less."""
    layout = shared_layout(fn)
    lines = []
    for s in layout.slots:
        shares = layout.sharing(s.name)
        note = f" (shares memory with {', '.join(shares)})" if shares else ""
        lines.append(f"shared {s.name} @ {s.offset}, {s.nbytes} bytes{note}")
    lines += [f"shared {name} after them, sized at launch" for name in layout.sized]
    if layout.shares:
        alone = place_shared(fn, reuse=False).total_bytes
        lines.append(f"shared memory: {layout.total_bytes} bytes at the peak ({alone} without reuse)")
    return lines
