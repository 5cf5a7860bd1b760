"""Shared-memory planning: footprint of every allocation (padding included), the group's
budget from `shared(...)`, the 48 KiB static limit (above it: dynamic shared memory) and
the target architecture's per-group limit."""

from __future__ import annotations

import dataclasses

from tessera import nodes as N
from tessera.errors import DiagnosticSink, Note

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


def _align(n: int, a: int = 16) -> int:
    return (n + a - 1) // a * a


def scratch_bytes(fn: N.FuncDef) -> int:
    if "group_reduce" not in fn.uses or fn.config is None:
        return 0
    nt = fn.config.tile_count
    return (nt // 32 if nt % 32 == 0 else nt) * 8


def plan_shared(module: N.Module, sink: DiagnosticSink, arch: str) -> N.Module:
    items = []
    limit = arch_limit(arch)
    for fn in module.items:
        if not isinstance(fn, N.FuncDef) or fn.kind != "kernel":
            items.append(fn)
            continue
        slots: list[N.SharedSlot] = []
        offset = 0
        budget = fn.config.shared_budget
        for s in fn.body:
            if not (isinstance(s, N.Assign) and isinstance(s.target.ty, N.ArrayType) and s.target.ty.space == "shared"):
                continue
            ty: N.ArrayType = s.target.ty
            count = 1
            for d in ty.shape[:-1]:
                count *= d
            nbytes = count * (ty.shape[-1] + ty.pad) * ty.elem.size
            slots.append(N.SharedSlot(s.target.id, ty.elem, ty.shape, ty.pad, offset, nbytes))
            offset = _align(offset + nbytes)
            if budget is not None and offset > budget and offset - _align(nbytes) <= budget:
                sink.error(s.value.loc, f"shared memory allocations need {offset} bytes, over the kernel's "
                           f"budget of {budget} bytes (shared({budget}))",
                           Note(f"'{s.target.id}' takes {nbytes} bytes"))
        scratch = scratch_bytes(fn)
        if offset + scratch > limit:
            where = next((s.value.loc for s in fn.body if isinstance(s, N.Assign) and isinstance(s.target.ty, N.ArrayType)
                          and s.target.ty.space == "shared"), fn.loc)
            sink.error(where, f"kernel '{fn.name}' needs {offset + scratch} bytes of shared memory, over the "
                       f"{limit} bytes a group can have on {arch}")
        layout = N.SharedLayout(tuple(slots), scratch, offset, offset + scratch > STATIC_LIMIT)
        items.append(dataclasses.replace(fn, shared=layout))
    return dataclasses.replace(module, items=tuple(items))
