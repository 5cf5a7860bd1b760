"""The verifier's checks of the plans the planning passes leave on the lowered IR (run from
lir/verify.py after every pass in the tests): each plan is there once its pass has run, says
what the analysis it came from says of the IR as it is now (so that no later change leaves a
stale plan behind), and is of the form the printers rely on.

- plan-shared: every kernel's `Function.shared` places each of its constant-size shared arrays
  (in declaration order, at its padded size) on a 16-byte boundary; arrays that lir/shared_lifetimes.py
  finds live in one barrier interval do not overlap; the total is the peak, the scratch, the
  launch-sized arrays and the dynamic flag are what lir/shared_layout.py computes of the IR.
- plan-alignment: `Function.alignment` on the kernels with alignment variants only, equal to
  `alignment_of` of the generic variant, naming global tensors and shape symbols; an aligned
  variant always has it.
- plan-copies: every copy's `plan` is `copy_plan` of the copy; every view a statement moves has
  `nonneg`, one flag per dimension, as lir/signs.py proves.
- plan-maps: every element loop's `read`, `written` and `pair` as lir/maps.py finds them.
- plan-cpu-regions: a region plan only on kernels; its per-tile names are declared in the kernel,
  its recomputed names are top-level declarations with a value, its names kept once per group
  are declared and neither per tile nor recomputed, none twice; loop marks only in
  a planned kernel that does not return early, only on loops at region level (the kernel's body
  and the bodies of loops marked "split"), "interleaved" and "lockstep" only on `for` loops.
"""

from __future__ import annotations

import dataclasses

from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.copy_plan import Divisors, alignment_of, copy_plan, vec_plan
from tessera.transpile.lir.maps import map_tensors, pair_type
from tessera.transpile.lir.shared_layout import (
    STATIC_LIMIT,
    barrier_bytes,
    buffer_bytes,
    launch_sized,
    scratch_bytes,
)
from tessera.transpile.lir.shared_lifetimes import conflicts
from tessera.transpile.lir.signs import NonNegative
from tessera.transpile.lir.tma import tma_destinations
from tessera.transpile.lir.visit import statements

# The planning passes, in pipeline order (transpile/pipeline.py; a test keeps them in step).
PLANNING_PASSES = ("plan-shared", "plan-alignment", "plan-copies", "plan-maps", "plan-cpu-regions")


class PlanError(AssertionError):
    pass


def verify_plans(module: L.Module, done: tuple[str, ...]) -> None:
    """Check the plans of the planning passes in `done` (those that have run)."""
    tables = {t.name: t.as_buffer() for t in module.tables}
    for fn in module.functions:
        if "plan-shared" in done:
            _shared(fn)
        if "plan-alignment" in done:
            _alignment(fn)
        if "plan-copies" in done:
            _copies(fn, {**tables, **{b.name: b for b in fn.buffers}})
        if "plan-maps" in done:
            _maps(fn)
        if "plan-cpu-regions" in done:
            _regions(fn)


def _fail(fn: L.Function, what: str, node: object) -> None:
    raise PlanError(f"{fn.name}: {what}: {node}")


def _shared(fn: L.Function) -> None:
    plan = fn.shared
    if fn.kind != "kernel" or plan is None:
        if plan is not None or fn.kind == "kernel":
            _fail(fn, "a shared-memory plan on a device function, or none on a kernel", plan)
        return
    arrays = [b for b in fn.buffers if b.space == "shared" and not launch_sized(b)]
    if [(s.name, s.nbytes) for s in plan.slots] != [(b.name, buffer_bytes(b)) for b in arrays] \
            or any(s.offset % 16 for s in plan.slots):
        _fail(fn, "shared slots other than the kernel's arrays at their sizes on 16-byte boundaries", plan.slots)
    if any(s.offset % 128 for s in plan.slots if s.name in tma_destinations(fn)):
        _fail(fn, "a bulk tensor copy's destination off a 128-byte boundary", plan.slots)
    peak = max(((s.offset + s.nbytes + 15) // 16 * 16 for s in plan.slots), default=0)
    sized = tuple(b.name for b in fn.buffers if launch_sized(b))
    if (plan.total_bytes, plan.scratch_bytes, plan.sized) != (peak, scratch_bytes(fn), sized) \
            or plan.dynamic != (peak + plan.scratch_bytes + barrier_bytes(fn) > STATIC_LIMIT or bool(sized)):
        _fail(fn, "a shared-memory total, scratch, launch-sized list or dynamic flag other than the slots call for",
              plan)
    for pair in conflicts(fn):
        a, b = sorted(pair)
        if b in plan.sharing(a):
            _fail(fn, f"'{a}' and '{b}' share memory although they may be live in one barrier interval", plan)


def _alignment(fn: L.Function) -> None:
    generic = dataclasses.replace(fn, aligned=False, alignment=None)
    if fn.alignment != alignment_of(generic):
        _fail(fn, "alignment variants other than the kernel's copies and map call for", fn.alignment)
    if fn.aligned and fn.alignment is None:
        _fail(fn, "an aligned variant that assumes nothing", fn.name)
    if fn.alignment is not None:
        tensors = {b.name for b in fn.buffers if b.space == "global"}
        symbols = {p.name for p in fn.params if p.kind == "shape"}
        if not set(fn.alignment.tensors) <= tensors or not set(fn.alignment.symbols) <= symbols:
            _fail(fn, "alignment assumed of something that is not a tensor or a shape symbol", fn.alignment)


def _views(s: L.Stmt) -> tuple[L.View, ...]:
    if isinstance(s, L.Copy):
        return (s.dst, s.src)
    if isinstance(s, L.Mma):
        return (s.a, s.b)
    if isinstance(s, L.FragLoad):
        return (s.src,)
    if isinstance(s, L.FragStore):
        return (s.dst,)
    if isinstance(s, L.VecMove):
        return (s.view,)
    return ()


def _copies(fn: L.Function, buffers: dict[str, L.Buffer]) -> None:
    divisors, proven = Divisors(fn), NonNegative(fn)
    for s in statements(fn.body):
        if isinstance(s, L.Copy) and s.plan != copy_plan(s, buffers, divisors):
            _fail(fn, f"a copy planned as {s.plan}, not as its views call for", s)
        if isinstance(s, L.Copy) and s.tma is not None and s.tma.active != fn.aligned:
            _fail(fn, "a bulk tensor copy active in a variant other than the aligned one", s)
        if isinstance(s, L.Copy) and s.tma is not None and s.tma.swizzle != buffers[s.dst.buf].swizzle:
            _fail(fn, "a bulk tensor copy whose swizzle is not its destination's layout", s)
        if isinstance(s, L.VecMove) and s.plan != vec_plan(s, buffers, divisors):
            _fail(fn, f"a vector access planned as {s.plan}, not as its view calls for", s)
        for v in _views(s):
            if v.nonneg != tuple(proven.holds(x) for x in v.starts):
                _fail(fn, "a view whose starts are not planned as proven", v)


def _maps(fn: L.Function) -> None:
    for s in statements(fn.body):
        if isinstance(s, L.ElementLoop):
            read, written = map_tensors(s)
            if (s.read, s.written, s.pair) != (read, written, pair_type(fn, s)):
                _fail(fn, "an element loop planned other than its body calls for", (s.read, s.written, s.pair))


def _regions(fn: L.Function) -> None:
    plan = fn.regions
    marked = [s for s in statements(fn.body) if isinstance(s, (L.For, L.While)) and s.cpu]
    if plan is None:
        if marked:
            _fail(fn, "a loop marked for region mode in a kernel that is not in region mode", marked[0])
        return
    if fn.kind != "kernel":
        _fail(fn, "a region plan on a device function", fn.name)
    if any(s.cpu not in L.CPU_LOOP_MODES or (s.cpu in ("interleaved", "lockstep") and not isinstance(s, L.For)) for s in marked):
        _fail(fn, "a loop marked with a mode it cannot have", marked)
    level = _region_level(fn.body)
    if any(id(s) not in level for s in marked) or (plan.returns and marked):
        _fail(fn, "a loop marked below region level, or in a kernel that is one region", marked)
    declared = {s.var.name for s in statements(fn.body) if isinstance(s, L.Decl)} | \
        {b.name for b in fn.buffers if b.space == "regs"}
    top = {s.var.name for s in fn.body if isinstance(s, L.Decl) and s.init is not None}
    per_tile = [n for n, _ in plan.per_tile]
    if not set(per_tile) <= declared or len(set(per_tile)) != len(per_tile):
        _fail(fn, "per-tile copies of names the kernel does not declare, or twice", plan.per_tile)
    if not set(plan.recomputed) <= top or len(set(plan.recomputed)) != len(plan.recomputed) \
            or set(plan.recomputed) & set(per_tile):
        _fail(fn, "recomputed names that are not top-level declarations with a value, or also per tile", plan)
    group = [n for n, _ in plan.group]
    if not set(group) <= declared or len(set(group)) != len(group) or set(group) & (set(per_tile) | set(plan.recomputed)):
        _fail(fn, "names kept once per group that the kernel does not declare, twice, or also per tile", plan)


def _region_level(body: tuple[L.Stmt, ...]) -> set[int]:
    """id() of the statements at region level: `body`'s, and those of the split loops in it."""
    out: set[int] = set()
    for s in body:
        out.add(id(s))
        if isinstance(s, (L.For, L.While)) and s.cpu == "split":
            out |= _region_level(s.body)
    return out


__all__ = ["PLANNING_PASSES", "PlanError", "verify_plans"]
