"""Shared memory: where each shared array of a kernel lives (the analysis `shared_layout`) and the
`plan-shared` pass that checks the layout against the kernel's `shared(...)` budget and the target
architecture's per-group limit.

Before:  a = tshared.alloc(f16[3, 5], pad=1);  b = tshared.alloc(f32[4]);  group_sum(...)
After:   the module, unchanged, when it fits; `shared_layout` gives
         a @ 0 (36 bytes), b @ 48 (16 bytes), 16 bytes of reduction scratch, static (<= 48 KiB)

Slots are 16-byte aligned, in declaration order. Above 48 KiB the kernel uses dynamic shared
memory (the runtime opts in to the larger size). Launch-sized arrays (a dimension that is an
integer parameter) also make it dynamic: they follow the constant slots, each 16-byte aligned,
at offsets the kernel computes from its parameters; the launch checks their total against the
device's limit. Group reductions need a small scratch buffer outside the user's budget.
"""

from __future__ import annotations

import math

from tessera.base.errors import DiagnosticSink, Note
from tessera.base.irnode import ir_node
from tessera.transpile.lir import nodes as L
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


@ir_node
class SharedSlot:
    name: str
    offset: int
    nbytes: int


@ir_node
class SharedLayout:
    slots: tuple[SharedSlot, ...]
    scratch_bytes: int      # for group reductions (static, outside the user's budget)
    total_bytes: int        # user allocations of constant size, padded and aligned
    dynamic: bool
    sized: tuple[str, ...] = ()  # launch-sized arrays, placed after `total_bytes` in this order

    def slot(self, name: str) -> SharedSlot:
        return next(s for s in self.slots if s.name == name)


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


_memo: dict[int, tuple[L.Function, SharedLayout]] = {}


def shared_layout(fn: L.Function) -> SharedLayout:
    """The layout of `fn`'s shared arrays (remembered per function object: functions are frozen)."""
    hit = _memo.get(id(fn))
    if hit is not None and hit[0] is fn:
        return hit[1]
    layout = _layout(fn)
    if len(_memo) > 256:
        _memo.clear()
    _memo[id(fn)] = (fn, layout)
    return layout


def _layout(fn: L.Function) -> SharedLayout:
    slots: list[SharedSlot] = []
    offset = 0
    for b in fn.buffers:
        if b.space != "shared" or launch_sized(b):
            continue
        nbytes = buffer_bytes(b)
        slots.append(SharedSlot(b.name, offset, nbytes))
        offset = _align(offset + nbytes)
    scratch = scratch_bytes(fn)
    sized = tuple(b.name for b in fn.buffers if launch_sized(b))
    return SharedLayout(tuple(slots), scratch, offset, offset + scratch > STATIC_LIMIT or bool(sized), sized)


def _check(fn: L.Function, sink: DiagnosticSink, arch: str) -> None:
    layout = shared_layout(fn)
    budget = fn.shared_budget
    if budget is not None:
        for slot in layout.slots:
            end = _align(slot.offset + slot.nbytes)
            if end > budget:
                b = fn.buffer(slot.name)
                assert b is not None
                stages = f", {b.stages} tpipeline stages" if b.stages > 1 else ""
                sink.error(b.loc, f"shared memory allocations need {end} bytes, over the kernel's budget of "
                           f"{budget} bytes (shared({budget}))",
                           Note(f"'{slot.name}' takes {slot.nbytes} bytes{stages}"))
                break
    limit = arch_limit(arch)
    need = layout.total_bytes + layout.scratch_bytes
    if need > limit:
        first = next((b for b in fn.buffers if b.space == "shared"), None)
        notes = [Note(f"'{b.name}' is kept {b.stages} times (tpipeline stages={b.stages}, line {b.pipeline.line})",
                      b.pipeline) for b in fn.buffers if b.stages > 1 and b.pipeline is not None]
        sink.error(first.loc if first else fn.loc, f"kernel '{fn.name}' needs {need} bytes of shared memory, "
                   f"over the {limit} bytes a group can have on {arch}", *notes)


def plan_shared(module: L.Module, sink: DiagnosticSink, arch: str) -> L.Module:
    for fn in module.kernels:
        _check(fn, sink, arch)
    return module
