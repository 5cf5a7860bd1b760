"""The printer of commits and waits of asynchronous copies, and of bulk tensor copies and mbarrier
waits (sm_90a, spec section 16): what the
pipeline-copies and plan-copies passes decided (`Copy.tma`, `AsyncWait.bar`, `MbarInit`) as calls
of templates/device/tma.cuh (the CPU backend's runtime/host/host_tma.h defines the same calls).

    if (tsr_tid == 0) tsr_tma_load<__half, 2, 32, 128, 1, 1, 1>(TSR_TMAP_ARG(tsr_tmap_0),
        &tsr_bar_k0_20_5[fill], &As[fill][0][0], A, K, M, 1, 1, 1, k0, m0, 0, 0, 0, 0);
    tsr_mbar_wait(&tsr_bar_k0_20_5[stage], (tsr_bar_k0_20_5_phase >> stage) & 1u);
    tsr_bar_k0_20_5_phase ^= 1u << stage;

A destination swizzled for a warpgroup MMA gets one box per panel (lir/tma.py), the mode as the last
template argument, each panel's box at its columns and its place in the stage:

    if (tsr_tid == 0) {
        tsr_tma_load<__half, 2, 64, 32, 1, 1, 1, 128>(TSR_TMAP_ARG(tsr_tmap_1), &bar[fill],
            &Bs[fill][0][0] + 0, B, N, K, 1, 1, 1, n0 + 0, k0, 0, 0, 0, 0);
        tsr_tma_load<__half, 2, 64, 32, 1, 1, 1, 128>(TSR_TMAP_ARG(tsr_tmap_1), &bar[fill],
            &Bs[fill][0][0] + 2048, B, N, K, 1, 1, 1, n0 + 64, k0, 0, 0, 0, 0);
    }
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tessera.transpile.emit.memory.views import view_lists
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.tma import active_copies, panels, tensor_maps
from tessera.transpile.names import c_ident

if TYPE_CHECKING:
    from tessera.transpile.emit.stmts import BodyPrinter


def map_param(k: int) -> str:
    """The C name of a kernel's `k`th tensor-map parameter."""
    return f"tsr_tmap_{k}"


def active_bars(fn: L.Function) -> frozenset[str]:
    """The mbarrier arrays of the pipelines this variant of `fn` feeds with the TMA."""
    return frozenset(c.tma.bar for c in active_copies(fn) if c.tma is not None)


def dynamic_smem(fn: L.Function) -> str:
    """The macro declaring dynamic shared memory: on 128 bytes where a bulk tensor copy writes it."""
    return "TSR_DYNAMIC_SMEM_TMA" if active_bars(fn) else "TSR_DYNAMIC_SMEM"


def pool_align(fn: L.Function) -> int:
    """The alignment of the pool of shared arrays that share memory (128 bytes for bulk copies)."""
    return 128 if active_bars(fn) else 16


def print_tma_copy(bp: BodyPrinter, s: L.Copy) -> None:
    tma = s.tma
    assert tma is not None and tma.active
    src = bp.pr.ctx.buffers[s.src.buf]
    dst = bp.pr.ctx.buffers[s.dst.buf]
    box, mode = tma.box, tma.swizzle
    k = tensor_maps(bp.fn).index((s.src.buf, box, mode))
    pad = 5 - len(box)
    targs = ", ".join(str(b) for b in (len(box), *reversed(box), *(1,) * pad, *((mode,) if mode else ())))
    dims = ", ".join([*(f"(long long)({bp.pr.expr(d)})" for d in reversed(src.shape)), *("1",) * pad])
    coords = [f"(int)({bp.pr.expr(x)})" for x in reversed(s.src.starts)] + ["0"] * pad
    stage = bp.pr.expr(s.dst.starts[0]) if tma.staged else "0"
    ptr = view_lists(bp.pr, s.dst)[0]
    line = s.loc.line if bp.opts.check_bounds else 0

    def call(to: str, at: list[str]) -> str:
        return (f"tsr_tma_load<{dst.elem.c_storage}, {targs}>(TSR_TMAP_ARG({map_param(k)}), &{tma.bar}[{stage}], "
                f"{to}, {c_ident(src.name)}, {dims}, {', '.join(at)}, {line});")

    n = panels(box, mode, dst)
    if n == 1:
        bp.emit(f"if ({bp.pr.tid()} == 0) {call(ptr, coords)}", s.loc)
        return
    rows = int(dst.shape[-2].value)  # type: ignore[union-attr]
    bp.emit(f"if ({bp.pr.tid()} == 0) {{  // {n} panels of {mode} bytes, swizzled by the TMA", s.loc)
    for p in range(n):  # panel p: columns p * box[-1] ..., at p * rows * mode bytes of the matrix
        at = [f"{coords[0]} + {p * box[-1]}", *coords[1:]]
        bp.emit(f"    {call(f'{ptr} + {p * rows * mode // dst.elem.size}', at)}", s.loc)
    bp.emit("}", s.loc)


def print_mbar_init(bp: BodyPrinter, s: L.MbarInit) -> None:
    if s.bar not in active_bars(bp.fn):
        return
    bp.emit(f"__shared__ __align__(8) tsr_mbarrier {s.bar}[{s.stages}];  // one per stage", s.loc)
    bp.emit(f"unsigned {s.bar}_phase = 0u;  // bit k: the parity of stage k's current phase", s.loc)
    bp.emit(f"if ({bp.pr.tid()} == 0) {{", s.loc)
    bp.emit(f"    for (int k = 0; k < {s.stages}; ++k) tsr_mbar_init(&{s.bar}[k], {s.count});", s.loc)
    bp.emit("    tsr_mbar_init_fence();", s.loc)
    bp.emit("}", s.loc)
    bp.emit("__syncthreads();", s.loc)


def uses_mbarriers(bp: BodyPrinter, s: L.AsyncCommit | L.AsyncWait) -> bool:
    return bool(s.bar) and s.bar in active_bars(bp.fn)


def print_commit(bp: BodyPrinter, s: L.AsyncCommit) -> None:
    """A commit: of a cp.async group, or nothing where the copies complete on an mbarrier (or
    below sm_80, where they are synchronous)."""
    if uses_mbarriers(bp, s):
        bp.emit(f"// the stage's bulk copies complete on its mbarrier ({s.bar})", s.loc)
    elif bp.async_copies:
        bp.emit("tsr_cp_async_commit();", s.loc)
    else:
        bp.emit(f"// tcommit: the copies are synchronous on {bp.opts.arch}", s.loc)


def print_wait(bp: BodyPrinter, s: L.AsyncWait) -> None:
    """A wait: for the stage's mbarrier phase (its parity, then flipped), or for cp.async groups;
    then the barrier, if it has one."""
    if uses_mbarriers(bp, s):
        if s.stage is None:
            bp.emit("// every bulk copy issued has been waited for", s.loc)
        else:
            stage = bp.pr.expr(s.stage)
            bp.emit(f"tsr_mbar_wait(&{s.bar}[{stage}], ({s.bar}_phase >> ({stage})) & 1u);", s.loc)
            bp.emit(f"{s.bar}_phase ^= 1u << ({stage});", s.loc)
    elif bp.async_copies:
        bp.emit(f"tsr_cp_async_wait<{s.pending}>();", s.loc)
    if s.barrier:
        bp.emit("__syncthreads();", s.loc)
    elif not bp.async_copies:
        bp.emit(f"// the copies are synchronous on {bp.opts.arch}: nothing to wait for", s.loc)


__all__ = ["active_bars", "dynamic_smem", "map_param", "pool_align", "print_commit", "print_mbar_init", "print_tma_copy", "print_wait",
           "uses_mbarriers"]
