"""Region mode's group reductions (`group_sum`, `group_max`, `group_min`): how the plan-cpu-regions
pass (region_plan.py) rewrites them so that region mode can run them, and how RegionPrinter
(regions.py) prints them.

A group reduction is a barrier with a value: every tile hands in its argument, and every tile gets
the same result. In fiber mode it is `tsr_group_reduce` (templates/device/group_reduce.cuh): each
warp of 32 tiles combines its lanes by shuffles (`v = op(v, shfl_xor(v, o))`, o = 16, 8, 4, 2, 1),
lane 0 of each warp stores the warp's value, and every tile combines those left to right; a group
whose tile count is not a multiple of 32 combines every tile's value left to right. A statement
that uses one, at any depth:

    mean = group_sum(s) / f32(C)

is rewritten (`split_reductions`) as

    %red1_in = s          # each tile's argument
    tbarrier()
    %red1 = group_sum(%red1_in)   # once for the group
    mean = %red1 / f32(C)

so that the rest of the planner sees an ordinary barrier (a loop with a reduction is a loop with a
barrier; one in a branch keeps fiber mode, as any barrier there does), `%red1_in` is a per-tile
local and `%red1` a local kept once for the group. `print_reduction` prints the third statement as
one call of `tsr_region_reduce` (runtime/host/host_group_reduce.h) over the tiles' arguments, which
combines them in the same order as the shuffles and the warps' partials do (the result is
bit-identical to fiber mode's, NaNs and signed zeros of `group_max` included).

Only the forms whose order is fully known are rewritten: the argument and the result of a type
whose C type is the one the fiber-mode template computes in (f32, f64, i32, u32, i64, u64: no
rounding, no widening), no reduction inside another collective or under a conditional or logical
operator, a statement that reads no memory beside its reductions' arguments (those are read before
the barrier, as in fiber mode), and the arguments of several reductions in one statement read no
memory either. Any other collective stays as it is, and keeps fiber mode.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import TYPE_CHECKING

from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.visit import children, map_body, map_stmt_exprs, statements, stmt_exprs, walk
from tessera.transpile.names import var_name

if TYPE_CHECKING:
    from tessera.transpile.cpu.regions import RegionPrinter

REDUCTIONS = {"group_sum": "tsr_op_sum", "group_max": "tsr_op_max", "group_min": "tsr_op_min"}
_TYPES = ("f32", "f64", "i32", "u32", "i64", "u64")
_STATEMENTS = (L.Decl, L.Assign, L.Store, L.Eval, L.If)
_MEMORY = (L.Load, L.Atomic, L.Call, L.Collective)


def reduction(s: L.Stmt) -> L.Collective | None:
    """The reduction of a rewritten `%redK = group_op(%redK_in)` statement (None for any other)."""
    if isinstance(s, L.Decl) and isinstance(s.init, L.Collective) and s.init.op in REDUCTIONS \
            and len(s.init.args) == 1 and isinstance(s.init.args[0], L.Var) and s.var.name.startswith("%red"):
        return s.init
    return None


def _found(s: L.Stmt) -> list[L.Collective] | None:
    """The group reductions statement `s` evaluates itself, where the module docstring's rules allow
    rewriting them all (else None; [] where it has none)."""
    found: list[L.Collective] = []
    for e in stmt_exprs(s):
        if not _scan(e, found, guarded=False):
            return None
    if not found:
        return found
    if not isinstance(s, _STATEMENTS):
        return None
    for c in found:
        if c.dtype.name not in _TYPES or c.args[0].dtype != c.dtype:
            return None
        if any(isinstance(x, L.Collective) for x in walk(c.args[0])):
            return None
        if len(found) > 1 and any(isinstance(x, _MEMORY) for x in walk(c.args[0])):
            return None
    return found


def _scan(e: L.Expr, found: list[L.Collective], guarded: bool) -> bool:
    """Collect the reductions of `e` outside other reductions' arguments; False where the rest of
    `e` reads memory or a reduction is evaluated only under a condition (`guarded`)."""
    if isinstance(e, L.Collective) and e.op in REDUCTIONS:
        if guarded:
            return False
        found.append(e)
        return True
    if isinstance(e, _MEMORY):
        return False
    inner = guarded or isinstance(e, (L.Select, L.Logical))
    return all(_scan(c, found, inner) for c in children(e))


def split_reductions(fn: L.Function) -> L.Function:
    """`fn` with each statement that uses group reductions rewritten as the module docstring shows
    (the same function where none is)."""
    count = itertools.count(1)

    def rewrite(s: L.Stmt) -> L.Stmt | tuple[L.Stmt, ...]:
        found = _found(s)
        if not found:
            return s
        before: list[L.Stmt] = []
        after: list[L.Stmt] = []
        names: dict[int, L.Var] = {}
        for c in found:
            k = next(count)
            arg = L.Var(f"%red{k}_in", c.dtype)
            result = L.Var(f"%red{k}", c.dtype)
            before.append(L.Decl(s.loc, arg, c.args[0]))
            after.append(L.Decl(s.loc, result, L.Collective(c.op, (arg,), c.dtype)))
            names[id(c)] = result
        rest = map_stmt_exprs(s, lambda e: names.get(id(e), e))
        return (*before, L.Barrier(s.loc), *after, rest)

    body = map_body(fn.body, rewrite)
    return fn if body is fn.body else dataclasses.replace(fn, body=body)


def results(fn: L.Function) -> set[str]:
    """The results of the rewritten reductions of `fn` (`%redK`): the same in every tile."""
    return {s.var.name for s in statements(fn.body) if isinstance(s, L.Decl) and reduction(s) is not None}


def fed(fn: L.Function) -> set[str]:
    """The per-tile arguments of the rewritten reductions of `fn` (`%redK_in`): kept per tile."""
    return {x.name for s in statements(fn.body) if (c := reduction(s)) is not None
            for x in c.args if isinstance(x, L.Var)}


def print_reduction(rp: RegionPrinter, s: L.Decl, c: L.Collective) -> None:
    """`%redK = group_op(%redK_in)`, once for the group, from the tiles' copies of `%redK_in`."""
    arg = c.args[0]
    assert isinstance(arg, L.Var)
    tiles = rp.fn.tile_count
    rp.emit(f"// {c.op}: the tiles' values combined in fiber mode's order (runtime/host/host_group_reduce.h)",
            s.loc)
    rp.emit(f"{var_name(s.var.name)} = tsr_region_reduce<{tiles}, {c.dtype.c_compute}>("
            f"{rp.per_tile_array(arg.name)}, {REDUCTIONS[c.op]}());")


__all__ = ["REDUCTIONS", "fed", "print_reduction", "reduction", "results", "split_reductions"]
