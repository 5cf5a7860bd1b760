"""Region mode's software prefetch for the streaming form of a stride loop: the lockstep passes of
a grid-stride loop (regions.py `lockstep_for`) over a 1-D tensor indexed by the loop's counter,

    for k in range(global_linear_id(), n, grid_tile_count()):
        acc += x[k]

read a group's span of `x` (one element per tile) a grid's span apart: 512 bytes every 4 KiB for
8 groups of 128 tiles of f32, a new page each pass, which the hardware prefetchers (they stay
within a page) hardly help with, so each pass waits for memory. Before a whole pass the printer
asks for the span that the pass `PASSES_AHEAD` passes later reads or writes, one prefetch per
cache line (tsr::prefetch_span, runtime/host/host_launch.h): a hint only, with no effect on any
value or on the order of any tile's operations (a prefetch never faults, past the tensor's end
included: its address is computed as an integer, not by pointer arithmetic).

The tensors are those the loop's body loads from or stores to at exactly the counter (`x[k]`): a
global tensor of one dimension, whose elements a pass reads or writes consecutively.
"""

from __future__ import annotations

from collections.abc import Mapping

from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.visit import statements, stmt_walk

# How many passes ahead a pass asks for: 8 passes of 8 x 128 tiles of f32 are 32 KiB ahead, where
# a grid-stride sum of 2^22 f32 streamed 1.4-2x faster than without (AMD EPYC, one thread).
PASSES_AHEAD = 8


def _at_counter(index: tuple[L.Expr, ...], var: str) -> bool:
    if len(index) != 1:
        return False
    i = index[0].source if isinstance(index[0], L.Affine) else index[0]
    return isinstance(i, L.Var) and i.name == var


def streamed(body: tuple[L.Stmt, ...], var: str, buffers: Mapping[str, L.Buffer]) -> list[tuple[str, bool]]:
    """The 1-D global tensors that `body` reads or writes at the loop counter `var`, in the order of
    their first access, each with whether the loop writes it there (then its prefetch is for a write)."""
    out: dict[str, bool] = {}
    for s in statements(body):
        for e in stmt_walk(s):
            if isinstance(e, L.Load) and buffers[e.buf].space == "global" and _at_counter(e.index, var):
                out.setdefault(e.buf, False)
        if isinstance(s, L.Store) and buffers[s.buf].space == "global" and _at_counter(s.index, var):
            out[s.buf] = True
    return list(out.items())


def prefetch_lines(tensors: list[tuple[str, bool]], cnames: dict[str, str], base: str, step: str,
                   tiles: int) -> list[str]:
    """The C statements that ask for the `tiles` elements of each tensor that the pass
    `PASSES_AHEAD` passes after the one at `base` (the counter of tile 0) accesses."""
    ahead = f"(unsigned long long){base} + {PASSES_AHEAD}ull * (unsigned long long){step}"  # wraps, no overflow
    return [f"tsr::prefetch_span({cnames[name]}, {ahead}, {tiles}u, {int(write)});"
            f"  // the pass {PASSES_AHEAD} ahead (a hint: transpile/cpu/prefetch.py)"
            for name, write in tensors]


__all__ = ["PASSES_AHEAD", "prefetch_lines", "streamed"]
