"""The rules of `tpipeline` loops (spec section 7), checked by the `pipeline-copies` pass before it
expands them (transpile/passes/pipeline_copies.py). One rule for the body, applied to what it
does itself and to what the device functions it calls do: the pipeline places every commit and
wait, so a `tcommit()`, `twait()` or later `tcopy_async` is an error there, directly or in a
callee; a `tbarrier()` after the leading copies is the program's own hand-off of shared data
between tiles and is allowed, directly or in a callee. A shared array may be the destination of
the leading copies of several loops (one after another, or inside an outer loop); it is then used
only inside those loops, never stored to in them. Misuse is reported at its line: a body that does
not start with `tcopy_async`, `break` or `return` out of it, nested pipelines, stores to a
pipelined buffer or uses of it outside its loops, and copies whose views depend on values the body
changes (a copy runs `S - 1` iterations early)."""

from __future__ import annotations

from collections.abc import Iterator

from tessera.base.errors import DiagnosticSink, Loc
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.visit import statements, stmt_walk


class PipelineRules:
    """The checks of one function's `tpipeline` loops; afterwards `stages` (each pipelined buffer's
    number of buffers: the most stages of the loops that pipeline it) and `owner` (the first such
    loop with that many stages, for notes about the buffer's size)."""

    def __init__(self, module: L.Module, fn: L.Function, sink: DiagnosticSink) -> None:
        self.module = module
        self.fn = fn
        self.sink = sink
        self.stages: dict[str, int] = {}
        self.owner: dict[str, Loc] = {}
        self.loops: dict[str, list[L.For]] = {}  # pipelined buffer -> the loops that pipeline it

    def check(self, loop: L.For) -> None:
        lead, rest = split(loop)
        if not lead:
            self.sink.error(loop.loc, "a tpipeline loop starts with the tcopy_async statements it pipelines")
            return
        for c in lead:
            n = loop.stages or 1
            if n > self.stages.get(c.dst.buf, 0):
                self.stages[c.dst.buf] = n
                self.owner[c.dst.buf] = loop.loc
            if loop not in self.loops.setdefault(c.dst.buf, []):
                self.loops[c.dst.buf].append(loop)
        pipelined = {c.dst.buf for c in lead}
        self.check_body(rest, loop, pipelined)
        self.check_views(lead, loop)

    def check_body(self, rest: tuple[L.Stmt, ...], loop: L.For, pipelined: set[str]) -> None:
        for s, depth in with_loop_depth(rest):
            what = _forbidden(s, depth)
            if what:
                self.sink.error(s.loc, f"{what} inside a tpipeline loop (line {loop.loc.line}): the pipeline "
                                "places its own commits and waits")
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
            calls = [e for e in stmt_walk(s) if isinstance(e, L.Call)] + ([s] if isinstance(s, L.Invoke) else [])
            for call in calls:
                param = self.mut_parameter(call)
                if param is not None and param[1] in pipelined:
                    self.sink.error(s.loc, f"'{param[1]}' is filled by the pipelined copies of the tpipeline at line "
                                    f"{loop.loc.line} and cannot be passed for the mut parameter '{param[0]}' of "
                                    f"{call.func}() in its body (declare the parameter without mut)")
                    return
            called = next((f for f in callees(s) if _commits_or_waits(self.module, f, set())), None)
            if called is not None:
                self.sink.error(s.loc, f"{called}() commits or waits for asynchronous copies (itself or through "
                                f"its calls), inside a tpipeline loop (line {loop.loc.line}), which places its own")
                return

    def mut_parameter(self, call: L.Call | L.Invoke) -> tuple[str, str] | None:
        """(parameter, array) of the first array passed for a `mut` parameter of the callee."""
        callee = self.module.function(call.func)
        if callee is None:
            return None
        for p, a in zip(callee.params, call.args):
            b = callee.buffer(p.name) if p.kind == "array" else None
            if b is not None and b.mut and isinstance(a, L.ArrayArg):
                return p.name, a.buf
        return None

    def check_views(self, lead: tuple[L.Copy, ...], loop: L.For) -> None:
        """A copy is issued S - 1 iterations early: its views may use the loop variable and values
        that stay fixed while the loop runs, nothing the body changes."""
        changed = {s.var.name for s in statements(loop.body) if isinstance(s, (L.Assign, L.Decl))}
        changed -= {v.name for v in loop_vars(loop)}
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

    def check_outside(self) -> None:
        """A pipelined buffer is used only inside the loops that pipeline it."""
        for name, loops in self.loops.items():
            inside = {id(s) for loop in loops for s in statements(loop.body)} | {id(loop) for loop in loops}
            for s in statements(self.fn.body):
                if id(s) in inside or isinstance(s, L.Alloc) or name not in buffers_used(s):
                    continue
                where = " and ".join(str(loop.loc.line) for loop in loops)
                self.sink.error(s.loc, f"'{name}' is multi-buffered by the tpipeline loop{'s' if len(loops) > 1 else ''}"
                                f" at line {where} and may be used only inside {'them' if len(loops) > 1 else 'it'}")
                return


def callees(s: L.Stmt) -> list[str]:
    """The device functions a statement calls itself (not in its nested bodies)."""
    names = [s.func] if isinstance(s, L.Invoke) else []
    return names + [e.func for e in stmt_walk(s) if isinstance(e, L.Call)]


def _commits_or_waits(module: L.Module, name: str, seen: set[str]) -> bool:
    """Whether device function `name` (or one it calls) commits, waits for or issues asynchronous copies."""
    fn = module.function(name)
    if fn is None or name in seen:
        return False
    seen.add(name)
    for s in statements(fn.body):
        if isinstance(s, (L.AsyncCommit, L.AsyncWait)) or (isinstance(s, L.Copy) and s.async_):
            return True
        if any(_commits_or_waits(module, f, seen) for f in callees(s)):
            return True
    return False


def loop_vars(loop: L.For) -> list[L.Var]:
    """The loop's variable, and the user's variable a reused-local loop assigns from it."""
    out = [loop.var]
    first = loop.body[0] if loop.body else None
    if isinstance(first, L.Assign) and first.value == loop.var:
        out.append(first.var)
    return out


def split(loop: L.For) -> tuple[tuple[L.Copy, ...], tuple[L.Stmt, ...]]:
    """The leading asynchronous copies of a loop body and the statements after them."""
    body = loop.body
    start = 1 if len(loop_vars(loop)) > 1 else 0
    end = start
    while end < len(body) and isinstance(body[end], L.Copy) and body[end].async_:  # type: ignore[union-attr]
        end += 1
    lead = tuple(s for s in body[start:end] if isinstance(s, L.Copy))
    return lead, body[end:]


def with_loop_depth(body: tuple[L.Stmt, ...], depth: int = 0) -> Iterator[tuple[L.Stmt, int]]:
    """Every statement of `body` with the number of loops around it inside `body`."""
    for s in body:
        yield s, depth
        if isinstance(s, L.If):
            yield from with_loop_depth(s.then, depth)
            yield from with_loop_depth(s.orelse, depth)
        elif isinstance(s, (L.For, L.While)):
            yield from with_loop_depth(s.body, depth + 1)


def continues(body: tuple[L.Stmt, ...]) -> bool:
    """Whether `body` (a loop's) has a `continue` of that loop."""
    return any(isinstance(s, L.Continue) and depth == 0 for s, depth in with_loop_depth(body))


def _forbidden(s: L.Stmt, depth: int) -> str:
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


def buffers_used(s: L.Stmt) -> set[str]:
    """The buffers a statement reads or writes itself (not in its nested bodies)."""
    used = {e.buf for e in stmt_walk(s) if isinstance(e, (L.Load, L.Atomic, L.ArrayArg))}
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


__all__ = ["PipelineRules", "buffers_used", "callees", "continues", "loop_vars", "split", "with_loop_depth"]
