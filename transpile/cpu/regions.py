"""Region mode of the CPU backend: a kernel whose only synchronization is `tbarrier()` printed
as loops over the group's tiles (the technique of CPU OpenCL implementations such as PoCL).

The cooperation rule makes every barrier reached by the whole group under uniform control flow,
so the code between two barriers (a region) can run for tile 0, then tile 1, ... with no fiber
switch. Locals that live across a barrier become per-tile arrays (`static thread_local`: a
group runs on one worker thread at a time), bound as C++ references inside each tile loop so
that the statement printer (emit/stmts.BodyPrinter) prints the statements unchanged. A loop that
contains a barrier runs once for the group: its header is evaluated with tile 0's values (the
cooperation rule makes it uniform) and its body is split into regions; so does a uniform loop
without a barrier, and a map kernel's element loop runs with the tile loop inside it (which loops
split, which locals are per tile and which are recomputed: the plan-cpu-regions pass of
region_plan.py, which marks them on the lowered IR). The tile loops nest
z, y, x (x innermost, as a warp's lanes); `threadIdx` names the tile loop's own index (`tsr_tid`),
not the fiber's. In a kernel without a barrier, a `return` ends the tile's iteration.

The output goes only into the CPU build's kernel unit (transpile/render.py, for a kernel the pass
planned: `CompileOptions.cpu_regions`); the CUDA C for the GPU never changes.
"""

from __future__ import annotations

import functools

from tessera.base.errors import Loc
from tessera.base.options import CompileOptions
from tessera.transpile.cpu.group_locals import split
from tessera.transpile.cpu.group_memory import group_memory, per_tile_element, shared_member
from tessera.transpile.cpu.group_reduce import print_reduction, reduction
from tessera.transpile.cpu.prefetch import prefetch_lines, streamed
from tessera.transpile.cpu.structure import Regions, assigned, declared, planned_regions, refs, var_names
from tessera.transpile.cpu.tile_bounds import consecutive_start, prefix_bound
from tessera.transpile.emit.exprs import CPrinter
from tessera.transpile.emit.maps import print_element_loop
from tessera.transpile.emit.stmts import BodyPrinter
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.visit import statements
from tessera.transpile.names import c_ident, var_name

# The macro each of the kernel's reads of its group's indices and sizes is redefined to, and the local
# it reads instead (computed once, before the macros change).
_GROUP_CONSTANTS = (("blockIdx", "uint3", "tsr_bid"), ("gridDim", "dim3", "tsr_gdim"), ("blockDim", "dim3", "tsr_bdim"),
                    ("tsr_group_linear_id()", "int", "tsr_glid"), ("tsr_grid_groups()", "int", "tsr_ngroups"))
_MACROS = (*((name, local) for name, _, local in _GROUP_CONSTANTS), ("threadIdx", "tsr_tid"))


class RegionPrinter(BodyPrinter):
    def __init__(self, fn: L.Function, pr: CPrinter, opts: CompileOptions, source_name: str) -> None:
        super().__init__(fn, pr, opts, source_name)
        self.tiles = fn.tile_count
        self.plan: Regions = planned_regions(fn)
        self.counter = 0
        self._open = 0  # loops that _open_tiles opened
        names: list[tuple[str, bool]] = []
        declared(fn.body, True, names)
        self.local = {n for n, _ in names} | assigned(fn.body)

    def _cname(self, name: str) -> str:
        return c_ident(name) if name in self.plan.regs else var_name(name)

    def print_kernel(self) -> None:
        self.prologue()
        self.emit(f"// region mode (CPU backend): the code between barriers runs as loops over the {self.tiles} "
                  "tiles")
        # The group's indices and sizes read from the engine once: locals that the C compiler knows
        # no store of the tile loops changes (it vectorizes those loops only then).
        for name, ctype, local in _GROUP_CONSTANTS:
            self.emit(f"[[maybe_unused]] const {ctype} {local} = {name};")
        for name, local in _MACROS:
            macro = name.partition("(")[0]
            self.lines += [f'#pragma push_macro("{macro}")', f"#undef {macro}", f"#define {name} {local}"]
        for line in group_memory(self.fn, self.plan.per_tile, {n: self._cname(n) for n in self.plan.per_tile},
                                 self.tiles, self.opts.restrict):
            self.emit(line)
        for name, ctype in self.plan.group.items():
            self.emit(f"{ctype} {var_name(name)}{{}};  // once per group")
        self.sequence(self.fn.body)
        for name, _ in reversed(_MACROS):
            self.lines.append(f'#pragma pop_macro("{name.partition("(")[0]}")')

    def static_shared(self, b: L.Buffer, loc: Loc) -> None:
        """A shared array is a member of the group's arrays (group_memory.py): its elements are
        reached through the struct, its name bound to the member for the statements that take its
        address."""
        self.pr.array_names[b.name] = shared_member(b)
        self.emit(f"[[maybe_unused]] auto& {c_ident(b.name)} = {shared_member(b)};", loc)

    def _bind(self, names: set[str], tile: str, here: list[L.Stmt] | None = None) -> None:
        """Bind the per-tile locals among `names` to tile `tile`'s copies, and compute the
        recomputed ones that the statements `here` do not declare themselves."""
        for name in sorted(names & set(self.plan.per_tile)):
            cn = self._cname(name)
            self.emit(f"[[maybe_unused]] auto& {cn} = {per_tile_element(cn, tile)};")
        for d in self.plan.recomputed(names, here or []):
            self.emit(f"[[maybe_unused]] const {d.var.dtype.c_compute} {var_name(d.var.name)} = "
                      f"{self.pr.expr(d.init)};", d.loc)  # type: ignore[arg-type]

    def per_tile_array(self, name: str) -> str:
        """A pointer to the first of per-tile local `name`'s copies."""
        return f"&{per_tile_element(self._cname(name), '0')}"

    def _open_tiles(self, count: str = "") -> None:
        """A loop over the group's tiles, x innermost (consecutive tiles, as a warp's lanes), that
        defines `tsr_t` (the tile's linear index) and `tsr_tid` (its threadIdx). `count`: a C
        expression, the first tiles only (a group with one axis)."""
        t = self.fn.tile + (1,) * (3 - len(self.fn.tile))
        axes = [(a, n) for a, n in zip("zyx", reversed(t)) if n > 1] or [("x", 1)]
        for a, n in axes:
            self.emit(f"for (unsigned tsr_{a} = 0; tsr_{a} < {count or f'{n}u'}; ++tsr_{a}) {{")
            self.depth += 1
        linear = {"x": "tsr_x", "y": f"tsr_y * {t[0]}u", "z": f"tsr_z * {t[0] * t[1]}u"}
        self.emit(f"[[maybe_unused]] const unsigned tsr_t = {' + '.join(linear[a] for a, _ in reversed(axes))};")
        tid = ", ".join(f"tsr_{a}" if any(a == b for b, _ in axes) else "0u" for a in "xyz")
        self.emit(f"[[maybe_unused]] const uint3 tsr_tid = {{{tid}}};")
        self._open = len(axes)

    def _tiles_for(self, s: L.ElementLoop) -> None:
        self._open_tiles()
        self._bind(refs(s.body), "tsr_t")

    def _close_tiles(self) -> None:
        for _ in range(self._open):
            self.depth -= 1
            self.emit("}")

    def sequence(self, body: tuple[L.Stmt, ...]) -> None:
        for p in self.plan.pieces(body):
            if isinstance(p, list):
                self.region(p)
            elif isinstance(p, L.For) and self.plan.interleaved(p):
                self.stride_for(p)
            elif isinstance(p, L.Barrier):
                self.emit("// tbarrier(): every tile has finished the region above", p.loc)
            elif isinstance(p, L.For):
                self.boundary_for(p)
            elif isinstance(p, L.While):
                self.barrier_while(p)
            elif isinstance(p, L.ElementLoop):
                print_element_loop(self, p, (functools.partial(self._tiles_for, p), self._close_tiles))
            elif (c := reduction(p)) is not None:
                assert isinstance(p, L.Decl)
                print_reduction(self, p, c)
            else:
                self.stmt(p)  # a shared array, declared for the whole group

    def region(self, stmts: list[L.Stmt]) -> None:
        """A region: the assignments of locals kept once for the group that lead it (group_locals.py),
        once, with tile 0's values; its other statements in a loop over the tiles; then those
        assignments that end it, once."""
        lead, body, tail = split(stmts, frozenset(self.plan.group))
        self._group_assignments(lead, ", before the tiles")
        if body:
            self._tiles_region(body)
        self._group_assignments(tail, "")

    def _group_assignments(self, stmts: list[L.Stmt], when: str) -> None:
        if not stmts:
            return
        self.emit(f"{{  // the group's own locals, once{when}")
        self.depth += 1
        last = [s for s in stmts if isinstance(s, (L.Decl, L.Assign))]
        self._tile0(tuple(e for s in last for e in ((s.init,) if isinstance(s, L.Decl) else (s.value,))
                          if e is not None))
        for s in last:
            if isinstance(s, L.Decl):
                if s.init is not None:
                    self.emit(f"{var_name(s.var.name)} = {self.pr.expr(s.init)};", s.loc)
            else:
                self.stmt(s)
        self.depth -= 1
        self.emit("}")

    def _tiles_region(self, stmts: list[L.Stmt]) -> None:
        guarded = prefix_bound(stmts, self.plan, self.local)
        if guarded is not None:
            self._prefix_region(*guarded)
            return
        self._open_tiles()
        if self.plan.returns:  # the kernel's only region: a return ends the tile's iteration
            self.emit("{")
            self.depth += 1
        self._bind(refs(stmts), "tsr_t", stmts)
        for s in stmts:
            if isinstance(s, L.Decl) and s.var.name in self.plan.per_tile:
                if s.init is not None:
                    self.emit(f"{var_name(s.var.name)} = {self.pr.expr(s.init)};", s.loc)
            elif isinstance(s, L.Alloc) and s.buf in self.plan.per_tile:
                self.emit(f"// {c_ident(s.buf)}: per-tile registers", s.loc)
            else:
                self.stmt(s)
        if self.plan.returns:
            self.depth -= 1
            self.emit("}")
            self.emit("tsr_tile_done:;")
        self._close_tiles()

    def _prefix_region(self, s: L.If, bound: L.Expr) -> None:
        """A region that is one `if t < U:` (tile_bounds.py): the tile loop over the tiles below U,
        the `if`'s body without its test."""
        k = self.counter = self.counter + 1
        ctype, u, n = bound.dtype.c_compute, f"tsr_u{k}", f"tsr_n{k}"
        self.emit(f"const {ctype} {u} = {self.pr.expr(bound)};", s.loc)
        self.emit(f"const unsigned {n} = {u} <= 0 ? 0u : {u} >= {self.tiles} ? {self.tiles}u : (unsigned){u};"
                  "  // the tiles whose test holds: a prefix of the group")
        self._open_tiles(n)
        self._bind(refs(list(s.then)), "tsr_t", list(s.then))
        for x in s.then:
            self.stmt(x)
        self._close_tiles()

    def s_Return(self, s: L.Return) -> None:
        self.emit("goto tsr_tile_done;  // return: this tile is done", s.loc)

    def stride_for(self, s: L.For) -> None:
        """A stride loop, interleaved: each pass runs one iteration of every tile whose loop is not
        done (each tile's counter in its own slot), so the tiles' accesses stay close together as
        on a GPU instead of one tile's whole loop striding over memory before the next one's. A
        loop marked "lockstep" first tests whether the counters start consecutive with a positive
        step (`lockstep_for`), and runs the general form only where they do not."""
        k = self.counter = self.counter + 1
        ctype, ks = s.var.dtype.c_compute, f"tsr_k{k}"
        self.emit(f"{ctype} {ks}[{self.tiles}];  // each tile's counter", s.loc)
        self._open_tiles()
        self._bind(var_names((s.start,)), "tsr_t")
        self.emit(f"{ks}[tsr_t] = {self.pr.expr(s.start)};")
        self._close_tiles()
        if s.cpu == "lockstep":
            self.lockstep_for(s, k, consecutive_start(s.start, self.plan, self.local))
            self.emit("} else {")
            self.depth += 1
        self.interleaved_passes(s, k)
        if s.cpu == "lockstep":
            self.depth -= 1
            self.emit("}")

    def lockstep_for(self, s: L.For, k: int, spacing: int) -> None:
        """The tiles of a "lockstep" stride loop in step: where tile t's counter starts at tile 0's
        + t and the step (the same for every tile, as the stop) is positive, the tiles whose loop is
        not done in a pass are those below the stop's distance from the pass's base, so a whole
        pass is a loop over every tile with the counter `base + t`: contiguous, with no test per tile,
        which the C compiler vectorizes where the body allows. Each tile runs the same iterations in
        the same order as in the general form (`interleaved_passes`), in the same order of tiles.
        `spacing` W > 0: the start is the tile's linear index times W plus a value the same for
        every tile (tile_bounds.consecutive_start), so tile t's counter is tile 0's + t * W (a tile's
        chunk of W elements: the tiles whose loop is not done are still a prefix) unless the last
        tile's start overflows, which a test of tile 0's start excludes instead of a test of every
        tile's; 0: unknown, tested at run time for W = 1."""
        ctype, ks = s.var.dtype.c_compute, f"tsr_k{k}"
        hi, st, go, base = f"tsr_hi{k}", f"tsr_st{k}", f"tsr_go{k}", f"tsr_b{k}"
        u64 = "unsigned long long"
        self.emit(f"{s.stop.dtype.c_compute} {hi}; {s.step.dtype.c_compute} {st};")
        self.emit("{")
        self.depth += 1
        self._tile0((s.stop, s.step))
        self.emit(f"{hi} = {self.pr.expr(s.stop)}; {st} = {self.pr.expr(s.step)};")
        self.depth -= 1
        self.emit("}")
        w = max(spacing, 1)
        times = f" * {w}u" if w > 1 else ""
        if spacing:
            self.emit(f"bool {go} = {st} > 0 && {ks}[0] <= tsr_int_limits<{ctype}>::hi - {(self.tiles - 1) * w};"
                      f"  // tile t starts at tile 0's start + t{times}")
        else:
            self.emit(f"bool {go} = {st} > 0;")
            self.emit(f"for (unsigned tsr_i = 1; tsr_i < {self.tiles}u; ++tsr_i)")
            self.emit(f"    {go} &= {ks}[tsr_i] > {ks}[0] && ({u64}){ks}[tsr_i] - ({u64}){ks}[0] == tsr_i;")
        self.emit(f"if ({go}) {{  // the counters are consecutive: each pass runs a prefix of the tiles")
        self.depth += 1
        self.emit(f"for ({ctype} {base} = {ks}[0]; {base} < {hi}; {base} += {st}) {{")
        self.depth += 1
        every = f">= {self.tiles}u" if w == 1 else f"> {(self.tiles - 1) * w}u"
        self.emit(f"if (({u64}){hi} - ({u64}){base} {every}) {{  // every tile")
        self.depth += 1
        tensors = streamed(s.body, s.var.name, self.pr.ctx.buffers)
        cnames = {name: self.pr.array_names.get(name, c_ident(name)) for name, _ in tensors}
        for line in prefetch_lines(tensors, cnames, base, st, self.tiles * w):
            self.emit(line)
        self._lockstep_pass(s, base, "", times)
        self.depth -= 1
        self.emit("} else {  // the last tiles are done")
        self.depth += 1
        self._lockstep_pass(s, base, f"if (({u64})tsr_t{times} >= ({u64}){hi} - ({u64}){base}) continue;", times)
        self.depth -= 1
        self.emit("}")
        self.depth -= 1
        self.emit("}")
        self.depth -= 1

    def _lockstep_pass(self, s: L.For, base: str, guard: str, times: str) -> None:
        self._open_tiles()
        if guard:
            self.emit(guard)
        self._bind(refs([s]), "tsr_t")
        tile = f"(tsr_t{times})" if times else "tsr_t"
        self.emit(f"const {s.var.dtype.c_compute} {var_name(s.var.name)} = {base} + "
                  f"({s.var.dtype.c_compute}){tile};")
        self.emit("{")
        self.block(s.body)
        self.emit("}")
        self._close_tiles()

    def interleaved_passes(self, s: L.For, k: int) -> None:
        """The general form: every tile's counter in its slot, a pass while any tile's loop is not done."""
        var, ctype, ks = var_name(s.var.name), s.var.dtype.c_compute, f"tsr_k{k}"
        step = self.pr.expr(s.step)
        stop = self.pr.expr(s.stop)
        if isinstance(s.step, L.Const):
            cond = f"{var} {'<' if int(s.step.value) > 0 else '>'} {stop}"
        else:
            cond = f"({step} > 0 ? {var} < {stop} : {var} > {stop})"
        self.emit(f"for (bool tsr_more{k} = true; tsr_more{k};) {{")
        self.depth += 1
        self.emit(f"tsr_more{k} = false;")
        self._open_tiles()
        self._bind(refs([s]), "tsr_t")
        self.emit(f"{ctype}& {var} = {ks}[tsr_t];")
        self.emit(f"if (!({cond})) continue;")
        self.emit(f"tsr_more{k} = true;")
        self.emit("{")
        self.block(s.body)
        self.emit("}")
        self.emit(f"{var} += {step};")
        self._close_tiles()
        self.depth -= 1
        self.emit("}")

    def _tile0(self, exprs: tuple[L.Expr, ...]) -> None:
        self.emit("[[maybe_unused]] const uint3 tsr_tid = {0u, 0u, 0u};  // the header is uniform: tile 0's values")
        self._bind(var_names(exprs), "0")

    def boundary_for(self, s: L.For) -> None:
        """A loop with a barrier, or a uniform loop (region_plan.py): once for the group, its body's
        regions inside."""
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


def vector_clones(fn: L.Function, cname: str, body: str) -> tuple[str, str]:
    """The name and body that transpile/render.py prints for region-mode kernel `fn`: where it has a
    loop (a stride loop's passes, a map kernel's steps, a uniform loop around tile loops: what the
    host compiler vectorizes), its name is preceded by the prelude's macro that compiles it twice
    where the host allows, for AVX2 and for the baseline, picked once when the library loads
    (TSR_VECTOR_CLONES, runtime/host/tessera_host.h), and its body starts with the macro that keeps
    the symbols of that choice out of the library's exports. A kernel without a loop is compiled once."""
    if not any(isinstance(s, (L.For, L.While, L.ElementLoop)) for s in statements(fn.body)):
        return cname, body
    return f"TSR_VECTOR_CLONES {cname}", f"    TSR_HIDE_CLONES({cname});\n{body}"


def print_regions(fn: L.Function, pr: CPrinter, opts: CompileOptions, source_name: str) -> str:
    rp = RegionPrinter(fn, pr, opts, source_name)
    rp.print_kernel()
    return "\n".join(rp.lines)


__all__ = ["print_regions", "vector_clones"]
