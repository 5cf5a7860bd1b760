"""Region mode of the CPU backend: a kernel whose only synchronization is `tbarrier()` printed
as loops over the group's tiles (the technique of CPU OpenCL implementations such as PoCL).

The cooperation rule makes every barrier reached by the whole group under uniform control flow,
so the code between two barriers (a region) can run for tile 0, then tile 1, ... with no fiber
switch. Locals that live across a barrier become per-tile arrays (`static thread_local`: a
group runs on one worker thread at a time), bound as C++ references inside each tile loop so
that the statement printer (cstmt.BodyPrinter) prints the statements unchanged. A loop that
contains a barrier runs once for the group: its header is evaluated with tile 0's values (the
cooperation rule makes it uniform) and its body is split into regions. `threadIdx` names the
tile loop's own index (`tsr_tid`), not the fiber's.

The output goes only into the CPU build's kernel unit (emit.render_module with
`Options.cpu_regions`); the CUDA C for the GPU never changes. A kernel the printer cannot handle
for certain (an allow-list of statements) keeps fiber mode: `fiber_reason` says why.
"""

from __future__ import annotations

from collections.abc import Iterator

from tessera.transpile import lir as L
from tessera.transpile.cprinter import CPrinter
from tessera.transpile.cstmt import BodyPrinter, Options
from tessera.transpile.cterms import var_name
from tessera.transpile.lir_visit import bodies, stmt_exprs, stmt_walk, walk
from tessera.transpile.names import c_ident

_ALLOWED = (L.Decl, L.Assign, L.Store, L.Alloc, L.Fill, L.If, L.While, L.For, L.Break, L.Continue, L.Barrier,
            L.Fence, L.Copy, L.Eval)


def _has_barrier(body: tuple[L.Stmt, ...]) -> bool:
    return any(isinstance(s, L.Barrier) or any(_has_barrier(b) for b in bodies(s)) for s in body)


def _barrier_loop(s: L.Stmt) -> bool:
    return isinstance(s, (L.For, L.While)) and _has_barrier(s.body)


def _own_jumps(body: tuple[L.Stmt, ...]) -> bool:
    """Whether a break or continue in `body` targets the loop whose body it is."""
    return any(isinstance(s, (L.Break, L.Continue)) or (isinstance(s, L.If) and (_own_jumps(s.then)
                                                                                  or _own_jumps(s.orelse)))
               for s in body)


def _assigned(body: tuple[L.Stmt, ...]) -> set[str]:
    out: set[str] = set()
    for s in body:
        if isinstance(s, (L.Assign, L.Decl)):
            out.add(s.var.name)
        if isinstance(s, L.For):
            out.add(s.var.name)
        for b in bodies(s):
            out |= _assigned(b)
    return out


def _var_names(exprs: tuple[L.Expr, ...]) -> set[str]:
    return {x.name for e in exprs for x in walk(e) if isinstance(x, L.Var)}


def _check(body: tuple[L.Stmt, ...], top: bool) -> str | None:
    """Why `body` cannot run in region mode, or None. `top`: its statements are region level
    (the kernel's body, or the body of a loop with a barrier at region level)."""
    for s in body:
        if not isinstance(s, _ALLOWED):
            return f"a {type(s).__name__} statement"
        if isinstance(s, L.Copy) and s.async_:
            return "an asynchronous copy"
        for e in stmt_walk(s):
            if isinstance(e, (L.Collective, L.Call)):
                return "a group or warp operation" if isinstance(e, L.Collective) else "a device-function call"
        if isinstance(s, L.Barrier) and not top:
            return "a barrier inside a branch or a loop below the top level"
        if _barrier_loop(s):
            assert isinstance(s, (L.For, L.While))
            if not top:
                return "a loop with a barrier inside a branch or another loop"
            if _own_jumps(s.body):
                return "a break or continue in a loop with a barrier"
            if isinstance(s, L.For) and ({s.var.name} | _var_names((s.start, s.stop, s.step))) & _assigned(s.body):
                return "a loop with a barrier whose counter or bounds change in its body"
            why = _check(s.body, True)
        else:
            why = next((w for b in bodies(s) if (w := _check(b, False)) is not None), None)
        if why is not None:
            return why
    return None


def _declared(body: tuple[L.Stmt, ...], top: bool, out: list[tuple[str, bool]]) -> None:
    """Every name declared in `body` (variables, register arrays, loop counters), with whether
    it is declared at region level."""
    for s in body:
        if isinstance(s, L.Decl):
            out.append((s.var.name, top))
        elif isinstance(s, L.Alloc):
            out.append((s.buf, top))
        elif isinstance(s, L.For):
            out.append((s.var.name, False))
        for b in bodies(s):
            _declared(b, top and _barrier_loop(s), out)


def fiber_reason(fn: L.Function, opts: Options) -> str | None:
    """Why kernel `fn` keeps fiber mode on the CPU backend, or None when it runs in region mode."""
    if fn.kind != "kernel":
        return "not a kernel"
    if opts.check_bounds or opts.debug:
        return "built with check_bounds or debug"
    why = _check(fn.body, True)
    if why is not None:
        return why
    names: list[tuple[str, bool]] = []
    _declared(fn.body, True, names)
    level = [n for n, top in names if top]
    if any(sum(1 for m, _ in names if m == n) > 1 for n in level):
        return "a variable declared twice, once between barriers"
    return None


def _refs(stmts: tuple[L.Stmt, ...] | list[L.Stmt]) -> set[str]:
    """The names (variables and arrays) that statements use, nested ones included (an over-estimate)."""
    out: set[str] = set()
    for s in stmts:
        for e in stmt_exprs(s):
            for x in walk(e):
                if isinstance(x, L.Var):
                    out.add(x.name)
                elif isinstance(x, L.Load):
                    out.add(x.buf)
        for field in ("buf", "dst", "src"):
            v = getattr(s, field, None)
            out.add(v if isinstance(v, str) else getattr(v, "buf", ""))
        if isinstance(s, (L.Decl, L.Assign)):
            out.add(s.var.name)
        for b in bodies(s):
            out |= _refs(b)
    return out


def _stride_loop(s: L.Stmt, tiles: int) -> bool:
    """Whether `s` is a loop between barriers that the tiles run interleaved, one iteration of each
    tile in turn (RegionPrinter.stride_for): a grid- or group-stride loop (a step that is not a
    constant, or one of at least the tile count) with no break or continue of its own and no
    atomic (whose order across tiles would change). Each tile's own iterations keep their order."""
    if not isinstance(s, L.For) or s.unroll or s.stages is not None or _has_barrier(s.body) or _own_jumps(s.body):
        return False
    if isinstance(s.step, L.Const) and abs(int(s.step.value)) < tiles:
        return False
    return not any(isinstance(e, L.Atomic) for x in s.body for e in stmt_walk(x))


def _pieces(body: tuple[L.Stmt, ...], regs: set[str], tiles: int) -> Iterator[L.Stmt | list[L.Stmt]]:
    """A region-level body as regions (lists of statements) and the statements between them
    (barriers, loops with a barrier, stride loops, shared-array declarations)."""
    region: list[L.Stmt] = []
    for s in body:
        if (isinstance(s, L.Barrier) or _barrier_loop(s) or _stride_loop(s, tiles)
                or isinstance(s, L.Alloc) and s.buf not in regs):
            if region:
                yield region
                region = []
            yield s
        else:
            region.append(s)
    if region:
        yield region


class RegionPrinter(BodyPrinter):
    def __init__(self, fn: L.Function, pr: CPrinter, opts: Options) -> None:
        super().__init__(fn, pr, opts)
        self.regs = {b.name for b in fn.buffers if b.space == "regs"}
        self.tiles = fn.tile_count
        self.per_tile: dict[str, str] = {}  # name -> the C type of its per-tile storage's element
        self.counter = 0

    def plan(self) -> None:
        """Find the region-level names used in more than one region (or in a loop header)."""
        uses: dict[str, int] = {}
        top: list[tuple[str, bool]] = []
        _declared(self.fn.body, True, top)
        level = {n for n, t in top if t}

        def visit(body: tuple[L.Stmt, ...]) -> None:
            for p in _pieces(body, self.regs, self.tiles):
                if isinstance(p, list) or _stride_loop(p, self.tiles):
                    for n in _refs(p if isinstance(p, list) else [p]) & level:
                        uses[n] = uses.get(n, 0) + 1
                elif isinstance(p, (L.For, L.While)):
                    header = (p.start, p.stop, p.step) if isinstance(p, L.For) else (p.cond,)
                    for n in _var_names(header) & level:
                        uses[n] = uses.get(n, 0) + 2
                    visit(p.body)

        visit(self.fn.body)
        for s in _walk_region_level(self.fn.body):
            if isinstance(s, L.Decl) and uses.get(s.var.name, 0) > 1:
                self.per_tile[s.var.name] = s.var.dtype.c_compute
            elif isinstance(s, L.Alloc) and s.buf in self.regs and uses.get(s.buf, 0) > 1:
                b = self.fn.buffer(s.buf)
                assert b is not None
                dims = "".join(f"[{int(d.value)}]" for d in b.shape if isinstance(d, L.Const))
                self.per_tile[s.buf] = b.elem.c_compute + dims

    def _cname(self, name: str) -> str:
        return c_ident(name) if name in self.regs else var_name(name)

    def print_kernel(self) -> None:
        self.plan()
        self.prologue()
        self.emit(f"// region mode (CPU backend): the code between barriers runs as loops over the {self.tiles} "
                  "tiles")
        self.lines.append('#pragma push_macro("threadIdx")')
        self.lines.append("#undef threadIdx")
        self.lines.append("#define threadIdx tsr_tid")
        for name, ctype in self.per_tile.items():
            elem, _, dims = ctype.partition("[")
            dims = "[" + dims if dims else ""
            cn = self._cname(name)
            self.emit(f"static thread_local {elem} tsr_rgs_{cn}[{self.tiles}]{dims};  // per tile")
            self.emit(f"auto* const tsr_rgp_{cn} = tsr_rgs_{cn};")
        self.sequence(self.fn.body)
        self.lines.append('#pragma pop_macro("threadIdx")')

    def _bind(self, names: set[str], tile: str) -> None:
        for name in sorted(names & set(self.per_tile)):
            cn = self._cname(name)
            self.emit(f"[[maybe_unused]] auto& {cn} = tsr_rgp_{cn}[{tile}];")

    def _tid(self, tile: str) -> str:
        t = self.fn.tile + (1,) * (3 - len(self.fn.tile))
        if tile == "0":
            return "{0u, 0u, 0u}"
        x = tile if t[0] == self.tiles else f"{tile} % {t[0]}u"
        y = "0u" if t[1] == 1 else f"{tile} / {t[0]}u % {t[1]}u"
        z = "0u" if t[2] == 1 else f"{tile} / {t[0] * t[1]}u"
        return f"{{{x}, {y}, {z}}}"

    def sequence(self, body: tuple[L.Stmt, ...]) -> None:
        for p in _pieces(body, self.regs, self.tiles):
            if isinstance(p, list):
                self.region(p)
            elif isinstance(p, L.For) and _stride_loop(p, self.tiles):
                self.stride_for(p)
            elif isinstance(p, L.Barrier):
                self.emit("// tbarrier(): every tile has finished the region above", p.loc)
            elif isinstance(p, L.For):
                self.barrier_for(p)
            elif isinstance(p, L.While):
                self.barrier_while(p)
            else:
                self.stmt(p)  # a shared array, declared for the whole group

    def region(self, stmts: list[L.Stmt]) -> None:
        self.emit(f"for (unsigned tsr_t = 0; tsr_t < {self.tiles}u; ++tsr_t) {{")
        self.depth += 1
        self.emit(f"[[maybe_unused]] const uint3 tsr_tid = {self._tid('tsr_t')};")
        self._bind(_refs(stmts), "tsr_t")
        for s in stmts:
            if isinstance(s, L.Decl) and s.var.name in self.per_tile:
                if s.init is not None:
                    self.emit(f"{var_name(s.var.name)} = {self.pr.expr(s.init)};", s.loc)
            elif isinstance(s, L.Alloc) and s.buf in self.per_tile:
                self.emit(f"// {c_ident(s.buf)}: per-tile registers", s.loc)
            else:
                self.stmt(s)
        self.depth -= 1
        self.emit("}")

    def stride_for(self, s: L.For) -> None:
        """A stride loop, interleaved: each pass runs one iteration of every tile whose loop is not
        done (each tile's counter in its own slot), so the tiles' accesses stay close together as
        on a GPU instead of one tile's whole loop striding over memory before the next one's."""
        k = self.counter = self.counter + 1
        var, ctype, ks = var_name(s.var.name), s.var.dtype.c_compute, f"tsr_k{k}"
        self.emit(f"{ctype} {ks}[{self.tiles}];  // each tile's counter", s.loc)
        self.emit(f"for (unsigned tsr_t = 0; tsr_t < {self.tiles}u; ++tsr_t) {{")
        self.depth += 1
        self.emit(f"[[maybe_unused]] const uint3 tsr_tid = {self._tid('tsr_t')};")
        self._bind(_var_names((s.start,)), "tsr_t")
        self.emit(f"{ks}[tsr_t] = {self.pr.expr(s.start)};")
        self.depth -= 1
        self.emit("}")
        step = self.pr.expr(s.step)
        stop = self.pr.expr(s.stop)
        if isinstance(s.step, L.Const):
            cond = f"{var} {'<' if int(s.step.value) > 0 else '>'} {stop}"
        else:
            cond = f"({step} > 0 ? {var} < {stop} : {var} > {stop})"
        self.emit(f"for (bool tsr_more{k} = true; tsr_more{k};) {{")
        self.depth += 1
        self.emit(f"tsr_more{k} = false;")
        self.emit(f"for (unsigned tsr_t = 0; tsr_t < {self.tiles}u; ++tsr_t) {{")
        self.depth += 1
        self.emit(f"[[maybe_unused]] const uint3 tsr_tid = {self._tid('tsr_t')};")
        self._bind(_refs([s]), "tsr_t")
        self.emit(f"{ctype}& {var} = {ks}[tsr_t];")
        self.emit(f"if (!({cond})) continue;")
        self.emit(f"tsr_more{k} = true;")
        self.emit("{")
        self.depth += 1
        for x in s.body:
            self.stmt(x)
        self.depth -= 1
        self.emit("}")
        self.emit(f"{var} += {step};")
        self.depth -= 1
        self.emit("}")
        self.depth -= 1
        self.emit("}")

    def _tile0(self, exprs: tuple[L.Expr, ...]) -> None:
        self.emit("[[maybe_unused]] const uint3 tsr_tid = {0u, 0u, 0u};  // the header is uniform: tile 0's values")
        self._bind(_var_names(exprs), "0")

    def barrier_for(self, s: L.For) -> None:
        k = self.counter = self.counter + 1
        lo, hi, st = f"tsr_lo{k}", f"tsr_hi{k}", f"tsr_st{k}"
        self.emit(f"{s.var.dtype.c_compute} {lo}; {s.stop.dtype.c_compute} {hi}; {s.step.dtype.c_compute} {st};",
                  s.loc)
        self.emit("{")
        self.depth += 1
        self._tile0((s.start, s.stop, s.step))
        self.emit(f"{lo} = {self.pr.expr(s.start)}; {hi} = {self.pr.expr(s.stop)}; {st} = {self.pr.expr(s.step)};")
        self.depth -= 1
        self.emit("}")
        var = var_name(s.var.name)
        if isinstance(s.step, L.Const):
            cond = f"{var} {'<' if int(s.step.value) > 0 else '>'} {hi}"
        else:
            cond = f"({st} > 0 ? {var} < {hi} : {var} > {hi})"
        self.emit(f"for ({s.var.dtype.c_compute} {var} = {lo}; {cond}; {var} += {st}) {{", s.loc)
        self.depth += 1
        self.sequence(s.body)
        self.depth -= 1
        self.emit("}")

    def barrier_while(self, s: L.While) -> None:
        self.emit("for (;;) {", s.loc)
        self.depth += 1
        self.emit("bool tsr_go;")
        self.emit("{")
        self.depth += 1
        self._tile0((s.cond,))
        self.emit(f"tsr_go = {self.pr.expr(s.cond)};", s.loc)
        self.depth -= 1
        self.emit("}")
        self.emit("if (!tsr_go) break;")
        self.sequence(s.body)
        self.depth -= 1
        self.emit("}")


def _walk_region_level(body: tuple[L.Stmt, ...]) -> Iterator[L.Stmt]:
    for s in body:
        yield s
        if _barrier_loop(s):
            assert isinstance(s, (L.For, L.While))
            yield from _walk_region_level(s.body)


def print_regions(fn: L.Function, pr: CPrinter, opts: Options) -> str:
    rp = RegionPrinter(fn, pr, opts)
    rp.print_kernel()
    return "\n".join(rp.lines)


__all__ = ["fiber_reason", "print_regions"]
