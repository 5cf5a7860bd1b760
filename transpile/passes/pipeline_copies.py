"""The `pipeline-copies` pass: a `tpipeline` loop becomes a software pipeline of asynchronous copies
(spec section 7). The leading `tcopy_async` statements of its body are issued `S - 1` iterations
ahead into `S` buffers of each destination; the compiler places every commit, wait and barrier.

Before (S = 3, `As: shared f32[64, 16]`):
    for k in range(0, K, 16) stages=3:
        copy async As[0:64, 0:16] <- A[r0:r0 + 64, k:k + 16]
        x = As[i, j]
After (`As: shared f32[3, 64, 16]`):
    %k0_k = 0;  if %k0_k < K: copy async As[0, 0:64, 0:16] <- A[r0:r0 + 64, %k0_k:%k0_k + 16]
    commit
    %k1_k = 16;  if %k1_k < K: copy async As[1, ...] <- A[..., %k1_k:%k1_k + 16]
    commit
    %stage_k = 2
    for k in range(0, K, 16):
        %stage_k = 0 if %stage_k == 2 else %stage_k + 1     (the stage iteration k reads)
        wait 1 + barrier              (this iteration's copies have landed, and every tile is done
                                       with the previous iteration, whose stage is refilled next)
        %next_k = k + 32;  %fill_k = 2 if %stage_k == 0 else %stage_k - 1
        if %next_k < K: copy async As[%fill_k, 0:64, 0:16] <- A[r0:r0 + 64, %next_k:%next_k + 16]
        commit
        x = As[%stage_k, i, j]
    wait 0                            (drain: nothing lands after the loop)

Copies of iterations past the end are not issued (their groups are empty), so trip counts below
`S` and zero trips are right. `S = 1` keeps one buffer: barrier, copies, commit, wait 0 + barrier.
A pipeline inside another loop (a persistent kernel's loop over output tiles) runs again while
other tiles may still read the stages of its previous run's last iterations, so there a barrier
precedes the prologue (the drain has left no copy of the previous run in flight); so does a
pipeline whose arrays an earlier `tpipeline` loop also fills (an array may be pipelined by several
loops: it is kept as many times as the most stages among them, and each loop uses its own first
stages). A pipeline that runs at most once per launch (at the top level, or under `if`s) over
arrays no other loop pipelines needs none, so the golden C of such kernels is unchanged.
The body may have barriers of its own after the leading copies (a hand-off of shared data between
tiles). The pipeline adds none next to them: a barrier right after the copies is the pipeline's
own, and with a barrier that ends the body (no `continue` to skip it) the wait for the next
iteration's copies moves there and the barrier at the top goes (the first iteration waits before
the loop). The rules, checked before the expansion, are transpile/passes/pipeline_rules.py's.

On sm_90a, a pipeline whose leading copies the tensor memory accelerator can all move
(transpile/lir/tma.py) also gets what a variant needs to move them so (spec section 16): each copy
its box (`Copy.tma`), one mbarrier per stage (`MbarInit` at the top of the kernel: one arrival per
box of a stage), and each wait the stage whose barrier it waits on (`AsyncWait.bar`, `.stage`).
The variant whose tensors are aligned (plan-copies activates the plans there) issues the copies
from one thread and waits on the barrier's phase instead of cp.async groups; the other one prints
the cp.async pipeline above. Such a pipeline keeps a barrier that ends its body where it is (its
wait stays at the top: a wait at the end would wait for a stage the last iteration never fills).
The arrays that a warpgroup MMA will read swizzled (passes/plan_wgmma.py) are written swizzled by
the TMA: their copies' boxes are the panels of the swizzled matrix (`Copy.tma.swizzle`,
lir/tma.py), each arriving on the stage's mbarrier.
"""

from __future__ import annotations

import dataclasses

from tessera.base.dtypes import I32, ScalarType
from tessera.base.errors import DiagnosticSink, Loc
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.affine import affine
from tessera.transpile.lir.tma import panels, pipeline_boxes
from tessera.transpile.lir.visit import map_body, map_stmt_exprs, statements
from tessera.transpile.passes.pipeline_rules import (
    PipelineRules,
    continues,
    loop_vars,
    split,
    with_loop_depth,
)
from tessera.transpile.passes.plan_wgmma import wgmma_modes


def pipeline_copies(module: L.Module, sink: DiagnosticSink, arch: str = "sm_90") -> L.Module:
    functions = tuple(_Function(module, fn, sink, arch == "sm_90a").run() for fn in module.functions)
    if all(a is b for a, b in zip(functions, module.functions)):
        return module
    return dataclasses.replace(module, functions=functions)


class _Function:
    def __init__(self, module: L.Module, fn: L.Function, sink: DiagnosticSink, tma: bool) -> None:
        self.fn = fn
        self.tma = tma and fn.kind == "kernel"
        # the arrays a warpgroup MMA will read swizzled (plan-fragments): bulk copies swizzle them too
        self.swizzled = (wgmma_modes(fn, "sm_90a") or {}) if self.tma else {}
        self.inits: list[L.MbarInit] = []  # the mbarriers of the pipelines of bulk tensor copies
        self.sink = sink
        self.rules = PipelineRules(module, fn, sink)
        self.stages = self.rules.stages  # pipelined buffer -> its number of buffers
        self.errors = len(sink.items)
        # The pipelines inside another loop (at any depth): they may run again while other tiles
        # still read what the previous run left in the stages.
        self.repeated = {s.loc for s, depth in with_loop_depth(fn.body)
                         if depth > 0 and isinstance(s, L.For) and s.stages is not None}

    def run(self) -> L.Function:
        loops = [s for s in statements(self.fn.body) if isinstance(s, L.For) and s.stages is not None]
        if not loops:
            return self.fn
        for loop in loops:
            self.rules.check(loop)
        if len(self.sink.items) == self.errors:
            self.rules.check_outside()
        if len(self.sink.items) != self.errors:
            return self.fn
        self.repeated |= _after_other_loops(loops)
        body = map_body(self.fn.body, self.expand)
        body = (*self.inits, *body)
        buffers = tuple(dataclasses.replace(b, shape=(L.Const(self.stages[b.name], I32), *b.shape),
                                            stages=self.stages[b.name], pipeline=self.rules.owner[b.name])
                        if self.stages.get(b.name, 1) > 1 else b for b in self.fn.buffers)
        return dataclasses.replace(self.fn, body=body, buffers=buffers)

    # ---- expansion
    def expand(self, s: L.Stmt) -> L.Stmt | tuple[L.Stmt, ...]:
        if not isinstance(s, L.For) or s.stages is None:
            return s
        lead, rest = split(s)
        head = s.body[: len(s.body) - len(lead) - len(rest)]  # a reused variable's assignment
        n = s.stages
        loc = s.loc
        ty = s.var.dtype
        suffix = f"{s.var.name.lstrip('%')}_{loc.line}"
        boxes = pipeline_boxes(self.fn, lead, self.swizzled) if self.tma else None
        self.bar = f"tsr_bar_{suffix}_{loc.col}" if boxes is not None else ""
        self.boxes = boxes or ()
        if boxes is not None:
            buffers = {b.name: b for b in self.fn.buffers}
            count = sum(panels(box, mode, buffers[c.dst.buf]) for c, (box, mode) in zip(lead, boxes))
            self.inits.append(L.MbarInit(loc, self.bar, n, count))
            rest = rest[1:] if rest and isinstance(rest[0], L.Barrier) else rest
            tail = None
        else:
            rest, tail = _merged_barriers(rest)
        bar = self.bar
        if n == 1:  # one buffer (or stage 0 of an array that another loop keeps several times)
            zero = L.Const(0, I32)
            before = (L.Barrier(loc),) if tail else ()
            body = (*head, *(() if tail else (L.Barrier(loc),)), *self.issued(lead, s, s.var, zero),
                    L.AsyncCommit(loc, bar), L.AsyncWait(loc, 0, bar=bar, stage=zero if bar else None),
                    *map_body(rest, lambda x: self.staged(x, zero)), *((tail,) if tail else ()))
            return (*before, dataclasses.replace(s, body=body, stages=None))
        out: list[L.Stmt] = []
        if not isinstance(s.start, (L.Const, L.Var)):  # evaluated once, as the loop would
            start = L.Var(f"%start_{suffix}", ty)
            out.append(L.Decl(loc, start, s.start, const=True))
            s = dataclasses.replace(s, start=start)
        if loc in self.repeated:  # every tile is done with the previous run's stages
            out.append(L.Barrier(loc))
        for k in range(n - 1):
            first = L.Var(f"%k{k}_{suffix}", ty)
            out.append(L.Decl(loc, first, _ahead(s.start, s.step, k, ty), const=True))
            out += [L.If(loc, _in_range(first, s), self.issued(lead, s, first, L.Const(k, I32)), ()),
                    L.AsyncCommit(loc, bar)]
        stage = L.Var(f"%stage_{suffix}", I32)
        fill = L.Var(f"%fill_{suffix}", I32)
        ahead = L.Var(f"%next_{suffix}", ty)
        last = L.Const(n - 1, I32)
        out.append(L.Decl(loc, stage, last))
        if tail:  # the first iteration's copies land before the loop; later ones at the body's end
            out.append(L.AsyncWait(loc, n - 2))
        body = (
            *head,
            L.Assign(loc, stage, L.Select(L.Compare("==", stage, last), L.Const(0, I32),
                                          L.Binary("+", stage, L.Const(1, I32), I32), I32)),
            *(() if tail else (L.AsyncWait(loc, n - 2, bar=bar, stage=stage if bar else None),)),
            L.Decl(loc, ahead, _ahead(s.var, s.step, n - 1, ty), const=True),
            L.Decl(loc, fill, L.Select(L.Compare("==", stage, L.Const(0, I32)), last,
                                       L.Binary("-", stage, L.Const(1, I32), I32), I32), const=True),
            L.If(loc, _in_range(ahead, s), self.issued(lead, s, ahead, fill), ()),
            L.AsyncCommit(loc, bar),
            *map_body(rest, lambda x: self.staged(x, stage)),
            *((L.AsyncWait(tail.loc, n - 2),) if tail else ()),
        )
        out += [dataclasses.replace(s, body=body, stages=None), L.AsyncWait(loc, 0, barrier=False, bar=bar)]
        return tuple(out)

    def issued(self, lead: tuple[L.Copy, ...], loop: L.For, at: L.Var, stage: L.Expr) -> tuple[L.Stmt, ...]:
        """The leading copies for the iteration whose loop variable is `at`, into `stage`."""
        names = {v.name for v in loop_vars(loop)}

        def subst(e: L.Expr) -> L.Expr:
            return at if isinstance(e, L.Var) and e.name in names else e

        out: list[L.Stmt] = []
        for k, c in enumerate(lead):
            moved = map_stmt_exprs(c, subst)
            assert isinstance(moved, L.Copy)
            staged = self.stages.get(moved.dst.buf, 1) > 1
            if staged:
                moved = dataclasses.replace(moved, dst=_staged_view(moved.dst, stage))
            if self.bar:
                box, mode = self.boxes[k]
                moved = dataclasses.replace(moved, tma=L.TmaCopy(self.bar, box, staged, swizzle=mode))
            out.append(moved)
        return tuple(out)

    def staged(self, s: L.Stmt, stage: L.Expr) -> L.Stmt:
        """`s` reading the pipelined buffers at `stage`."""
        def load(e: L.Expr) -> L.Expr:
            if isinstance(e, (L.Load, L.ArrayArg)) and self.stages.get(e.buf, 1) > 1:
                return dataclasses.replace(e, index=(stage, *e.index))
            return e

        s = map_stmt_exprs(s, load)
        if isinstance(s, L.Copy) and self.stages.get(s.src.buf, 1) > 1:
            s = dataclasses.replace(s, src=_staged_view(s.src, stage))
        if isinstance(s, L.FragLoad) and self.stages.get(s.src.buf, 1) > 1:
            s = dataclasses.replace(s, src=_staged_view(s.src, stage))
        if isinstance(s, L.VecMove) and self.stages.get(s.view.buf, 1) > 1:
            s = dataclasses.replace(s, view=_staged_view(s.view, stage))
        if isinstance(s, L.Mma):
            a, b = (_staged_view(v, stage) if self.stages.get(v.buf, 1) > 1 else v for v in (s.a, s.b))
            if a is not s.a or b is not s.b:
                s = dataclasses.replace(s, a=a, b=b)
        return s


def _after_other_loops(loops: list[L.For]) -> set[Loc]:
    """The pipelines whose buffers an earlier loop also pipelines: they run while other tiles may
    still read what that loop left in the stages, so like a repeated one they start with a barrier."""
    out: set[Loc] = set()
    seen: set[str] = set()
    for loop in loops:
        bufs = {c.dst.buf for c in split(loop)[0]}
        if bufs & seen:
            out.add(loop.loc)
        seen |= bufs
    return out


def _merged_barriers(rest: tuple[L.Stmt, ...]) -> tuple[tuple[L.Stmt, ...], L.Barrier | None]:
    """The body after the leading copies without the program's barriers that the pipeline's own
    make redundant: one right after the copies (the pipeline's wait and barrier precede it, with
    only the issue of later copies between), and one that ends the body (returned: the pipeline
    waits for the next iteration's copies there and drops its barrier at the top), unless a
    `continue` may skip it."""
    if rest and isinstance(rest[0], L.Barrier):
        rest = rest[1:]
    if rest and isinstance(rest[-1], L.Barrier) and not continues(rest):
        return rest[:-1], rest[-1]
    return rest, None


def _staged_view(v: L.View, stage: L.Expr) -> L.View:
    return L.View(v.buf, (stage, *v.starts), (None, *v.extents), checked=False)


def _ahead(base: L.Expr, step: L.Expr, k: int, ty: ScalarType) -> L.Expr:
    """`base + k * step` (k iterations ahead)."""
    if k == 0:
        return base
    if isinstance(step, L.Const) and isinstance(base, L.Const) and base.name is None:
        return L.Const(int(base.value) + int(step.value) * k, ty)
    if isinstance(step, L.Const):
        return affine(L.Binary("+", base, L.Const(int(step.value) * k, ty), ty))
    return affine(L.Binary("+", base, L.Binary("*", L.Const(k, ty), step, ty), ty))


def _in_range(x: L.Var, loop: L.For) -> L.Expr:
    """Whether the iteration whose loop variable would be `x` runs."""
    step = loop.step
    if isinstance(step, L.Const):
        return L.Compare("<" if int(step.value) > 0 else ">", x, loop.stop)
    zero = L.Const(0, step.dtype)
    up = L.Logical("and", L.Compare(">", step, zero), L.Compare("<", x, loop.stop))
    down = L.Logical("and", L.Compare("<", step, zero), L.Compare(">", x, loop.stop))
    return L.Logical("or", up, down)


__all__ = ["pipeline_copies"]
