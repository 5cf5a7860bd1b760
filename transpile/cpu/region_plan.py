"""What region mode (transpile/cpu/regions.py) decides about a kernel before printing it: which
loops split its regions, which locals are computed again in each region, which need a copy per tile.

- **Boundary loops** run once for the group, with the loops over the tiles inside their body: a
  loop with a barrier (the cooperation rule makes its header uniform), and a *uniform loop*: a
  `for` at region level whose bounds are the same for every tile (built from parameters,
  constants, uniform builtins and uniform locals only), with no break or continue of its own, no
  atomic, neither unrolled nor pipelined, whose memory accesses are coalesced (from one tile to
  the next along x, only the last index moves, by at most one: `_coalesced`). Moving the tile loop inside a uniform loop (PoCL's loop
  interchange for work-item loops) keeps each tile's own statements in their order, and turns the
  innermost loop into a loop over the tiles, where neighbouring tiles touch neighbouring elements
  as on a GPU and the C compiler vectorizes (a dot product over a shared tile: `acc += As[ty, k] *
  Bs[k, tx]` for k in range(16)).
- **Recomputed locals**: a local declared once at the kernel's top level with a pure initializer
  (tile and group indices, parameters, constants, arithmetic: no memory) and never assigned again:
  every region that uses it computes it again (`tx = tile_id(0)`, `row = group_id(1) * 16 + ty`)
  instead of keeping a per-tile copy in memory, which would hide from the C compiler that `tx`
  counts up with the tile.
- **Per-tile locals**: every other region-level local or register array used by more than one
  region (or by a boundary loop's header), kept in an array with an element per tile.

A map kernel's element loop is a piece of its own (RegionPrinter prints the tile loop inside its
grid-stride loop). A kernel that returns early has no barrier (fiber_reason): its body is one
region, and nothing is split or interleaved.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeGuard

from tessera.transpile.builtins import BUILTINS, Vary
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.visit import bodies, children, statements, stmt_exprs, stmt_walk, walk


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
        for name in ("buf", "dst", "src"):
            v = getattr(s, name, None)
            out.add(v if isinstance(v, str) else getattr(v, "buf", ""))
        if isinstance(s, (L.Decl, L.Assign)):
            out.add(s.var.name)
        for b in bodies(s):
            out |= refs(b)
    return out


def _atomic(body: tuple[L.Stmt, ...]) -> bool:
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
    return not _atomic(s.body)


def _uniform(e: L.Expr, uniform: set[str], local: set[str]) -> bool:
    """Whether `e` has one value for the whole group: no memory, no per-tile builtin, and only
    non-locals (parameters, shape symbols) and uniform locals."""
    for x in walk(e):
        if isinstance(x, (L.Load, L.Collective, L.Atomic, L.Call)):
            return False
        if isinstance(x, L.Var) and x.name in local and x.name not in uniform:
            return False
        if isinstance(x, L.Intrinsic) and x.op in BUILTINS and BUILTINS[x.op].result != Vary.UNIFORM:
            return False
    return True


_FAR = 1 << 20  # a step between neighbouring tiles too large (or unknown) to be a contiguous access
_STEP_X = {"tile_linear_id": 1, "global_linear_id": 1, "lane_id": 1}


def _step(e: L.Expr, plan: RegionPlan, uniform: set[str], local: set[str]) -> int:
    """How far `e` moves from one tile to the next along x (the tile loop's inner axis): 0 (the
    same for neighbouring tiles), 1, a larger constant, or _FAR where it is not known."""
    def go(x: L.Expr) -> int:
        if isinstance(x, L.Const):
            return 0
        if isinstance(x, L.Var):
            if x.name not in local or x.name in uniform:
                return 0
            d = plan.remat.get(x.name)
            return go(d.init) if d is not None and d.init is not None else _FAR
        if isinstance(x, L.Affine):
            return go(x.source)
        if isinstance(x, (L.Cast, L.Unary)):
            return go(x.x)
        if isinstance(x, L.Intrinsic):
            if x.op == "tile_id":
                return 1 if isinstance(x.args[0], L.Const) and x.args[0].value == 0 else 0
            if x.op in _STEP_X:
                return _STEP_X[x.op]
            return 0 if all(go(a) == 0 for a in x.args) else _FAR
        if isinstance(x, L.Binary):
            a, b = go(x.a), go(x.b)
            if x.op in ("+", "-"):
                return min(a + b, _FAR)
            if x.op == "*":
                if a == 0 or b == 0:
                    step, factor = (b, x.a) if a == 0 else (a, x.b)
                    if step == 0:
                        return 0
                    return min(step * abs(int(factor.value)), _FAR) if isinstance(factor, L.Const) else _FAR
                return _FAR
            if x.op in ("//", "/", ">>", "%") and b == 0 and isinstance(x.b, L.Const):
                return a if x.op == "%" or a == 0 else max(1, a // max(1, abs(int(x.b.value))))
            return 0 if a == b == 0 else _FAR
        if isinstance(x, L.Select):
            return max(go(x.a), go(x.b)) if go(x.cond) == 0 else _FAR
        if isinstance(x, L.Load):
            return 0 if all(go(i) == 0 for i in x.index) else _FAR
        return 0 if all(go(c) == 0 for c in children(x)) else _FAR
    return go(e)


def _coalesced(body: tuple[L.Stmt, ...], plan: RegionPlan, uniform: set[str], local: set[str]) -> bool:
    """Whether every memory access in `body` touches, from one tile to the next along x, the same
    or the next element: only the last index may move, by at most one (what coalesced GPU code
    does). A loop whose tiles each walk their own row (`x[r, j]`, `r` per tile) stays inside the tile
    loop: interchanged, its innermost loop would stride over memory."""
    # The counter of a loop inside: the same value for every tile in the same iteration.
    uniform = uniform | {s.var.name for s in statements(body) if isinstance(s, L.For)
                         and _step(s.start, plan, uniform, local) == 0 and _step(s.step, plan, uniform, local) == 0}
    for s in statements(body):
        accesses = [x for x in stmt_walk(s) if isinstance(x, L.Load)]
        if isinstance(s, L.Store):
            accesses.append(L.Load(s.buf, s.index, s.value.dtype))
        for a in accesses:
            if a.buf in plan.regs or not a.index:
                continue
            steps = [_step(i, plan, uniform, local) for i in a.index]
            if any(steps[:-1]) or steps[-1] > 1:
                return False
    return True


def _pure(e: L.Expr, known: dict[str, L.Decl], local: set[str]) -> bool:
    return not any(isinstance(x, (L.Load, L.Collective, L.Atomic, L.Call))
                   or isinstance(x, L.Var) and x.name in local and x.name not in known for x in walk(e))


@dataclass
class RegionPlan:
    fn: L.Function
    boundary: set[int] = field(default_factory=set)  # id() of the uniform loops that split regions
    remat: dict[str, L.Decl] = field(default_factory=dict)  # recomputed locals, in program order
    per_tile: dict[str, str] = field(default_factory=dict)  # name -> the C type of its per-tile element
    reassigned: set[str] = field(default_factory=set)  # locals that an assignment statement changes
    # The kernel returns early (and has no barrier: fiber_reason): its whole body is one region
    # (no loop is split or interleaved), in which a return ends the tile's iteration.
    returns: bool = False
    regs: frozenset[str] = frozenset()  # the register arrays (per tile by nature)

    def __post_init__(self) -> None:
        self.regs = frozenset(b.name for b in self.fn.buffers if b.space == "regs")

    def splits(self, s: L.Stmt) -> bool:
        """Whether `s` is a loop that runs once for the group with its body split into regions."""
        return barrier_loop(s) or id(s) in self.boundary

    def interleaved(self, s: L.Stmt) -> bool:
        """Whether `s` is a stride loop that the tiles run interleaved (RegionPrinter.stride_for): one
        that `stride_loop` accepts and that does not split (a uniform loop with a runtime step, or a
        step of at least the tile count, is both, and runs as a boundary loop)."""
        return not self.splits(s) and stride_loop(s, self.fn.tile_count)

    def pieces(self, body: tuple[L.Stmt, ...]) -> Iterator[L.Stmt | list[L.Stmt]]:
        """A region-level body as regions (lists of statements) and the statements between them
        (barriers, boundary loops, stride loops, shared-array declarations)."""
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
                    or isinstance(s, L.Alloc) and s.buf not in self.regs):
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


def plan_regions(fn: L.Function) -> RegionPlan:
    plan = RegionPlan(fn)
    names: list[tuple[str, bool]] = []
    declared(fn.body, True, names)
    count: dict[str, int] = {}
    for n, _ in names:
        count[n] = count.get(n, 0) + 1
    local = set(count) | assigned(fn.body)
    plan.reassigned = {x.var.name for x in statements(fn.body) if isinstance(x, L.Assign)}
    for s in fn.body:
        if (isinstance(s, L.Decl) and s.init is not None and count[s.var.name] == 1
                and s.var.name not in plan.reassigned and _pure(s.init, plan.remat, local)):
            plan.remat[s.var.name] = s
    plan.returns = returns(fn.body)
    if not plan.returns:
        _choose(plan, fn.body, _uniform_locals(fn, local), local, count)
    _per_tile(plan)
    return plan


def _uniform_locals(fn: L.Function, local: set[str]) -> set[str]:
    """Locals with one value for the whole group wherever they are read: every assignment is a
    region-level statement (which every tile runs) of a uniform value; counters of barrier loops."""
    defs: dict[str, list[L.Expr]] = {}
    counters: set[str] = set()

    def visit(body: tuple[L.Stmt, ...]) -> None:
        for s in body:
            if isinstance(s, (L.Decl, L.Assign)):
                value = s.init if isinstance(s, L.Decl) else s.value
                if value is not None:
                    defs.setdefault(s.var.name, []).append(value)
            if barrier_loop(s):
                if isinstance(s, L.For):
                    counters.add(s.var.name)
                visit(s.body)

    visit(fn.body)
    nested = assigned(tuple(x for s in statements(fn.body) for b in bodies(s) for x in b if not barrier_loop(s)))
    uniform = {n for n in defs if n not in nested} | (counters - nested)
    while True:
        keep = {n for n in uniform if all(_uniform(v, uniform, local) for v in defs.get(n, ()))}
        if keep == uniform:
            return uniform
        uniform = keep


def _choose(plan: RegionPlan, body: tuple[L.Stmt, ...], uniform: set[str], local: set[str],
            count: dict[str, int]) -> None:
    """Mark the uniform loops at region level of `body` as boundaries (see the module docstring).
    A declaration in a boundary loop's body of a uniform value that nothing assigns again (the
    lowering's `tsr_stop_k` bound of an inner loop) is uniform for the loops after it."""
    uniform = set(uniform)
    for s in body:
        if isinstance(s, L.Decl) and s.init is not None and count.get(s.var.name) == 1 \
                and s.var.name not in plan.reassigned and _uniform(s.init, uniform, local):
            uniform.add(s.var.name)
        if barrier_loop(s):
            _choose(plan, s.body, uniform, local, count)
        elif (isinstance(s, L.For) and not s.unroll and s.stages is None and not own_jumps(s.body)
              and not _atomic(s.body) and all(_uniform(e, uniform, local) for e in (s.start, s.stop, s.step))
              and not ({s.var.name} | var_names((s.start, s.stop, s.step))) & assigned(s.body)
              and all(count.get(n, 0) == 1 for n in _declared_here(s.body))
              and _coalesced(s.body, plan, uniform | {s.var.name}, local)):
            plan.boundary.add(id(s))
            _choose(plan, s.body, uniform | {s.var.name}, local, count)


def _declared_here(body: tuple[L.Stmt, ...]) -> set[str]:
    return {s.var.name if isinstance(s, L.Decl) else s.buf for s in statements(body) if isinstance(s, (L.Decl, L.Alloc))}


def _per_tile(plan: RegionPlan) -> None:
    """Find the region-level names used in more than one region (or in a boundary loop's header)."""
    fn = plan.fn
    uses: dict[str, int] = {}
    level = {s.var.name if isinstance(s, L.Decl) else s.buf for s in plan.region_level(fn.body)
             if isinstance(s, (L.Decl, L.Alloc))} - set(plan.remat)

    def visit(body: tuple[L.Stmt, ...]) -> None:
        for p in plan.pieces(body):
            if isinstance(p, (list, L.ElementLoop)) or plan.interleaved(p):
                for n in refs(p if isinstance(p, list) else [p]) & level:
                    uses[n] = uses.get(n, 0) + 1
            elif isinstance(p, (L.For, L.While)):
                header = (p.start, p.stop, p.step) if isinstance(p, L.For) else (p.cond,)
                for n in var_names(header) & level:
                    uses[n] = uses.get(n, 0) + 2
                visit(p.body)

    visit(fn.body)
    for s in plan.region_level(fn.body):
        if isinstance(s, L.Decl) and uses.get(s.var.name, 0) > 1:
            plan.per_tile[s.var.name] = s.var.dtype.c_compute
        elif isinstance(s, L.Alloc) and s.buf in level and uses.get(s.buf, 0) > 1:
            b = fn.buffer(s.buf)
            assert b is not None
            if b.space == "regs":
                dims = "".join(f"[{int(d.value)}]" for d in b.shape if isinstance(d, L.Const))
                plan.per_tile[s.buf] = b.elem.c_compute + dims


__all__ = ["RegionPlan", "plan_regions", "has_barrier", "returns", "barrier_loop", "own_jumps", "assigned", "var_names",
           "declared", "refs", "stride_loop"]
