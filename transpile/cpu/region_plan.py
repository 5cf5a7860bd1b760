"""The plan-cpu-regions pass: what region mode (transpile/cpu/regions.py) prints a kernel as,
decided before printing: whether it runs in region mode at all (`fiber_reason`), which loops split
its regions, which locals are computed again in each region, which need a copy per tile.

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
- **Group locals** (group_locals.py): a uniform local whose every assignment ends or leads its
  region, kept once and assigned once after (or before) the region's loop over the tiles. A
  uniform local's value may read memory at uniform indices where nothing between the barriers
  around the assignment writes that memory (quiet.py).
- **Per-tile locals**: every other region-level local or register array used by more than one
  region (or by a boundary loop's header), kept in an array with an element per tile.

A group reduction is a barrier with a value: the pass rewrites it first (group_reduce.py).
A map kernel's element loop is a piece of its own (RegionPrinter prints the tile loop inside its
grid-stride loop). A kernel that returns early has no barrier (fiber_reason): its body is one
region, and nothing is split or interleaved.
"""

from __future__ import annotations

import dataclasses

from tessera.base.options import CompileOptions
from tessera.transpile.builtins import BUILTINS, Vary
from tessera.transpile.cpu.group_locals import group_locals
from tessera.transpile.cpu.group_reduce import fed, reduction, results, split_reductions
from tessera.transpile.cpu.quiet import quiet_spaces, reads_quiet
from tessera.transpile.cpu.structure import (
    Regions,
    assigned,
    barrier_loop,
    declared,
    has_atomic,
    has_barrier,
    own_jumps,
    refs,
    returns,
    stride_loop,
    var_names,
)
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.visit import bodies, children, statements, stmt_walk, walk

_ALLOWED = (L.Decl, L.Assign, L.Store, L.Alloc, L.Fill, L.If, L.While, L.For, L.Break, L.Continue, L.Barrier,
            L.Fence, L.Copy, L.Eval, L.Return, L.ElementLoop, L.VecMove)


def _check(body: tuple[L.Stmt, ...], top: bool) -> str | None:
    """Why `body` cannot run in region mode, or None. `top`: its statements are region level
    (the kernel's body, or the body of a loop with a barrier at region level)."""
    for s in body:
        if reduction(s) is not None:
            if not top:
                return "a group reduction inside a branch or a loop below the top level"
            continue
        if isinstance(s, L.MbarInit):
            return "a pipeline of asynchronous copies (mbarriers on sm_90a)"
        if not isinstance(s, _ALLOWED):
            return f"a {type(s).__name__} statement"
        if isinstance(s, L.Copy) and s.async_:
            return "an asynchronous copy"
        for e in stmt_walk(s):
            if isinstance(e, (L.Collective, L.Call)):
                return "a group or warp operation" if isinstance(e, L.Collective) else "a device-function call"
        if isinstance(s, L.ElementLoop) and not top:
            return "a map kernel's element loop below the top level"
        if isinstance(s, L.Barrier) and not top:
            return "a barrier inside a branch or a loop below the top level"
        if barrier_loop(s):
            assert isinstance(s, (L.For, L.While))
            if not top:
                return "a loop with a barrier inside a branch or another loop"
            if own_jumps(s.body):
                return "a break or continue in a loop with a barrier"
            if isinstance(s, L.For) and ({s.var.name} | var_names((s.start, s.stop, s.step))) & assigned(s.body):
                return "a loop with a barrier whose counter or bounds change in its body"
            why = _check(s.body, True)
        else:
            why = next((w for b in bodies(s) if (w := _check(b, False)) is not None), None)
        if why is not None:
            return why
    return None


def fiber_reason(fn: L.Function, opts: CompileOptions) -> str | None:
    """Why kernel `fn` keeps fiber mode on the CPU backend, or None when it runs in region mode."""
    fn = split_reductions(fn)  # its group reductions as barriers (group_reduce.py), as the pass plans it
    if fn.kind != "kernel":
        return "not a kernel"
    if opts.check_bounds or opts.debug:
        return "built with check_bounds or debug"
    why = _check(fn.body, True)
    if why is not None:
        return why
    if returns(fn.body) and has_barrier(fn.body):
        return "a return in a kernel with a barrier"
    names: list[tuple[str, bool]] = []
    declared(fn.body, True, names)
    level = [n for n, top in names if top]
    if any(sum(1 for m, _ in names if m == n) > 1 for n in level):
        return "a variable declared twice, once between barriers"
    return None


def _uniform(e: L.Expr, uniform: set[str], local: set[str], reads: bool = False) -> bool:
    """Whether `e` has one value for the whole group: no per-tile builtin, only non-locals
    (parameters, shape symbols) and uniform locals, and no memory (`reads`: loads allowed, at
    uniform indices, where the caller has checked that no tile writes their memory: quiet.py)."""
    for x in walk(e):
        if isinstance(x, (L.Collective, L.Atomic, L.Call)) or isinstance(x, L.Load) and not reads:
            return False
        if isinstance(x, L.Var) and x.name in local and x.name not in uniform:
            return False
        if isinstance(x, L.Intrinsic) and x.op in BUILTINS and BUILTINS[x.op].result != Vary.UNIFORM:
            return False
    return True


_FAR = 1 << 20  # a step between neighbouring tiles too large (or unknown) to be a contiguous access
_STEP_X = {"tile_linear_id": 1, "global_linear_id": 1, "lane_id": 1}


def _step(e: L.Expr, plan: _Analysis, uniform: set[str], local: set[str]) -> int:
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


def _coalesced(body: tuple[L.Stmt, ...], plan: _Analysis, uniform: set[str], local: set[str]) -> bool:
    """Whether every memory access in `body` touches, from one tile to the next along x, the same
    or the next element: only the last index may move, by at most one (what coalesced GPU code
    does). A loop whose tiles each walk their own row (`x[r, j]`, `r` per tile) stays inside the tile
    loop: interchanged, its innermost loop would stride over memory."""
    # The counter of a loop inside: the same value for every tile in the same iteration.
    uniform = uniform | {s.var.name for s in statements(body) if isinstance(s, L.For)
                         and _step(s.start, plan, uniform, local) == 0 and _step(s.step, plan, uniform, local) == 0}
    for s in statements(body):
        accesses = [(x, 1) for x in stmt_walk(s) if isinstance(x, L.Load)]
        if isinstance(s, L.Store):
            accesses.append((L.Load(s.buf, s.index, s.value.dtype), 1))
        if isinstance(s, L.VecMove):  # a tile's chunk: the next tile's may start a chunk further on
            accesses.append((L.Load(s.view.buf, s.view.starts, s.view.starts[-1].dtype), s.view.extents[-1] or 0))
        for a, width in accesses:
            if a.buf in plan.regs or not a.index:
                continue
            steps = [_step(i, plan, uniform, local) for i in a.index]
            if any(steps[:-1]) or steps[-1] > width:
                return False
    return True


def _pure(e: L.Expr, known: dict[str, L.Decl], local: set[str]) -> bool:
    return not any(isinstance(x, (L.Load, L.Collective, L.Atomic, L.Call))
                   or isinstance(x, L.Var) and x.name in local and x.name not in known for x in walk(e))


class _Analysis(Regions):
    """The regions while they are planned: the uniform loops that split the body are known by
    identity (`boundary`), the stride loops by `stride_loop`."""

    def __init__(self, fn: L.Function) -> None:
        super().__init__(fn, returns(fn.body), {}, {})
        self.boundary: set[int] = set()  # id() of the uniform loops that split regions
        self.lockstep: set[int] = set()  # id() of the stride loops whose tiles may run in lockstep
        self.reassigned: set[str] = set()  # locals that an assignment statement changes

    def splits(self, s: L.Stmt) -> bool:
        return barrier_loop(s) or id(s) in self.boundary

    def interleaved(self, s: L.Stmt) -> bool:
        """A stride loop that `stride_loop` accepts and that does not split (a uniform loop with a
        runtime step, or a step of at least the tile count, is both, and runs as a boundary loop)."""
        return not self.splits(s) and stride_loop(s, self.fn.tile_count)


def analyse(fn: L.Function) -> _Analysis:
    """The plan of kernel `fn` (which `fiber_reason` lets run in region mode)."""
    plan = _Analysis(fn)
    names: list[tuple[str, bool]] = []
    declared(fn.body, True, names)
    count: dict[str, int] = {}
    for n, _ in names:
        count[n] = count.get(n, 0) + 1
    local = set(count) | assigned(fn.body)
    plan.reassigned = {x.var.name for x in statements(fn.body) if isinstance(x, L.Assign)}
    inputs = fed(fn)  # the tiles' arguments of group reductions: kept per tile
    for s in fn.body:
        if (isinstance(s, L.Decl) and s.init is not None and count[s.var.name] == 1 and s.var.name not in inputs
                and s.var.name not in plan.reassigned and _pure(s.init, plan.remat, local)):
            plan.remat[s.var.name] = s
    if not plan.returns:
        uniform = _uniform_locals(fn, local)
        _choose(plan, fn.body, uniform, local, count)
        plan.group = group_locals(plan, uniform, set(plan.remat) | inputs)
    _per_tile(plan)
    return plan


def _uniform_locals(fn: L.Function, local: set[str]) -> set[str]:
    """Locals with one value for the whole group wherever they are read: every assignment is a
    region-level statement (which every tile runs) of a uniform value (reading memory only where
    no statement between the barriers around it writes that memory: quiet.py); counters of
    barrier loops."""
    defs: dict[str, list[tuple[L.Expr, bool]]] = {}  # each value, and whether it may read memory
    counters: set[str] = set()
    quiet = quiet_spaces(fn)

    def visit(body: tuple[L.Stmt, ...]) -> None:
        for s in body:
            if isinstance(s, (L.Decl, L.Assign)) and reduction(s) is None:
                value = s.init if isinstance(s, L.Decl) else s.value
                if value is not None:
                    defs.setdefault(s.var.name, []).append((value, reads_quiet(value, fn, quiet[id(s)])))
            if barrier_loop(s):
                if isinstance(s, L.For):
                    counters.add(s.var.name)
                visit(s.body)

    visit(fn.body)
    nested = assigned(tuple(x for s in statements(fn.body) for b in bodies(s) for x in b if not barrier_loop(s)))
    uniform = {n for n in defs if n not in nested} | (counters - nested) | results(fn)
    while True:
        keep = {n for n in uniform if all(_uniform(v, uniform, local, reads) for v, reads in defs.get(n, ()))}
        if keep == uniform:
            return uniform
        uniform = keep


def _choose(plan: _Analysis, body: tuple[L.Stmt, ...], uniform: set[str], local: set[str],
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
              and not has_atomic(s.body) and all(_uniform(e, uniform, local) for e in (s.start, s.stop, s.step))
              and not ({s.var.name} | var_names((s.start, s.stop, s.step))) & assigned(s.body)
              and all(count.get(n, 0) == 1 for n in _declared_here(s.body))
              and _coalesced(s.body, plan, uniform | {s.var.name}, local)):
            plan.boundary.add(id(s))
            _choose(plan, s.body, uniform | {s.var.name}, local, count)
        elif plan.interleaved(s) and _lockstep(s, uniform, local):
            plan.lockstep.add(id(s))


_INT_COUNTERS = ("i32", "u32", "i64", "u64")


def _lockstep(s: L.Stmt, uniform: set[str], local: set[str]) -> bool:
    """Whether stride loop `s` may run its tiles in lockstep (RegionPrinter.stride_for): an integer
    counter that its body does not assign, a stop and a step the same for every tile and unchanged by
    the body. Where the tiles' counters then start consecutive (tile t's is tile 0's + t) and the
    step is positive, tile t's counter in every pass is the pass's base + t, and the tiles whose
    loop is not done are a prefix of the group."""
    return (isinstance(s, L.For) and s.var.dtype.name in _INT_COUNTERS
            and all(_uniform(e, uniform, local) for e in (s.stop, s.step))
            and not ({s.var.name} | var_names((s.stop, s.step))) & assigned(s.body))


def _declared_here(body: tuple[L.Stmt, ...]) -> set[str]:
    return {s.var.name if isinstance(s, L.Decl) else s.buf for s in statements(body) if isinstance(s, (L.Decl, L.Alloc))}


def _per_tile(plan: _Analysis) -> None:
    """Find the region-level names used in more than one region (or in a boundary loop's header)."""
    fn = plan.fn
    uses: dict[str, int] = {}
    level = {s.var.name if isinstance(s, L.Decl) else s.buf for s in plan.region_level(fn.body)
             if isinstance(s, (L.Decl, L.Alloc))} - set(plan.remat) - set(plan.group)

    def visit(body: tuple[L.Stmt, ...]) -> None:
        for p in plan.pieces(body):
            if isinstance(p, (list, L.ElementLoop)) or plan.interleaved(p) or reduction(p) is not None:
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

def plan_cpu_regions(module: L.Module, options: CompileOptions) -> L.Module:
    """The plan-cpu-regions pass (only for the CPU backend's C, `CompileOptions.cpu_regions`).

    Before:
        kernel k tile(16, 16)(...):
            decl tx:i32 = tile_id(0:i32):i32
            for k0:i32 in range(0:i32, K:i32, 16:i32):
    After:
        kernel k tile(16, 16)(...):
            cpu region mode; per tile: acc (float[4][4]); recomputed: tx
            decl tx:i32 = tile_id(0:i32):i32
            for k0:i32 in range(0:i32, K:i32, 16:i32) [CPU: once per group]:
    """
    if not options.cpu_regions:
        return module
    functions = []
    for fn in module.functions:
        if fn.kind != "kernel" or fiber_reason(fn, options) is not None:
            functions.append(fn)
            continue
        fn = split_reductions(fn)
        plan = analyse(fn)
        marks: dict[int, str] = {}
        if not plan.returns:  # one region: no loop splits it or runs interleaved
            for s in plan.region_level(fn.body):
                if plan.splits(s):
                    marks[id(s)] = "split"
                elif plan.interleaved(s):
                    marks[id(s)] = "lockstep" if id(s) in plan.lockstep else "interleaved"
        functions.append(dataclasses.replace(
            fn, body=_marked(fn.body, marks),
            regions=L.RegionPlan(tuple(plan.per_tile.items()), tuple(plan.remat), plan.returns,
                                 tuple(plan.group.items()))))
    return dataclasses.replace(module, functions=tuple(functions))


def _marked(body: tuple[L.Stmt, ...], marks: dict[int, str]) -> tuple[L.Stmt, ...]:
    """`body` with the loops whose id() `marks` holds marked (looked up before anything is rebuilt)."""
    out: list[L.Stmt] = []
    for s in body:
        if isinstance(s, (L.For, L.While)):
            s = dataclasses.replace(s, body=_marked(s.body, marks), cpu=marks.get(id(s), ""))
        elif isinstance(s, L.ElementLoop):
            s = dataclasses.replace(s, body=_marked(s.body, marks))
        elif isinstance(s, L.If):
            s = dataclasses.replace(s, then=_marked(s.then, marks), orelse=_marked(s.orelse, marks))
        out.append(s)
    return tuple(out)


__all__ = ["analyse", "fiber_reason", "plan_cpu_regions"]
