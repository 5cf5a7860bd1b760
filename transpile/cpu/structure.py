"""How region mode (transpile/cpu) sees a kernel's body: which statements have barriers, declare
or use which names, and the body cut into regions by the loops that run once for the group.

`Regions` is what both sides share: the planner (region_plan.py) decides with it which loops split
the body and which run interleaved, and marks them on the lowered IR (`For.cpu`, `While.cpu`);
the printer (regions.py) reads the same cuts back from those marks (`planned_regions`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeGuard

from tessera.transpile.cpu.group_reduce import reduction
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.visit import bodies, statements, stmt_exprs, stmt_walk, walk


def has_barrier(body: tuple[L.Stmt, ...]) -> bool:
    return any(isinstance(s, L.Barrier) or any(has_barrier(b) for b in bodies(s)) for s in body)


def barrier_loop(s: L.Stmt) -> TypeGuard[L.For | L.While]:
    return isinstance(s, (L.For, L.While)) and has_barrier(s.body)


def own_jumps(body: tuple[L.Stmt, ...]) -> bool:
    """Whether a break or continue in `body` targets the loop whose body it is."""
    return any(isinstance(s, (L.Break, L.Continue)) or (isinstance(s, L.If) and (own_jumps(s.then)
                                                                                 or own_jumps(s.orelse)))
               for s in body)


def assigned(body: tuple[L.Stmt, ...]) -> set[str]:
    out: set[str] = set()
    for s in statements(body):
        if isinstance(s, (L.Assign, L.Decl)):
            out.add(s.var.name)
        if isinstance(s, L.For):
            out.add(s.var.name)
    return out


def returns(body: tuple[L.Stmt, ...]) -> bool:
    return any(isinstance(s, L.Return) for s in statements(body))


def var_names(exprs: tuple[L.Expr, ...]) -> set[str]:
    return {x.name for e in exprs for x in walk(e) if isinstance(x, L.Var)}


def declared(body: tuple[L.Stmt, ...], top: bool, out: list[tuple[str, bool]]) -> None:
    """Every name declared in `body` (variables, register arrays, loop counters), with whether
    it is declared at region level (outside loops with a barrier: before the uniform loops are known)."""
    for s in body:
        if isinstance(s, L.Decl):
            out.append((s.var.name, top))
        elif isinstance(s, L.Alloc):
            out.append((s.buf, top))
        elif isinstance(s, L.For):
            out.append((s.var.name, False))
        for b in bodies(s):
            declared(b, top and barrier_loop(s), out)


def refs(stmts: tuple[L.Stmt, ...] | list[L.Stmt]) -> set[str]:
    """The names (variables and arrays) that statements use, nested ones included (an over-estimate)."""
    out: set[str] = set()
    for s in stmts:
        for e in stmt_exprs(s):
            for x in walk(e):
                if isinstance(x, L.Var):
                    out.add(x.name)
                elif isinstance(x, L.Load):
                    out.add(x.buf)
        for name in ("buf", "dst", "src", "regs", "view"):
            v = getattr(s, name, None)
            out.add(v if isinstance(v, str) else getattr(v, "buf", ""))
        if isinstance(s, (L.Decl, L.Assign)):
            out.add(s.var.name)
        for b in bodies(s):
            out |= refs(b)
    return out


def has_atomic(body: tuple[L.Stmt, ...]) -> bool:
    return any(isinstance(e, L.Atomic) for s in statements(body) for e in stmt_walk(s))


def stride_loop(s: L.Stmt, tiles: int) -> bool:
    """Whether `s` is a loop between barriers that the tiles run interleaved, one iteration of each
    tile in turn (RegionPrinter.stride_for): a grid- or group-stride loop (a step that is not a
    constant, or one of at least the tile count) with no break or continue of its own and no
    atomic (whose order across tiles would change). Each tile's own iterations keep their order."""
    if not isinstance(s, L.For) or s.unroll or s.stages is not None or has_barrier(s.body) or own_jumps(s.body):
        return False
    if isinstance(s.step, L.Const) and abs(int(s.step.value)) < tiles:
        return False
    return not has_atomic(s.body)


class Regions:
    """A kernel's body as regions: the loops that run once for the group with their body split
    into regions (`splits`), the stride loops the tiles run interleaved (`interleaved`), the
    locals recomputed in each region (`remat`, name -> its top-level declaration, in program
    order), those kept per tile (`per_tile`, name -> the C type of an element) and those kept once
    for the group (`group`, name -> C type: group_locals.py). A kernel that
    returns early (`returns`; it has no barrier) is one region, in which a return ends the tile's
    iteration. Here the loops' modes are read from the plan-cpu-regions pass's marks."""

    def __init__(self, fn: L.Function, returns: bool, remat: dict[str, L.Decl], per_tile: dict[str, str],
                 group: dict[str, str] | None = None) -> None:
        self.fn = fn
        self.returns = returns
        self.remat = remat
        self.per_tile = per_tile
        self.group = group or {}
        self.regs = frozenset(b.name for b in fn.buffers if b.space == "regs")  # per tile by nature

    def splits(self, s: L.Stmt) -> bool:
        """Whether `s` is a loop that runs once for the group with its body split into regions."""
        return isinstance(s, (L.For, L.While)) and s.cpu == "split"

    def interleaved(self, s: L.Stmt) -> bool:
        """Whether `s` is a stride loop that the tiles run interleaved (RegionPrinter.stride_for)."""
        return isinstance(s, L.For) and s.cpu in ("interleaved", "lockstep")

    def pieces(self, body: tuple[L.Stmt, ...]) -> Iterator[L.Stmt | list[L.Stmt]]:
        """A region-level body as regions (lists of statements) and the statements between them
        (barriers, boundary loops, stride loops, shared-array declarations, the group reductions of
        group_reduce.py)."""
        if self.returns:  # one region, after the shared arrays (declared for the whole group)
            shared = [s for s in body if isinstance(s, L.Alloc) and s.buf not in self.regs]
            yield from shared
            rest = [s for s in body if not (isinstance(s, L.Alloc) and s.buf not in self.regs)]
            if rest:
                yield rest
            return
        region: list[L.Stmt] = []
        for s in body:
            if (isinstance(s, (L.Barrier, L.ElementLoop)) or self.splits(s) or self.interleaved(s)
                    or isinstance(s, L.Alloc) and s.buf not in self.regs or reduction(s) is not None):
                if region:
                    yield region
                    region = []
                yield s
            else:
                region.append(s)
        if region:
            yield region

    def region_level(self, body: tuple[L.Stmt, ...]) -> Iterator[L.Stmt]:
        for s in body:
            yield s
            if self.splits(s):
                assert isinstance(s, (L.For, L.While))
                yield from self.region_level(s.body)

    def recomputed(self, names: set[str], here: list[L.Stmt]) -> list[L.Decl]:
        """The declarations of the recomputed locals among `names` (and those they are computed
        from) that statements `here` do not declare themselves, in program order."""
        own = {s.var.name for s in here if isinstance(s, L.Decl)}
        need: set[str] = set()
        todo = [n for n in names if n in self.remat and n not in own]
        while todo:
            n = todo.pop()
            if n not in need:
                need.add(n)
                todo.extend(m for m in var_names((self.remat[n].init,)) if m in self.remat)  # type: ignore[arg-type]
        return [d for n, d in self.remat.items() if n in need]


def planned_regions(fn: L.Function) -> Regions:
    """The regions of a kernel the plan-cpu-regions pass planned."""
    plan = fn.regions
    assert plan is not None, f"{fn.name} has no region plan"
    decls = {s.var.name: s for s in fn.body if isinstance(s, L.Decl)}
    return Regions(fn, plan.returns, {n: decls[n] for n in plan.recomputed}, dict(plan.per_tile), dict(plan.group))
