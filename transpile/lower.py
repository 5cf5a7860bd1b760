"""Lowering of checked kernels and device functions to C statements, and of the module to
the inputs of the `module.cu.j2` template. Every statement's first C line carries its
`.tsr` line in a comment; with `line_info`, a `#line` directive precedes it."""

from __future__ import annotations

from dataclasses import dataclass

from tessera import nodes as N
from tessera.dtypes import I32, SCALARS, ScalarType, c_literal, promote
from tessera.transpile.cprinter import CPrinter, _nonzero_literal, c_string, store_fn
from tessera.transpile.names import c_ident

INDENT = "    "


@dataclass(frozen=True)
class Options:
    arch: str = "sm_90"
    debug: bool = False
    line_info: bool = False
    check_bounds: bool = False
    source_name: str = "input.tsr"


def dims_suffix(shape: tuple[int, ...], pad: int = 0) -> str:
    return "".join(f"[{d + (pad if i == len(shape) - 1 else 0)}]" for i, d in enumerate(shape))


class BodyLowering:
    def __init__(self, fn: N.FuncDef, opts: Options) -> None:
        self.fn = fn
        self.opts = opts
        self.pr = CPrinter(fn, opts.debug, opts.check_bounds)
        self.lines: list[str] = []
        self.depth = 1
        self.hoisted = {name for name, _ in fn.hoisted}
        self.temps: set[str] = set()
        self.declared: set[str] = set()  # locals declared so far (a later `for` over one reuses it)

    def emit(self, text: str, loc=None) -> None:
        if loc is not None and self.opts.line_info:
            self.lines.append(f"#line {loc.line} {c_string(self.opts.source_name)}")
        suffix = f"  // line {loc.line}" if loc is not None else ""
        self.lines.append(INDENT * self.depth + text + suffix)

    def block(self, stmts: tuple[N.Stmt, ...]) -> None:
        self.depth += 1
        for s in stmts:
            self.stmt(s)
        self.depth -= 1

    def prologue(self) -> None:
        fn = self.fn
        params = {p.name: p for p in fn.params}
        for name, value in fn.const_values:
            st = SCALARS[params[name].type_name]
            self.emit(f"[[maybe_unused]] constexpr {st.c_compute} {c_ident(name)} = {c_literal(value, st)};",
                      params[name].loc)
        layout = fn.shared
        if layout and layout.scratch_bytes:
            self.emit(f"__shared__ __align__(16) unsigned char tsr_reduce_scratch[{layout.scratch_bytes}];"
                      "  // group reductions")
        if layout and layout.dynamic and layout.slots:
            self.emit("TSR_DYNAMIC_SMEM(tsr_dynamic_smem);"
                      f"  // {layout.total_bytes} bytes of shared memory, above the 48 KiB static limit")
        for name, ty in fn.hoisted:
            if isinstance(ty, ScalarType):
                self.emit(f"{ty.c_compute} {c_ident(name)};  // assigned in an inner block, used outside it")
            elif isinstance(ty, N.ArrayType):
                self.emit(f"{ty.elem.c_compute} {c_ident(name)}{dims_suffix(ty.shape)};")

    # ---- statements
    def stmt(self, s: N.Stmt) -> None:
        getattr(self, "s_" + type(s).__name__)(s)

    def s_Pass(self, s: N.Pass) -> None:
        self.emit(";", s.loc)

    def s_Break(self, s: N.Break) -> None:
        self.emit("break;", s.loc)

    def s_Continue(self, s: N.Continue) -> None:
        self.emit("continue;", s.loc)

    def s_Return(self, s: N.Return) -> None:
        self.emit("return;" if s.value is None else f"return {self.pr.expr(s.value)};", s.loc)

    def s_If(self, s: N.If, prefix: str = "") -> None:
        self.emit(f"{prefix}if ({self.pr.expr(s.cond)}) {{", s.loc)
        self.block(s.then)
        if len(s.orelse) == 1 and isinstance(s.orelse[0], N.If):
            self.s_If(s.orelse[0], "} else ")
            return
        if s.orelse:
            self.emit("} else {")
            self.block(s.orelse)
        self.emit("}")

    def s_While(self, s: N.While) -> None:
        self.emit(f"while ({self.pr.expr(s.cond)}) {{", s.loc)
        self.block(s.body)
        self.emit("}")

    def s_For(self, s: N.For) -> None:
        """`range` evaluates its bounds once (as in Python): bounds that could change while the
        loop runs are copied to constants first."""
        args = s.iter.args
        ty: ScalarType = s.var_ty
        var = c_ident(s.var)
        start, stop, step = (None, args[0], None) if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else None)
        start_c = self.pr.expr(start) if start is not None else c_literal(0, ty)
        step_v = s.step_value
        stop_c = self.pr.expr(stop)
        step_c = self.pr.expr(step) if step is not None else None
        if not _simple(stop):
            tmp = self.temp(f"tsr_{var}_stop")
            self.emit(f"const {ty.c_compute} {tmp} = {stop_c};", s.loc)
            stop_c = tmp
        if step is not None and step_v is None and not _simple(step):
            tmp = self.temp(f"tsr_{var}_step")
            self.emit(f"const {ty.c_compute} {tmp} = {step_c};", s.loc)
            step_c = tmp
        # A loop over an existing local counts in a hidden variable and assigns the local at the
        # top of each iteration, so that after the loop it holds the last value, as in Python.
        reuse = s.var in self._existing_locals()
        counter = f"tsr_{var}_i" if reuse else var
        if step_v is None and _known_positive(step):
            cond = f"{counter} < {stop_c}"
        elif step_v is None:
            cond = f"({step_c} > 0 ? {counter} < {stop_c} : {counter} > {stop_c})"
        else:
            cond = f"{counter} {'<' if step_v > 0 else '>'} {stop_c}"
        if step is None or step_v == 1:
            inc = f"++{counter}"
        elif step_v == -1:
            inc = f"--{counter}"
        else:
            inc = f"{counter} += {step_c}"
        if s.iter.func.id == "static_range":
            self.emit("#pragma unroll")
        self.emit(f"for ({ty.c_compute} {counter} = {start_c}; {cond}; {inc}) {{", s.loc)
        if reuse:
            self.depth += 1
            self.emit(f"{var} = {counter};", s.loc)
            self.depth -= 1
        self.block(s.body)
        self.emit("}")

    def temp(self, base: str) -> str:
        """A fresh name for a compiler temporary (unique within the function)."""
        name, n = base, 1
        while name in self.temps:
            n += 1
            name = f"{base}{n}"
        self.temps.add(name)
        return name

    def _existing_locals(self) -> set[str]:
        return self.hoisted | self.declared

    def s_ExprStmt(self, s: N.ExprStmt) -> None:
        e = s.expr
        name = e.func.id if isinstance(e, N.Call) else ""
        if name == "tbarrier":
            self.emit("__syncthreads();", s.loc)
        elif name == "tfence":
            scope = e.args[0].value
            fence = {"group": "__threadfence_block", "device": "__threadfence", "mesh": "__threadfence_system"}[scope]
            self.emit(f"{fence}();", s.loc)
        elif name == "tprint":
            args = [c_string(e.args[0].value)] + [_printf_arg(self.pr, a) for a in e.args[1:]]
            self.emit(f"printf({', '.join(args)});", s.loc)
        elif name == "tassert":
            if self.opts.debug:
                cond = self.pr.wrap(e.args[0], 15)
                self.emit(f"if (!{cond}) tsr_assert_fail({c_string(self.fn.name)}, "
                          f"{c_string(self.opts.source_name)}, {s.loc.line}, {c_string(e.args[1].value)});", s.loc)
            else:
                self.emit("// tassert compiled out (debug off)", s.loc)
        elif name == "tcopy":
            self.emit(self.tcopy(e) + ";", s.loc)
        elif e.ty == N.VOID or name.startswith("atomic_"):
            text = self.pr.expr(e)
            self.emit((text[len("(long long)"):] if text.startswith("(long long)atomic") else text) + ";", s.loc)
        else:
            self.emit(f"(void){self.pr.wrap(e, 15)};", s.loc)

    def s_Assign(self, s: N.Assign) -> None:
        t = s.target
        if isinstance(t, N.Name):
            name = c_ident(t.id)
            ty = t.ty
            if isinstance(ty, N.ArrayType):
                self.array_decl(s, name, ty)
                return
            value = self.pr.conv(s.value, ty, 0) if isinstance(s.value.ty, ScalarType) else self.pr.expr(s.value)
            if s.declares and t.id not in self.hoisted:
                self.declared.add(t.id)
                self.emit(f"{ty.c_compute} {name} = {value};", s.loc)
            else:
                self.emit(f"{name} = {value};", s.loc)
            return
        self.emit(f"{self.pr.raced(t, 'write')} = {self.stored(s.value, t.ty)};", s.loc)

    def stored(self, value: N.Expr, ty: ScalarType) -> str:
        """A value stored to memory of type `ty`; f16/bf16 stores round once, with the store."""
        f = store_fn(ty)
        if f is None:
            return self.pr.conv(value, ty, 0)
        if isinstance(value, N.Call) and value.func.ref == "cast" and value.ty == ty:
            value = value.args[0]  # the implicit conversion to f16 is the store itself
        text = self.pr.expr(value) if value.ty.c_compute == "float" else self.pr.cast_text(value, SCALARS["f32"])
        return f"{f}({text})"

    def array_decl(self, s: N.Assign, name: str, ty: N.ArrayType) -> None:
        if ty.space == "shared":
            slot = next(x for x in self.fn.shared.slots if x.name == s.target.id)
            ctype = ty.elem.c_storage
            if self.fn.shared.dynamic:
                rows = dims_suffix(ty.shape[1:], ty.pad) if len(ty.shape) > 1 else ""
                ptr = f"(*{name}){rows}" if rows else f"*{name}"
                cast = f"{ctype} (*){rows}" if rows else f"{ctype}*"
                self.emit(f"{ctype} {ptr} = reinterpret_cast<{cast}>(tsr_dynamic_smem + {slot.offset});  "
                          f"// {slot.nbytes} bytes", s.loc)
            else:
                self.emit(f"__shared__ __align__(16) {ctype} {name}{dims_suffix(ty.shape, ty.pad)};", s.loc)
            return
        init = s.value.args[0]
        total = 1
        for d in ty.shape:
            total *= d
        first = name + "[0]" * len(ty.shape)
        if s.target.id not in self.hoisted:
            self.emit(f"{ty.elem.c_compute} {name}{dims_suffix(ty.shape)};", s.loc)
        self.emit(f"tsr_fill<{total}>(&{first}, {self.pr.conv(init, ty.elem, 0)});", s.loc)

    def s_AugAssign(self, s: N.AugAssign) -> None:
        t = s.target
        tt: ScalarType = t.ty
        lhs = c_ident(t.id) if isinstance(t, N.Name) else self.pr.raced(t, "write")
        in_memory = isinstance(t, N.Index) and not (isinstance(t.base.ty, N.ArrayType) and t.base.ty.space == "regs")
        op = s.op
        simple = (not tt.is_half and not (tt.is_float and op in ("%", "//")) and not (tt.is_int and tt.bits < 32)
                  and not (op in ("%", "//") and not _nonzero_literal(s.value)))
        if simple:
            c_op = "/" if op == "//" else op
            value = s.value
            if op in ("<<", ">>"):
                rhs = self.pr.expr(value)
            else:
                rhs = self.pr.conv(value, tt, 0) if value.ty.c_compute != tt.c_compute else self.pr.expr(value)
            self.emit(f"{lhs} {c_op}= {rhs};", s.loc)
            return
        # Rebuild as `t = t op v` so that the printer applies rounding, fmod and floor.
        res = tt if op in ("<<", ">>") else promote(tt, s.value.ty)
        text = self.pr.conv(N.BinOp(s.loc, op, t, s.value, res), tt, 0)
        f = store_fn(tt) if in_memory else None
        self.emit(f"{lhs} = {f}({text});" if f else f"{lhs} = {text};", s.loc)

    # ---- tcopy
    def tcopy(self, e: N.Call) -> str:
        dst, src = e.args
        ext = dst.ty.extents
        d = (1,) * (3 - len(ext)) + ext
        elem = dst.ty.base.elem
        dp, ds, dl = self.view_parts(dst)
        sp, ss, sl = self.view_parts(src)
        targs = f"{elem.c_storage}, {d[0]}, {d[1]}, {d[2]}, {self.fn.config.tile_count}"
        tail = ""
        if self.opts.check_bounds:
            shared = [str(isinstance(v.ty.base, N.ArrayType)).lower() for v in (dst, src)]
            targs += f", {shared[0]}, {shared[1]}"
            tail = f", {e.loc.line}"
        return f"tsr_copy<{targs}>({dp}, {ds}, {dl}, {sp}, {ss}, {sl}, {self.pr.tid()}{tail})"

    def view_parts(self, v: N.Index) -> tuple[str, str, str]:
        """Origin pointer, the two outer strides (elements) and the three valid extents of a view."""
        bt = v.base.ty
        name = c_ident(v.base.id)
        if isinstance(bt, N.TensorType):
            dims = phys = [self.pr.expr(d) for d in bt.dims]
        else:
            dims = [str(x) for x in bt.shape]
            phys = dims[:-1] + [str(bt.shape[-1] + bt.pad)]  # rows are padded in memory
        rank = len(dims)
        strides = ["1"] * rank  # innermost is contiguous
        for k in range(rank - 2, -1, -1):
            strides[k] = phys[k + 1] if strides[k + 1] == "1" else f"{strides[k + 1]} * {phys[k + 1]}"
        # A whole shared array is the view of every element.
        indices = v.indices or tuple(N.Slice(v.loc, N.IntLit(v.loc, 0, I32), None, I32) for _ in dims)
        starts: list[str] = []
        kept: list[tuple[str, str]] = []  # (stride, limit) of the sliced dimensions
        guards: list[str] = []            # indexed (dropped) dimensions must be in range
        for k, idx in enumerate(indices):
            start = self.pr.expr(idx.lo if isinstance(idx, N.Slice) else idx)
            starts.append(start)
            if isinstance(idx, N.Slice):
                kept.append((strides[k], dims[k] if start == "0" else f"{dims[k]} - ({start})"))
            else:
                guards.append(f"({start}) < {dims[k]}")
        offset = " + ".join(f"({s}) * ({st})" if st != "1" else f"({s})" for s, st in zip(starts, strides)
                            if s != "0") or "0"
        while len(kept) < 3:
            kept.insert(0, ("0", "1"))
        if isinstance(bt, N.TensorType):
            ptr = f"{name} + {offset}" if offset != "0" else name
        else:
            ptr = f"&{name}" + "[0]" * rank + (f" + {offset}" if offset != "0" else "")
        lim = [f"(int)({lim_})" if lim_ not in dims and not lim_.isdigit() else lim_ for _, lim_ in kept]
        if guards:
            lim[0] = f"({' && '.join(guards)}) ? {lim[0]} : 0"
        return (ptr, f"{kept[0][0]}, {kept[1][0]}", ", ".join(lim))


def _printf_arg(pr: CPrinter, a: N.Expr) -> str:
    ty: ScalarType = a.ty
    if ty.is_float:
        return f"(double)({pr.expr(a)})"
    if ty.bits == 64:
        return f"({'unsigned long long' if ty.kind == 'uint' else 'long long'})({pr.expr(a)})"
    return f"({'unsigned' if ty.kind == 'uint' else 'int'})({pr.expr(a)})"


def _known_positive(e: N.Expr) -> bool:
    """Builtins that count something are at least 1 (so a range stepping by them counts up)."""
    return isinstance(e, N.Call) and e.func.ref == "builtin" and e.func.id in (
        "group_tile_count", "grid_tile_count", "group_shape", "group_count")


def _simple(e: N.Expr) -> bool:
    """Bounds that cannot change while a loop runs (literals, parameters, constants)."""
    if isinstance(e, N.IntLit):
        return True
    if isinstance(e, N.Name):
        return e.ref in ("param", "shape", "const", "builtin")
    return isinstance(e, N.Call) and e.func.ref == "builtin" and e.func.id == "group_tile_count"


def lower_function(fn: N.FuncDef, opts: Options) -> str:
    lw = BodyLowering(fn, opts)
    lw.prologue()
    for s in fn.body:
        lw.stmt(s)
    return "\n".join(lw.lines)

