"""The `plan-shared` pass (spec sections 7 and 15): places each kernel's shared arrays
(`Function.shared`, from lir/shared_layout.py `place_shared`) and checks the placement's peak
footprint against the kernel's `shared(...)` budget and the target architecture's per-group limit.
Arrays whose lifetimes a `tbarrier()` separates share memory unless `CompileOptions.shared_reuse`
is off (lir/shared_lifetimes.py decides which may).

Before (staging buffers read in the loop, an epilogue buffer used after a barrier):
    buffer shared As: f16[64, 32]        # 4096 bytes
    buffer shared Cs: f32[64, 64]        # 16384 bytes
    for k0 ...: copy As <- A[...]; barrier; ... load As ...; barrier
    barrier; store Cs[...] = ...; barrier; ... load Cs ...
After:
    shared As @ 0 (4096 bytes)
    shared Cs @ 0 (16384 bytes, shares memory with As)       # the kernel needs 16384 bytes, not 20480
"""

from __future__ import annotations

import dataclasses

from tessera.base.errors import DiagnosticSink, Note
from tessera.base.options import CompileOptions
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.shared_layout import arch_limit, place_shared


def plan_shared(module: L.Module, sink: DiagnosticSink, options: CompileOptions) -> L.Module:
    functions = []
    for fn in module.functions:
        if fn.kind == "kernel":
            layout = place_shared(fn, options.shared_reuse)
            _check(fn, layout, sink, options.arch)
            fn = dataclasses.replace(fn, shared=layout)
        functions.append(fn)
    return dataclasses.replace(module, functions=tuple(functions))


def _check(fn: L.Function, layout: L.SharedLayout, sink: DiagnosticSink, arch: str) -> None:
    budget = fn.shared_budget
    if budget is not None and layout.total_bytes > budget:
        # The first array (in declaration order) that ends past the budget.
        end, slot = next((e, s) for s in layout.slots if (e := (s.offset + s.nbytes + 15) // 16 * 16) > budget)
        b = fn.buffer(slot.name)
        assert b is not None
        stages = f", {b.stages} tpipeline stages" if b.stages > 1 else ""
        sink.error(b.loc, f"shared memory allocations need {end} bytes, over the kernel's budget of "
                   f"{budget} bytes (shared({budget}))",
                   Note(f"'{slot.name}' takes {slot.nbytes} bytes{stages}"))
    limit = arch_limit(arch)
    need = layout.total_bytes + layout.scratch_bytes
    if need > limit:
        first = next((b for b in fn.buffers if b.space == "shared"), None)
        notes = [Note(f"'{b.name}' is kept {b.stages} times (tpipeline stages={b.stages}, line {b.pipeline.line})",
                      b.pipeline) for b in fn.buffers if b.stages > 1 and b.pipeline is not None]
        sink.error(first.loc if first else fn.loc, f"kernel '{fn.name}' needs {need} bytes of shared memory, "
                   f"over the {limit} bytes a group can have on {arch}", *notes)
