"""A readable, deterministic text form of the lowered IR (`tesserac --dump-after PASS` for `lower`
and the passes after it, `--emit ir`). Values show their type after a colon (`i:i32`); casts,
loads and builtins are spelled as calls; an index in affine form prints as `{i + j*4 + 1}`.

    kernel k tile(128,) (x: f32[n], y: mut f32[n], n: shape i32)
        decl i:i32 = tile_linear_id():i32            # line 3
        store y[{i}] = (load x[{i}]:f32 * 2.0:f32)   # line 4
"""

from __future__ import annotations

from tessera.frontend import nodes as N
from tessera.frontend.dump import dump_module
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.cnames import module_names
from tessera.transpile.lir.fold import trip_count
from tessera.transpile.lir.shared_layout import shared_layout

_INDENT = "    "


def expr(e: L.Expr) -> str:
    if isinstance(e, L.Const):
        text = repr(e.value) if e.name is None else f"{e.name}={e.value!r}"
        return f"{text}:{e.dtype}"
    if isinstance(e, L.Var):
        return f"{e.name}:{e.dtype}"
    if isinstance(e, L.Unary):
        return f"({e.op}{' ' if e.op == 'not' else ''}{expr(e.x)})"
    if isinstance(e, (L.Binary, L.Compare, L.Logical)):
        return f"({expr(e.a)} {e.op} {expr(e.b)})"
    if isinstance(e, L.Select):
        return f"({expr(e.a)} if {expr(e.cond)} else {expr(e.b)})"
    if isinstance(e, L.Cast):
        return f"{e.dtype}({expr(e.x)})"
    if isinstance(e, L.Affine):
        parts = [expr(a) if c.value == 1 and c.name is None else f"{expr(a)}*{_coeff(c)}" for a, c in e.terms]
        if e.offset.value or not parts:
            parts.append(repr(e.offset.value))
        return "{" + " + ".join(parts) + "}"
    if isinstance(e, L.Load):
        return f"load {e.buf}[{', '.join(expr(i) for i in e.index)}]:{e.dtype}"
    if isinstance(e, (L.Intrinsic, L.Collective)):
        return f"{e.op}({', '.join(expr(a) for a in e.args)}):{e.dtype}"
    if isinstance(e, L.Atomic):
        args = ", ".join(expr(a) for a in e.args)
        return f"{e.op}({e.buf}[{', '.join(expr(i) for i in e.index)}], {args}, scope={e.scope}):{e.dtype}"
    if isinstance(e, L.ArrayArg):
        return f"array {e.buf}" + (f"[{', '.join(expr(i) for i in e.index)}]" if e.index else "")
    assert isinstance(e, L.Call)
    return f"call {e.func}({', '.join(expr(a) for a in e.args)}):{e.dtype}"


def _coeff(c: L.Const) -> str:
    return c.name if c.name is not None else repr(c.value)


def _view(v: L.View) -> str:
    dims = [expr(s) if n is None else f"{expr(s)}+:{n}" for s, n in zip(v.starts, v.extents)]
    return f"{v.buf}[{', '.join(dims)}]"


def _edges(*views: L.View) -> str:
    """Where planned views test their lower edge (the starts not proven non-negative)."""
    tested = [f"{v.buf} dimension {k}" for v in views for k, ok in enumerate(v.nonneg) if not ok]
    return f"lower edge tested: {', '.join(tested)}" if tested else ""


def _planned(*notes: str) -> str:
    notes = tuple(n for n in notes if n)
    return f" [{'; '.join(notes)}]" if notes else ""


_CPU_LOOPS = {"split": "CPU: once per group", "interleaved": "CPU: tiles interleaved",
              "lockstep": "CPU: tiles interleaved, in lockstep"}


def _copy_plan(s: L.Copy | L.VecMove) -> str:
    tma = s.tma if isinstance(s, L.Copy) else None
    bulk = (f"bulk tensor copy{' (this variant)' if tma.active else ''}: box {'x'.join(map(str, tma.box))} "
            f"{f'swizzled ({tma.swizzle}-byte mode, a box per panel) ' if tma.swizzle else ''}on {tma.bar}"
            ) if tma is not None else ""
    if s.plan is None:
        return bulk
    return f"chunks of {s.plan.vb} bytes" + (", alignment tested" if s.plan.check else "") + (f"; {bulk}" if bulk else "")


def _map_plan(s: L.ElementLoop) -> str:
    if not s.written:
        return ""
    reads = f"reads {', '.join(s.read)}; " if s.read else ""
    return f"{reads}writes {', '.join(s.written)}" + (f"; {s.pair} pairs" if s.pair else "")


def _stmts(body: tuple[L.Stmt, ...], depth: int, out: list[str]) -> None:
    pad = _INDENT * depth
    for s in body:
        ln = f"  # line {s.loc.line}"
        if isinstance(s, L.Decl):
            init = f" = {expr(s.init)}" if s.init is not None else ""
            out.append(f"{pad}{'const ' if s.const else ''}decl {expr(s.var)}{init}{ln}")
        elif isinstance(s, L.Assign):
            op = f" {s.op}=[{s.op_type}]" if s.op else " ="
            out.append(f"{pad}{expr(s.var)}{op} {expr(s.value)}{ln}")
        elif isinstance(s, L.Store):
            op = f" {s.op}=[{s.op_type}]" if s.op else " ="
            out.append(f"{pad}store {s.buf}[{', '.join(expr(i) for i in s.index)}]{op} {expr(s.value)}{ln}")
        elif isinstance(s, L.Alloc):
            out.append(f"{pad}alloc {s.buf}{ln}")
        elif isinstance(s, L.Fill):
            out.append(f"{pad}fill {s.buf} = {expr(s.value)}{ln}")
        elif isinstance(s, L.If):
            out.append(f"{pad}if {expr(s.cond)}:{ln}")
            _stmts(s.then, depth + 1, out)
            if s.orelse:
                out.append(f"{pad}else:")
                _stmts(s.orelse, depth + 1, out)
        elif isinstance(s, L.While):
            out.append(f"{pad}while {expr(s.cond)}{_planned(_CPU_LOOPS.get(s.cpu, ''))}:{ln}")
            _stmts(s.body, depth + 1, out)
        elif isinstance(s, L.For):
            trips = f" trips={n}" if (n := trip_count(s)) is not None else ""
            stages = f" stages={s.stages}" if s.stages is not None else ""
            out.append(f"{pad}for {expr(s.var)} in {'unrolled ' if s.unroll else ''}range({expr(s.start)}, "
                       f"{expr(s.stop)}, {expr(s.step)}){trips}{stages}{_planned(_CPU_LOOPS.get(s.cpu, ''))}:{ln}")
            _stmts(s.body, depth + 1, out)
        elif isinstance(s, L.ElementLoop):
            out.append(f"{pad}for each of the {expr(s.count)} elements, {s.width} per tile{_planned(_map_plan(s))}:{ln}")
            _stmts(s.body, depth + 1, out)
        elif isinstance(s, L.Return):
            values = [expr(v) for v in s.values] if s.values else [expr(s.value)] if s.value is not None else []
            out.append(f"{pad}return{' ' + ', '.join(values) if values else ''}{ln}")
        elif isinstance(s, L.Fence):
            out.append(f"{pad}fence {s.scope}{ln}")
        elif isinstance(s, L.Copy):
            plan = _planned(_copy_plan(s), _edges(s.dst, s.src))
            out.append(f"{pad}copy{' async' if s.async_ else ''} {_view(s.dst)} <- {_view(s.src)}{plan}{ln}")
        elif isinstance(s, L.VecMove):
            plan = _planned(_copy_plan(s), _edges(s.view))
            arrow = f"{_view(s.view)} <- {s.regs}[:]" if s.store else f"{s.regs}[:] <- {_view(s.view)}"
            out.append(f"{pad}vector {arrow}{plan}{ln}")
        elif isinstance(s, L.Mma):
            b = f"transpose({_view(s.b)})" if s.trans_b else _view(s.b)
            out.append(f"{pad}mma {s.acc} += {_view(s.a)} @ {b}{_planned(_edges(s.a, s.b))}{ln}")
        elif isinstance(s, L.FragLoad):
            out.append(f"{pad}fragment {s.acc} <- {_view(s.src)}{_planned(_edges(s.src))}{ln}")
        elif isinstance(s, L.FragStore):
            out.append(f"{pad}fragment {_view(s.dst)} <- {s.acc}{_planned(_edges(s.dst))}{ln}")
        elif isinstance(s, L.FragAssign):
            op = f" {s.op}=[{s.op_type}]" if s.op else " ="
            out.append(f"{pad}fragment {s.acc}[:]{op} {expr(s.value)}{ln}")
        elif isinstance(s, L.FragReduce):
            parts = f" parts -> {s.buf}" if s.buf else ""
            out.append(f"{pad}fragment {s.dst}[:] <- {s.op}({s.src}){parts}{ln}")
        elif isinstance(s, L.FragCombine):
            out.append(f"{pad}fragment {s.dst}[:] <- {s.op}({s.buf} rows){ln}")
        elif isinstance(s, L.AsyncCommit):
            out.append(f"{pad}commit{f' (or {s.bar})' if s.bar else ''}{ln}")
        elif isinstance(s, L.AsyncWait):
            bar = f" (or {s.bar}[{expr(s.stage)}])" if s.bar and s.stage is not None else ""
            out.append(f"{pad}wait {s.pending}{bar}{' + barrier' if s.barrier else ''}{ln}")
        elif isinstance(s, L.MbarInit):
            out.append(f"{pad}mbarriers {s.bar}[{s.stages}], {s.count} arrivals a phase{ln}")
        elif isinstance(s, L.Eval):
            out.append(f"{pad}{expr(s.expr)}{ln}")
        elif isinstance(s, L.Invoke):
            into = f" -> {', '.join(expr(v) for v in s.outs)}" if s.outs else ""
            out.append(f"{pad}call {s.func}({', '.join(expr(a) for a in s.args)}){into}{ln}")
        elif isinstance(s, L.Print):
            out.append(f"{pad}print {s.fmt!r}{''.join(', ' + expr(a) for a in s.args)}{ln}")
        elif isinstance(s, L.Assert):
            out.append(f"{pad}assert {expr(s.cond)}, {s.message!r}{ln}")
        else:
            out.append(f"{pad}{type(s).__name__.lower()}{ln}")


def _buffer(b: L.Buffer) -> str:
    dims = ", ".join(repr(d.value) if isinstance(d, L.Const) else expr(d) for d in b.shape)
    extra = (" mut" if b.mut and b.space == "global" else "") + (f" pad={b.pad}" if b.pad else "")
    return f"{b.space} {b.name}: {b.elem}[{dims}]{extra}"


def _alignment(f: L.Function) -> str:
    a = f.alignment
    if a is None:
        return ""
    assumed = ", ".join(a.tensors) + " 16-byte aligned" + "".join(f", {s} % 16 == 0" for s in a.symbols)
    return f"variant aligned: {assumed}" if f.aligned else f"variant generic (the aligned one assumes {assumed})"


def _regions(plan: L.RegionPlan | None) -> str:
    if plan is None:
        return ""
    per_tile = f"; per tile: {', '.join(f'{n} ({c})' for n, c in plan.per_tile)}" if plan.per_tile else ""
    recomputed = f"; recomputed: {', '.join(plan.recomputed)}" if plan.recomputed else ""
    group = f"; once per group: {', '.join(f'{n} ({c})' for n, c in plan.group)}" if plan.group else ""
    return "cpu region mode" + (", one region (returns early)" if plan.returns else "") + per_tile + recomputed + group


def dump_lir(m: L.Module) -> str:
    names = module_names(m)
    out = [f"module {m.path}"]
    for c in m.consts:
        out.append(f"const {c.name}: {c.dtype} = {c.value!r}")
    for t in m.tables:
        out.append(f"table {t.name}: {t.elem}{list(t.shape)} = {list(t.values)}")
    for f in m.functions:
        params = ", ".join(f"{p.name}: {p.kind} {p.dtype}" for p in f.params)
        head = f"{f.kind} {f.name}" + (f" as {names[f.name]}" if names[f.name] != f.name else "")
        head += f" tile{f.tile}" if f.tile else ""
        if f.shared_budget is not None:
            head += f" shared({f.shared_budget})"
        rets = f" -> ({', '.join(map(str, f.rets))})" if f.rets else ""
        out.append(f"{head}({params}){' -> ' + str(f.ret) if f.ret else rets}:")
        out += [f"{_INDENT}{line}" for line in (_alignment(f), _regions(f.regions)) if line]
        for c in f.consts:
            out.append(f"{_INDENT}const {c.name}: {c.dtype} = {c.value!r}")
        for b in f.buffers:
            out.append(f"{_INDENT}buffer {_buffer(b)}")
        if f.kind == "kernel":
            layout = shared_layout(f)
            for sl in layout.slots:
                shares = layout.sharing(sl.name)
                note = f", shares memory with {', '.join(shares)}" if shares else ""
                out.append(f"{_INDENT}shared {sl.name} @ {sl.offset} ({sl.nbytes} bytes{note})")
            if layout.scratch_bytes:
                out.append(f"{_INDENT}shared scratch ({layout.scratch_bytes} bytes, group reductions)")
        _stmts(f.body, 1, out)
    return "\n".join(out) + "\n"


def dump_any(m: object) -> str:
    """The text form of either IR level (`tesserac --dump-after`)."""
    if isinstance(m, N.Module):
        return dump_module(m)
    assert isinstance(m, L.Module)
    return dump_lir(m)
