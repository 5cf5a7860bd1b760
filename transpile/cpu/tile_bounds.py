"""Region mode's guarded regions: a region that is one `if` (no else) whose condition keeps a
prefix of the group's tiles, `t < U` with `t` the tile's linear index and `U` the same for every
tile, runs its tile loop over that prefix only, the `if`'s body without the test (RegionPrinter,
regions.py). The tree of a shared-memory reduction is the common case:

    while h > 0:
        if t < h: sh[t] += sh[t + h]
        tbarrier()
        h //= 2

where the loop over the 128 tiles tested `t < h` 128 times a level (GCC's -O2 does not split the
loop at `h`) for the h tiles that add. The tiles the loop skips are those whose test is false and
that run nothing in the region: the same statements run, in the same order of tiles.

`U` must be built from constants, parameters and shape symbols, uniform builtins and the locals
kept once for the group (group_locals.py): values that no tile's statements of the region change
(a group local is assigned only before or after the region's tile loop), read before the loop.

The same forms tell where a stride loop's counters start consecutive (`t`, `t + U`), so that its
lockstep passes (regions.py `lockstep_for`) need no test of every tile's start at run time.
"""

from __future__ import annotations

from tessera.transpile.builtins import BUILTINS, Vary
from tessera.transpile.cpu.structure import Regions
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.visit import walk

_SIGNED = ("i32", "i64")


def _linear_id(e: L.Expr, plan: Regions) -> bool:
    """Whether `e` is the tile's linear index in a group whose only axis is x (so that the region's
    tile loop runs the tiles in the order of this index, from 0)."""
    if len(plan.fn.tile) > 1 and any(n > 1 for n in plan.fn.tile[1:]):
        return False
    if isinstance(e, L.Var) and e.name in plan.remat:
        init = plan.remat[e.name].init
        return init is not None and init.dtype == e.dtype and _linear_id(init, plan)
    if isinstance(e, L.Cast):  # widened: the same value (the index fits every signed type)
        return e.dtype.name in _SIGNED and e.x.dtype.name in _SIGNED and _linear_id(e.x, plan)
    if isinstance(e, L.Intrinsic):
        return e.op == "tile_linear_id" or (e.op == "tile_id" and isinstance(e.args[0], L.Const)
                                            and e.args[0].value == 0)
    return False


def _group_uniform(e: L.Expr, plan: Regions, local: set[str]) -> bool:
    for x in walk(e):
        if isinstance(x, (L.Load, L.Collective, L.Atomic, L.Call)):
            return False
        if isinstance(x, L.Var) and x.name in local and x.name not in plan.group:
            return False
        if isinstance(x, L.Intrinsic) and x.op in BUILTINS and BUILTINS[x.op].result != Vary.UNIFORM:
            return False
    return True


def prefix_bound(stmts: list[L.Stmt], plan: Regions, local: set[str]) -> tuple[L.If, L.Expr] | None:
    """For region `stmts` that is one `if t < U:` (or `if U > t:`) with no else, in a kernel that
    does not return early: the `if` and `U` (a signed integer of `t`'s type)."""
    if plan.returns or len(stmts) != 1 or not isinstance(stmts[0], L.If) or stmts[0].orelse:
        return None
    s = stmts[0]
    c = s.cond
    if not isinstance(c, L.Compare) or c.op not in ("<", ">"):
        return None
    t, u = (c.a, c.b) if c.op == "<" else (c.b, c.a)
    if t.dtype.name not in _SIGNED or u.dtype != t.dtype or not _linear_id(t, plan):
        return None
    return (s, u) if _group_uniform(u, plan, local) else None


def consecutive_start(e: L.Expr, plan: Regions, local: set[str]) -> int:
    """W where `e` (a stride loop's start) is the tile's linear index times a positive constant W
    (a tile's chunk of W elements: `t * VEC`; W = 1 without the product), plus nothing but a value
    built as `U` above: tile t's value is tile 0's + t * W (unless it overflows); else 0."""
    if isinstance(e, L.Binary) and e.op == "+" and e.a.dtype == e.b.dtype == e.dtype:
        for a, b in ((e.a, e.b), (e.b, e.a)):
            if _group_uniform(b, plan, local) and (w := consecutive_start(a, plan, local)):
                return w
        return 0
    if isinstance(e, L.Binary) and e.op == "*" and e.a.dtype == e.b.dtype == e.dtype:
        for a, b in ((e.a, e.b), (e.b, e.a)):
            if isinstance(b, L.Const) and 0 < int(b.value) <= 1 << 16 and _linear_id(a, plan):
                return int(b.value)
        return 0
    return 1 if _linear_id(e, plan) else 0


__all__ = ["consecutive_start", "prefix_bound"]
