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
precedes the prologue (the drain has left no copy of the previous run in flight). A pipeline that
runs at most once per launch (at the top level, or under `if`s) needs none: its buffers are used
by this loop only, so the golden C of such kernels is unchanged.
Misuse is reported at its line: a body that does not start with `tcopy_async`, barriers, commits,
waits or other asynchronous copies in the body, `break` or `return` out of it, nested pipelines,
stores to a pipelined buffer or uses of it outside the loop, and copies whose views depend on
values the body changes (a copy runs `S - 1` iterations early).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from tessera.base.dtypes import I32, ScalarType
from tessera.base.errors import DiagnosticSink, Loc
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.affine import affine
from tessera.transpile.lir.visit import map_body, map_stmt_exprs, statements, stmt_walk


def pipeline_copies(module: L.Module, sink: DiagnosticSink) -> L.Module:
    functions = tuple(_Function(module, fn, sink).run() for fn in module.functions)
    if all(a is b for a, b in zip(functions, module.functions)):
        return module
    return dataclasses.replace(module, functions=functions)


def _callees(s: L.Stmt) -> list[str]:
    """The device functions a statement calls itself (not in its nested bodies)."""
    names = [s.func] if isinstance(s, L.Invoke) else []
    return names + [e.func for e in stmt_walk(s) if isinstance(e, L.Call)]


def _commits_or_waits(module: L.Module, name: str, seen: set[str]) -> bool:
    """Whether device function `name` (or one it calls) commits or waits for asynchronous copies."""
    fn = module.function(name)
    if fn is None or name in seen:
        return False
    seen.add(name)
    for s in statements(fn.body):
        if isinstance(s, (L.AsyncCommit, L.AsyncWait)) or (isinstance(s, L.Copy) and s.async_):
            return True
        if any(_commits_or_waits(module, f, seen) for f in _callees(s)):
            return True
    return False


class _Function:
    def __init__(self, module: L.Module, fn: L.Function, sink: DiagnosticSink) -> None:
        self.module = module
        self.fn = fn
        self.sink = sink
        self.stages: dict[str, int] = {}  # pipelined buffer -> its stage count
        self.owner: dict[str, Loc] = {}   # pipelined buffer -> the loop that pipelines it
        self.errors = len(sink.items)
        # The pipelines inside another loop (at any depth): they may run again while other tiles
        # still read what the previous run left in the stages.
        self.repeated = {s.loc for s, depth in _with_loop_depth(fn.body)
                         if depth > 0 and isinstance(s, L.For) and s.stages is not None}

    def run(self) -> L.Function:
        loops = [s for s in statements(self.fn.body) if isinstance(s, L.For) and s.stages is not None]
        if not loops:
            return self.fn
        for loop in loops:
            self.check(loop)
        if len(self.sink.items) != self.errors:
            return self.fn
        for s in statements(self.fn.body):
            passed = [e.buf for e in stmt_walk(s) if isinstance(e, L.ArrayArg) and self.stages.get(e.buf, 1) > 1]
            if passed:
                self.sink.error(s.loc, f"'{passed[0]}' is multi-buffered by a tpipeline loop and cannot be passed "
                                "to a device function")
                return self.fn
        body = map_body(self.fn.body, self.expand)
        buffers = tuple(dataclasses.replace(b, shape=(L.Const(self.stages[b.name], I32), *b.shape),
                                            stages=self.stages[b.name], pipeline=self.owner[b.name])
                        if self.stages.get(b.name, 1) > 1 else b for b in self.fn.buffers)
        return dataclasses.replace(self.fn, body=body, buffers=buffers)

    # ---- checks
    def check(self, loop: L.For) -> None:
        lead, rest = _split(loop)
        if not lead:
            self.sink.error(loop.loc, "a tpipeline loop starts with the tcopy_async statements it pipelines")
            return
        for c in lead:
            if c.dst.buf in self.owner:
                self.sink.error(c.loc, f"'{c.dst.buf}' is already pipelined by the tpipeline loop at line "
                                f"{self.owner[c.dst.buf].line}")
                return
        for c in lead:
            self.owner[c.dst.buf] = loop.loc
            self.stages[c.dst.buf] = loop.stages or 1
        pipelined = {c.dst.buf for c in lead}
        self.check_body(rest, loop, pipelined)
        self.check_views(lead, loop)
        self.check_outside(loop, pipelined)

    def check_body(self, rest: tuple[L.Stmt, ...], loop: L.For, pipelined: set[str]) -> None:
        for s, depth in _with_loop_depth(rest):
            what = _forbidden(s, depth)
            if what:
                self.sink.error(s.loc, f"{what} inside a tpipeline loop (line {loop.loc.line}): the pipeline "
                                "places its own commits, waits and barriers")
                return
            target = _stored_buffer(s)
            if target in pipelined:
                self.sink.error(s.loc, f"'{target}' is filled by the pipelined copies of the tpipeline at line "
                                f"{loop.loc.line} and cannot be stored to in its body")
                return
            for e in stmt_walk(s):
                if isinstance(e, L.Atomic) and e.buf in pipelined:
                    self.sink.error(s.loc, f"'{e.buf}' is filled by the pipelined copies of the tpipeline at line "
                                    f"{loop.loc.line} and cannot be updated atomically in its body")
                    return
            if any(_commits_or_waits(self.module, f, set()) for f in _callees(s)):
                self.sink.error(s.loc, "this call commits or waits for asynchronous copies inside a tpipeline "
                                f"loop (line {loop.loc.line}), which places its own")
                return

    def check_views(self, lead: tuple[L.Copy, ...], loop: L.For) -> None:
        """A copy is issued S - 1 iterations early: its views may use the loop variable and values
        that stay fixed while the loop runs, nothing the body changes."""
        changed = {s.var.name for s in statements(loop.body) if isinstance(s, (L.Assign, L.Decl))}
        changed -= {v.name for v in _loop_vars(loop)}
        for c in lead:
            for e in stmt_walk(c):  # the starts of both views
                if isinstance(e, L.Var) and e.name in changed:
                    self.sink.error(c.loc, f"the views of a pipelined copy may not use '{e.name}', which the loop "
                                    "body changes: the copy is issued before the iterations that change it")
                    return
                if not isinstance(e, (L.Load, L.Atomic)):
                    continue
                buf = self.fn.buffer(e.buf)
                if buf is not None and buf.space in ("shared", "regs"):
                    self.sink.error(c.loc, f"the views of a pipelined copy may not read '{e.buf}' (shared or "
                                    "register memory, which the loop body may change)")
                    return

    def check_outside(self, loop: L.For, pipelined: set[str]) -> None:
        inside = {id(s) for s in statements(loop.body)} | {id(loop)}
        for s in statements(self.fn.body):
            if id(s) in inside or isinstance(s, L.Alloc):
                continue
            used = _buffers_used(s) & pipelined
            if used:
                name = sorted(used)[0]
                self.sink.error(s.loc, f"'{name}' is multi-buffered by the tpipeline loop at line {loop.loc.line} "
                                "and may be used only inside it")
                return

    # ---- expansion
    def expand(self, s: L.Stmt) -> L.Stmt | tuple[L.Stmt, ...]:
        if not isinstance(s, L.For) or s.stages is None:
            return s
        lead, rest = _split(s)
        head = s.body[: len(s.body) - len(lead) - len(rest)]  # a reused variable's assignment
        n = s.stages
        loc = s.loc
        if n == 1:
            body = (*head, L.Barrier(loc), *lead, L.AsyncCommit(loc), L.AsyncWait(loc, 0), *rest)
            return dataclasses.replace(s, body=body, stages=None)
        ty = s.var.dtype
        suffix = f"{s.var.name.lstrip('%')}_{loc.line}"
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
                    L.AsyncCommit(loc)]
        stage = L.Var(f"%stage_{suffix}", I32)
        fill = L.Var(f"%fill_{suffix}", I32)
        ahead = L.Var(f"%next_{suffix}", ty)
        last = L.Const(n - 1, I32)
        out.append(L.Decl(loc, stage, last))
        body = (
            *head,
            L.Assign(loc, stage, L.Select(L.Compare("==", stage, last), L.Const(0, I32),
                                          L.Binary("+", stage, L.Const(1, I32), I32), I32)),
            L.AsyncWait(loc, n - 2),
            L.Decl(loc, ahead, _ahead(s.var, s.step, n - 1, ty), const=True),
            L.Decl(loc, fill, L.Select(L.Compare("==", stage, L.Const(0, I32)), last,
                                       L.Binary("-", stage, L.Const(1, I32), I32), I32), const=True),
            L.If(loc, _in_range(ahead, s), self.issued(lead, s, ahead, fill), ()),
            L.AsyncCommit(loc),
            *map_body(rest, lambda x: self.staged(x, stage)),
        )
        out += [dataclasses.replace(s, body=body, stages=None), L.AsyncWait(loc, 0, barrier=False)]
        return tuple(out)

    def issued(self, lead: tuple[L.Copy, ...], loop: L.For, at: L.Var, stage: L.Expr) -> tuple[L.Stmt, ...]:
        """The leading copies for the iteration whose loop variable is `at`, into `stage`."""
        names = {v.name for v in _loop_vars(loop)}

        def subst(e: L.Expr) -> L.Expr:
            return at if isinstance(e, L.Var) and e.name in names else e

        out: list[L.Stmt] = []
        for c in lead:
            moved = map_stmt_exprs(c, subst)
            assert isinstance(moved, L.Copy)
            out.append(dataclasses.replace(moved, dst=_staged_view(moved.dst, stage)))
        return tuple(out)

    def staged(self, s: L.Stmt, stage: L.Var) -> L.Stmt:
        """`s` reading the pipelined buffers at `stage`."""
        def load(e: L.Expr) -> L.Expr:
            if isinstance(e, L.Load) and self.stages.get(e.buf, 1) > 1:
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


def _loop_vars(loop: L.For) -> list[L.Var]:
    """The loop's variable, and the user's variable a reused-local loop assigns from it."""
    out = [loop.var]
    first = loop.body[0] if loop.body else None
    if isinstance(first, L.Assign) and first.value == loop.var:
        out.append(first.var)
    return out


def _split(loop: L.For) -> tuple[tuple[L.Copy, ...], tuple[L.Stmt, ...]]:
    """The leading asynchronous copies of a loop body and the statements after them."""
    body = loop.body
    start = 1 if len(_loop_vars(loop)) > 1 else 0
    end = start
    while end < len(body) and isinstance(body[end], L.Copy) and body[end].async_:  # type: ignore[union-attr]
        end += 1
    lead = tuple(s for s in body[start:end] if isinstance(s, L.Copy))
    return lead, body[end:]


def _with_loop_depth(body: tuple[L.Stmt, ...], depth: int = 0) -> Iterator[tuple[L.Stmt, int]]:
    """Every statement of `body` with the number of loops around it inside `body`."""
    for s in body:
        yield s, depth
        if isinstance(s, L.If):
            yield from _with_loop_depth(s.then, depth)
            yield from _with_loop_depth(s.orelse, depth)
        elif isinstance(s, (L.For, L.While)):
            yield from _with_loop_depth(s.body, depth + 1)


def _forbidden(s: L.Stmt, depth: int) -> str:
    if isinstance(s, L.Barrier):
        return "tbarrier()"
    if isinstance(s, L.AsyncCommit):
        return "tcommit()"
    if isinstance(s, L.AsyncWait):
        return "twait()"
    if isinstance(s, L.Copy) and s.async_:
        return "a tcopy_async() after the leading ones"
    if isinstance(s, L.For) and s.stages is not None:
        return "a nested tpipeline loop"
    if isinstance(s, L.Return):
        return "return"
    if isinstance(s, L.Break) and depth == 0:
        return "break"
    return ""


def _stored_buffer(s: L.Stmt) -> str | None:
    if isinstance(s, L.Store):
        return s.buf
    if isinstance(s, (L.Copy, L.FragStore)):
        return s.dst.buf
    if isinstance(s, L.VecMove) and s.store:
        return s.view.buf
    return None


def _buffers_used(s: L.Stmt) -> set[str]:
    used = {e.buf for e in stmt_walk(s) if isinstance(e, (L.Load, L.Atomic))}
    if isinstance(s, (L.Store, L.Fill)):
        used.add(s.buf)
    if isinstance(s, L.Copy):
        used |= {s.dst.buf, s.src.buf}
    if isinstance(s, L.Mma):
        used |= {s.a.buf, s.b.buf}
    if isinstance(s, (L.FragLoad, L.FragStore)):
        used.add(s.src.buf if isinstance(s, L.FragLoad) else s.dst.buf)
    if isinstance(s, L.VecMove):
        used |= {s.regs, s.view.buf}
    return used


__all__ = ["pipeline_copies"]
