"""Printing the statements of one lowered function as C lines (expressions through `CPrinter`).

Every statement's first C line carries its `.tsr` line in a comment; with `line_info`, a `#line`
directive precedes it. The function's prologue declares its const parameters (`constexpr`), the
scratch buffer of group reductions and the dynamic shared-memory base when the kernel needs them.
"""

from __future__ import annotations

import math
import re

from tessera.base.dtypes import I32, ScalarType, c_literal, round_to
from tessera.base.errors import Loc
from tessera.base.options import CompileOptions
from tessera.transpile.builtins import BUILTINS
from tessera.transpile.emit import frag_cols, tma
from tessera.transpile.emit import frags as cfrag
from tessera.transpile.emit.exprs import CPrinter, padded_dims, stride_name
from tessera.transpile.emit.maps import print_element_loop
from tessera.transpile.emit.terms import UNARY, c_string, nonzero_literal, store_fn
from tessera.transpile.emit.vectors import print_vec_move
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.shared_layout import arch_number, shared_layout
from tessera.transpile.lir.tma import tma_destinations
from tessera.transpile.names import c_ident, var_name

INDENT = "    "
_SIMPLE_OPS = ("+", "-", "*", "&", "|", "^")
_CHECKED_OPS = ("+", "-", "*")  # signed overflow is reported with check_bounds


def line_file_name(name: str) -> str:
    """The file name in `#line`: NVRTC copies it into a PTX `.file` directive that ptxas cannot
    parse with quotes or backslashes in it, so only a safe spelling of the name is used."""
    return re.sub(r"[^A-Za-z0-9._/+-]", "_", name)[-120:] or "input.tsr"


def dims_suffix(shape: tuple[int, ...], pad: int = 0) -> str:
    return "".join(f"[{d + (pad if i == len(shape) - 1 else 0)}]" for i, d in enumerate(shape))


def finite(c: L.NamedConst) -> bool:
    """Whether a constant can be a C `constexpr` (C has no constant expression for inf or NaN
    that both NVRTC and the host compiler accept: such values are written out where used)."""
    return not c.dtype.is_float or math.isfinite(round_to(float(c.value), c.dtype))


def _shape(b: L.Buffer) -> tuple[int, ...]:
    return tuple(int(d.value) for d in b.shape if isinstance(d, L.Const))


def static_shared_decl(fn: L.Function, b: L.Buffer, cname: str = "") -> tuple[int, str]:
    """The alignment and the C declarator (`float sh[128]`) of shared array `b` declared on its own
    (`cname`: under that name instead of its own)."""
    align = 1024 if b.swizzle else 128 if b.name in tma_destinations(fn) else 16  # wgmma / bulk copies
    return align, f"{b.elem.c_storage} {cname or c_ident(b.name)}{dims_suffix(_shape(b), b.pad)}"


class BodyPrinter:
    def __init__(self, fn: L.Function, pr: CPrinter, opts: CompileOptions, source_name: str) -> None:
        self.fn = fn
        self.pr = pr
        self.opts = opts
        self.source_name = source_name  # the .tsr file's name, for #line and failed tasserts
        self.lines: list[str] = []
        self.depth = 1

    def emit(self, text: str, loc: Loc | None = None) -> None:
        if loc is not None and self.opts.line_info:
            self.lines.append(f"#line {loc.line} {c_string(line_file_name(self.source_name))}")
        suffix = f"  // line {loc.line}" if loc is not None else ""
        self.lines.append(INDENT * self.depth + text + suffix)

    def block(self, stmts: tuple[L.Stmt, ...]) -> None:
        self.depth += 1
        for s in stmts:
            self.stmt(s)
        self.depth -= 1

    def prologue(self) -> None:
        for c in self.fn.consts:
            value = c_literal(c.value, c.dtype)
            if not finite(c):
                self.emit(f"// {c_ident(c.name)} is not finite ({value}): written out where it is used", c.loc)
                continue
            self.emit(f"[[maybe_unused]] constexpr {c.dtype.c_compute} {c_ident(c.name)} = {value};", c.loc)
        if self.fn.kind != "kernel":
            return
        layout = shared_layout(self.fn)
        if layout.scratch_bytes:
            self.emit(f"__shared__ __align__(16) unsigned char tsr_reduce_scratch[{layout.scratch_bytes}];"
                      "  // group reductions")
        if layout.dynamic and layout.sized:
            self.emit(f"{tma.dynamic_smem(self.fn)}(tsr_dynamic_smem);"
                      f"  // {layout.total_bytes} bytes of shared memory, then the arrays sized at launch")
            self.emit(f"unsigned long long tsr_smem_end = {layout.total_bytes};  // where the next launch-sized "
                      "array starts")
        elif layout.dynamic and layout.slots and self.fn.wgmma:  # swizzled arrays: 1024-byte aligned
            self.emit("TSR_DYNAMIC_SMEM_1024(tsr_dynamic_smem);"
                      f"  // {layout.total_bytes} bytes of shared memory, above the 48 KiB static limit")
        elif layout.dynamic and layout.slots:
            self.emit(f"{tma.dynamic_smem(self.fn)}(tsr_dynamic_smem);"
                      f"  // {layout.total_bytes} bytes of shared memory, above the 48 KiB static limit")
        elif layout.shares:
            pool_align = 1024 if self.fn.wgmma else tma.pool_align(self.fn)
            self.emit(f"__shared__ __align__({pool_align}) unsigned char tsr_shared_pool[{layout.total_bytes}];"
                      "  // the shared arrays, some sharing memory")

    # ---- statements
    def stmt(self, s: L.Stmt) -> None:
        self.pr.line = s.loc.line
        getattr(self, "s_" + type(s).__name__)(s)

    def s_Decl(self, s: L.Decl) -> None:
        ty = s.var.dtype.c_compute
        name = var_name(s.var.name)
        if s.init is None:
            self.emit(f"{ty} {name};  // assigned in an inner block, used outside it")
        else:
            self.emit(f"{'const ' if s.const else ''}{ty} {name} = {self.pr.expr(s.init)};", s.loc)

    def s_Assign(self, s: L.Assign) -> None:
        name = var_name(s.var.name)
        if s.op is None:
            self.emit(f"{name} = {self.pr.expr(s.value)};", s.loc)
        else:
            self.update(name, L.Var(s.var.name, s.var.dtype), s.op, s.op_type, s.value, s.loc, None)

    def s_Store(self, s: L.Store) -> None:
        buf = self.pr.ctx.buffers[s.buf]
        lhs = self.pr.access(s.buf, s.index, "write")
        if s.op is None:
            value = self.pr.stored(s.value, buf.elem) if buf.space != "regs" else self.pr.cast_to(s.value, buf.elem)
            self.emit(f"{lhs} = {value};", s.loc)
            return
        in_memory = buf.space in ("global", "shared", "ref")
        self.update(lhs, L.Load(s.buf, s.index, buf.elem), s.op, s.op_type, s.value, s.loc,
                    store_fn(buf.elem) if in_memory else None)

    def update(self, lhs: str, target: L.Expr, op: str, op_type: ScalarType | None, value: L.Expr, loc: Loc,
               store: str | None) -> None:
        """`lhs op= value`, or `lhs = lhs op value` where C's compound assignment would differ
        (f16 rounding, narrow integers, float // and %, division by a possible zero, overflow checks).
        Between 32- and 64-bit integers C's compound assignment computes in the type the language
        gives `lhs op value` (`i32 += u32` in u32, `i32 += i64` in i64), so `value` keeps its type:
        converting it to `lhs`'s type first would make that arithmetic signed and overflow undefined."""
        tt = target.dtype
        assert op_type is not None
        shift = op in ("<<", ">>")
        checked = op in _CHECKED_OPS and self.pr.overflow_checked(op_type)
        simple = (not tt.is_half and not (tt.is_float and op in ("%", "//")) and not (tt.is_int and tt.bits < 32)
                  and not (op in ("%", "//") and not nonzero_literal(value)) and not checked
                  and not (op == "/" and self.pr.inline_division(op_type))
                  and (shift or op_type == tt or (tt.is_int and op_type.is_int and op in _SIMPLE_OPS)))
        if simple:
            c_op = "/" if op == "//" else op
            rhs = self.pr.expr(value) if shift or value.dtype == op_type else self.pr.cast_to(value, op_type)
            self.emit(f"{lhs} {c_op}= {rhs};", loc)
            return
        computed = L.Binary(op, target if shift else L.converted(target, op_type), value, tt if shift else op_type)
        text = self.pr.cast_to(computed, tt)
        self.emit(f"{lhs} = {store}({text});" if store else f"{lhs} = {text};", loc)

    def s_Alloc(self, s: L.Alloc) -> None:
        b = self.fn.buffer(s.buf)
        assert b is not None
        name = c_ident(b.name)
        shape = _shape(b)
        if b.space == "regs":
            self.emit(f"{b.elem.c_compute} {name}{dims_suffix(shape)};", s.loc)
            return
        if b.space == "frag":
            cfrag.print_alloc(self, b, s.loc)
            return
        layout = shared_layout(self.fn)
        ctype = b.elem.c_storage
        if b.name in layout.sized:
            dims = [self.pr.wrap(d, UNARY) for d in b.shape]
            if b.pad:
                dims[-1] = f"({dims[-1]} + {b.pad})"
            count = " * ".join(f"(unsigned long long){d}" for d in dims)
            self.emit(f"{ctype}* {name} = reinterpret_cast<{ctype}*>(tsr_dynamic_smem + tsr_smem_end);  "
                      "// sized at launch", s.loc)
            self.emit(f"tsr_smem_end += ({count} * {b.elem.size} + 15) / 16 * 16;", s.loc)
            return
        if layout.dynamic or layout.shares:
            slot = layout.slot(b.name)
            rows = dims_suffix(shape[1:], b.pad) if len(shape) > 1 else ""
            ptr = f"(*{name}){rows}" if rows else f"*{name}"
            cast = f"{ctype} (*){rows}" if rows else f"{ctype}*"
            base = "tsr_dynamic_smem" if layout.dynamic else "tsr_shared_pool"
            shares = layout.sharing(b.name)
            note = f", shares memory with {', '.join(shares)}" if shares else ""
            self.emit(f"{ctype} {ptr} = reinterpret_cast<{cast}>({base} + {slot.offset});  "
                      f"// {slot.nbytes} bytes{note}", s.loc)
        else:
            self.static_shared(b, s.loc)

    def static_shared(self, b: L.Buffer, loc: Loc) -> None:
        """Declare shared array `b`, which has its own `__shared__` variable (region mode,
        transpile/cpu/regions.py, binds it to its member of the group's arrays instead)."""
        align, decl = static_shared_decl(self.fn, b)
        self.emit(f"__shared__ __align__({align}) {decl};"
                  f"{f'  // swizzled ({b.swizzle}-byte mode) for wgmma' if b.swizzle else ''}", loc)

    def s_Fill(self, s: L.Fill) -> None:
        b = self.fn.buffer(s.buf)
        assert b is not None
        if b.space == "frag":
            cfrag.print_fill(self, s)
            return
        shape = _shape(b)
        total = math.prod(shape)
        first = c_ident(b.name) + "[0]" * len(shape)
        # The element type is explicit: a narrow integer array is filled from an `int` literal.
        self.emit(f"tsr_fill<{total}, {b.elem.c_compute}>(&{first}, {self.pr.expr(s.value)});", s.loc)

    def s_If(self, s: L.If, prefix: str = "") -> None:
        self.emit(f"{prefix}if ({self.pr.expr(s.cond)}) {{", s.loc)
        self.block(s.then)
        if len(s.orelse) == 1 and isinstance(s.orelse[0], L.If):
            self.s_If(s.orelse[0], "} else ")
            return
        if s.orelse:
            self.emit("} else {")
            self.block(s.orelse)
        self.emit("}")

    def s_While(self, s: L.While) -> None:
        self.emit(f"while ({self.pr.expr(s.cond)}) {{", s.loc)
        self.block(s.body)
        self.emit("}")

    def s_For(self, s: L.For) -> None:
        var = var_name(s.var.name)
        stop, step = self.pr.expr(s.stop), s.step
        if isinstance(step, L.Const):
            cond = f"{var} {'<' if int(step.value) > 0 else '>'} {stop}"
        elif isinstance(step, L.Intrinsic) and step.op in BUILTINS and BUILTINS[step.op].positive:
            cond = f"{var} < {stop}"
        else:
            step_c = self.pr.expr(step)
            cond = f"({step_c} > 0 ? {var} < {stop} : {var} > {stop})"
        if isinstance(step, L.Const) and int(step.value) == 1:
            inc = f"++{var}"
        elif isinstance(step, L.Const) and int(step.value) == -1:
            inc = f"--{var}"
        else:
            inc = f"{var} += {self.pr.expr(step)}"
        if s.unroll:
            self.emit("#pragma unroll")
        self.emit(f"for ({s.var.dtype.c_compute} {var} = {self.pr.expr(s.start)}; {cond}; {inc}) {{", s.loc)
        self.block(s.body)
        self.emit("}")

    def s_ElementLoop(self, s: L.ElementLoop) -> None:
        print_element_loop(self, s)

    def s_Break(self, s: L.Break) -> None:
        self.emit("break;", s.loc)

    def s_Continue(self, s: L.Continue) -> None:
        self.emit("continue;", s.loc)

    def s_Return(self, s: L.Return) -> None:
        if s.values:  # several results: through the caller's pointers (emit: `tsr_result<k>`)
            stores = " ".join(f"*tsr_result{k} = {self.pr.expr(v)};" for k, v in enumerate(s.values))
            self.emit(f"{{ {stores} return; }}", s.loc)
            return
        self.emit("return;" if s.value is None else f"return {self.pr.expr(s.value)};", s.loc)

    def s_Barrier(self, s: L.Barrier) -> None:
        self.emit("__syncthreads();", s.loc)

    def s_Fence(self, s: L.Fence) -> None:
        fence = {"group": "__threadfence_block", "device": "__threadfence", "mesh": "__threadfence_system"}[s.scope]
        self.emit(f"{fence}();", s.loc)

    def s_Print(self, s: L.Print) -> None:
        args = [c_string(s.fmt)] + [self.pr.printf_arg(a) for a in s.args]
        self.emit(f"printf({', '.join(args)});", s.loc)

    def s_Assert(self, s: L.Assert) -> None:
        if not self.opts.debug:
            self.emit("// tassert compiled out (debug off)", s.loc)
            return
        cond = self.pr.wrap(s.cond, 15)
        self.emit(f"if (!{cond}) tsr_assert_fail({c_string(self.fn.name)}, {c_string(self.source_name)}, "
                  f"{s.loc.line}, {c_string(s.message)});", s.loc)

    def s_Eval(self, s: L.Eval) -> None:
        e = s.expr
        text, _ = self.pr.p(e)
        if isinstance(e, L.Atomic) and text.startswith("(long long)atomic"):
            text = text[len("(long long)"):]
        if isinstance(e, L.Atomic):
            self.emit(text + ";", s.loc)
        else:
            self.emit(f"(void){self.pr.wrap(e, 15)};", s.loc)

    def s_Invoke(self, s: L.Invoke) -> None:
        self.emit(f"{self.pr.p_Call(L.Call(s.func, s.args, I32), s.outs)[0]};", s.loc)

    def s_Copy(self, s: L.Copy) -> None:
        if s.tma is not None and s.tma.active:
            return tma.print_tma_copy(self, s)
        ext = tuple(x for x in s.dst.extents if x is not None)
        d = (1,) * (3 - len(ext)) + ext
        dst_buf = self.pr.ctx.buffers[s.dst.buf]
        plan = s.plan
        assert plan is not None, "plan-copies plans every copy"
        dp, ds, dl, dlo = self.view_parts(s.dst)
        sp, ss, sl, slo = self.view_parts(s.src)
        name = "tsr_copy_async" if s.async_ and self.async_copies else "tsr_copy"
        targs = (f"{dst_buf.elem.c_storage}, {d[0]}, {d[1]}, {d[2]}, {self.fn.tile_count}, {plan.vb}, "
                 f"{str(plan.check).lower()}")
        tail = ""
        if self.opts.check_bounds or (dst_buf.swizzle and name == "tsr_copy"):
            if name == "tsr_copy":
                shared = [str(self.opts.check_bounds and self.pr.ctx.buffers[v.buf].space == "shared").lower()
                          for v in (s.dst, s.src)]
                targs += f", {shared[0]}, {shared[1]}"
            if self.opts.check_bounds:
                tail = f", {s.loc.line}"
        if dst_buf.swizzle:  # a shared array that wgmma reads: its matrices swizzled (lir/swizzle.py)
            rows = int(dst_buf.shape[-2].value)  # type: ignore[union-attr]
            targs += f", tsr_swizzled<{dst_buf.swizzle}, {rows}, {dst_buf.elem.size}>"
        self.emit(f"{name}<{targs}>({dp}, {ds}, {dl}, {dlo}, {sp}, {ss}, {sl}, {slo}, {self.pr.tid()}{tail});", s.loc)

    def s_VecMove(self, s: L.VecMove) -> None:
        print_vec_move(self, s)

    def s_Mma(self, s: L.Mma) -> None:
        cfrag.print_mma(self, s)

    def s_FragLoad(self, s: L.FragLoad) -> None:
        cfrag.print_frag_load(self, s)

    def s_FragStore(self, s: L.FragStore) -> None:
        cfrag.print_frag_store(self, s)

    def s_FragAssign(self, s: L.FragAssign) -> None:
        cfrag.print_frag_assign(self, s)

    def s_FragReduce(self, s: L.FragReduce) -> None:
        frag_cols.print_frag_reduce(self, s)

    def s_FragCombine(self, s: L.FragCombine) -> None:
        frag_cols.print_frag_combine(self, s)

    @property
    def async_copies(self) -> bool:
        """cp.async exists from sm_80 on; below, tcopy_async is tcopy and tcommit does nothing."""
        return arch_number(self.opts.arch) >= 80

    def s_MbarInit(self, s: L.MbarInit) -> None:
        tma.print_mbar_init(self, s)

    def s_AsyncCommit(self, s: L.AsyncCommit) -> None:
        tma.print_commit(self, s)

    def s_AsyncWait(self, s: L.AsyncWait) -> None:
        tma.print_wait(self, s)

    def view_parts(self, v: L.View) -> tuple[str, str, str, str]:
        """Origin pointer, the strides (elements) of the three copied dimensions, how many
        elements of each exist from the origin, and how many of them lie before the tensor (a start
        below 0; "0" where the start is proven non-negative)."""
        ptr, strides, limits, lows = self.view_lists(v)
        return ptr, ", ".join(strides), ", ".join(limits), ", ".join(lows)

    def view_lists(self, v: L.View) -> tuple[str, list[str], list[str], list[str]]:
        """`view_parts` as lists (three of each, outer dimensions first)."""
        b = self.pr.ctx.buffers[v.buf]
        name = c_ident(v.buf)
        dims = [self.pr.expr(d) for d in b.shape]
        sized = b.space == "shared" and not all(isinstance(d, L.Const) for d in b.shape)  # a flat pointer
        phys = [self.pr.expr(d) for d in padded_dims(b)] if sized else \
            dims[:-1] + [str(_shape(b)[-1] + b.pad)] if b.space == "shared" else dims
        rank = len(dims)
        strides = ["1"] * rank  # innermost is contiguous
        for k in range(rank - 2, -1, -1):
            strides[k] = phys[k + 1] if strides[k + 1] == "1" else f"{strides[k + 1]} * {phys[k + 1]}"
        if b.space == "ref":  # a device function's array parameter: the caller's row strides
            strides = [stride_name(v.buf, k) for k in range(rank - 1)] + ["1"]
        starts: list[str] = []
        kept: list[tuple[str, str, str]] = []  # (stride, limit, elements before the tensor) of sliced dimensions
        guards: list[str] = []                 # indexed (dropped) dimensions must be in range
        assert len(v.nonneg) == rank, "plan-copies proves the starts of every view"
        for k, (start_e, extent) in enumerate(zip(v.starts, v.extents)):
            start = self.pr.expr(start_e)
            starts.append(start)
            below = "0" if v.nonneg[k] else f"(int)(-({start}))"
            if extent is not None:
                kept.append((strides[k], dims[k] if start == "0" else f"{dims[k]} - ({start})", below))
            elif v.checked:
                if below != "0":
                    guards.append(f"({start}) >= 0")
                guards.append(f"({start}) < {dims[k]}")
        offset = " + ".join(f"({s}) * ({st})" if st != "1" else f"({s})" for s, st in zip(starts, strides)
                            if s != "0") or "0"
        while len(kept) < 3:
            kept.insert(0, ("0", "1", "0"))
        if b.space in ("global", "ref") or sized:
            ptr = f"{name} + {offset}" if offset != "0" else name
        else:
            ptr = f"&{name}" + "[0]" * rank + (f" + {offset}" if offset != "0" else "")
        lim = [f"(int)({x})" if x not in dims and not x.isdigit() else x for _, x, _ in kept]
        if guards:
            lim[0] = f"({' && '.join(guards)}) ? {lim[0]} : 0"
        return ptr, [st for st, _, _ in kept], lim, [lo for _, _, lo in kept]


def print_body(fn: L.Function, pr: CPrinter, opts: CompileOptions, source_name: str) -> str:
    bp = BodyPrinter(fn, pr, opts, source_name)
    bp.prologue()
    for s in fn.body:
        bp.stmt(s)
    return "\n".join(bp.lines)


__all__ = ["BodyPrinter", "dims_suffix", "finite", "print_body"]
