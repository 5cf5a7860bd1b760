"""The one printer from typed IR expressions to C expressions.

Values of `f16`/`bf16` are `float` in C expressions: loads from memory convert
(`__half2float`), stores round (`__float2half_rn`), and every f16/bf16 operation
rounds its result back (`tsr_round_f16`), so results match the GPU's and NumPy's.
"""

from __future__ import annotations

from tessera import nodes as N
from tessera.dtypes import ScalarType, c_literal
from tessera.transpile.names import c_ident

# C precedence levels (higher binds tighter).
PRIMARY, UNARY, MUL, ADD, SHIFT, REL, EQ, BAND, BXOR, BOR, LAND, LOR, COND = 16, 15, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3
_BIN_PREC = {"*": MUL, "/": MUL, "%": MUL, "//": MUL, "+": ADD, "-": ADD, "<<": SHIFT, ">>": SHIFT,
             "&": BAND, "^": BXOR, "|": BOR}
_CMP_PREC = {"<": REL, "<=": REL, ">": REL, ">=": REL, "==": EQ, "!=": EQ}
_AXES = "xyz"

MATH_F32 = {"exp": "expf", "exp2": "exp2f", "log": "logf", "log2": "log2f", "sqrt": "sqrtf", "rsqrt": "rsqrtf",
            "sin": "sinf", "cos": "cosf", "tanh": "tanhf", "erf": "erff", "floor": "floorf", "ceil": "ceilf",
            "pow": "powf", "fma": "fmaf", "abs": "fabsf"}
MATH_F64 = {k: (v[:-1] if k != "abs" else "fabs") for k, v in MATH_F32.items()}

ATOMIC_C = {"atomic_add": "atomicAdd", "atomic_sub": "atomicSub", "atomic_max": "atomicMax",
            "atomic_min": "atomicMin", "atomic_and": "atomicAnd", "atomic_or": "atomicOr",
            "atomic_xor": "atomicXor", "atomic_exch": "atomicExch", "atomic_cas": "atomicCAS"}
SCOPE_SUFFIX = {"group": "_block", "device": "", "mesh": "_system"}
_U64 = "unsigned long long"


def c_string(text: str) -> str:
    """A C string literal for arbitrary user text: printable ASCII kept, everything else escaped."""
    out = ['"']
    for ch in text.encode("utf-8"):
        c = chr(ch)
        if c in '"\\':
            out.append("\\" + c)
        elif c == "?":
            out.append("\\?")
        elif c in "\n\t":
            out.append("\\n" if c == "\n" else "\\t")
        elif 32 <= ch < 127:
            out.append(c)
        else:
            out.append(f"\\{ch:03o}")
    out.append('"')
    return "".join(out)


def round_fn(ty: ScalarType) -> str | None:
    return {"f16": "tsr_round_f16", "bf16": "tsr_round_bf16"}.get(ty.name)


def load_fn(ty: ScalarType) -> str | None:
    return {"f16": "__half2float", "bf16": "__bfloat162float"}.get(ty.name)


def store_fn(ty: ScalarType) -> str | None:
    return {"f16": "__float2half_rn", "bf16": "__float2bfloat16_rn"}.get(ty.name)


class CPrinter:
    """Prints expressions of one function. `tile` is the group shape (kernels only)."""

    def __init__(self, fn: N.FuncDef, debug: bool = False, check_bounds: bool = False) -> None:
        self.fn = fn
        self.tile = fn.config.tile if fn.config else ()
        self.nt = fn.config.tile_count if fn.config else 0
        self.debug = debug
        self.check_bounds = check_bounds

    def expr(self, e: N.Expr) -> str:
        return self.p(e)[0]

    def wrap(self, e: N.Expr, prec: int) -> str:
        text, p = self.p(e)
        return f"({text})" if p < prec else text

    def p(self, e: N.Expr) -> tuple[str, int]:
        return getattr(self, "p_" + type(e).__name__)(e)

    # ---- leaves
    def p_IntLit(self, e: N.IntLit) -> tuple[str, int]:
        text = c_literal(e.value, e.ty)
        return text, PRIMARY if not text.startswith("(") and not text.startswith("-") else UNARY

    def p_FloatLit(self, e: N.FloatLit) -> tuple[str, int]:
        text = c_literal(e.value, e.ty)
        return text, PRIMARY if not text.startswith("-") else UNARY

    def p_BoolLit(self, e: N.BoolLit) -> tuple[str, int]:
        return ("true" if e.value else "false"), PRIMARY

    def p_Name(self, e: N.Name) -> tuple[str, int]:
        if e.ref == "builtin":
            if e.id == "grid_groups":
                return "tsr_grid_groups()", PRIMARY
            if e.id == "WARP_SIZE":
                return "32", PRIMARY
        return c_ident(e.id), PRIMARY

    # ---- operators
    def p_Unary(self, e: N.Unary) -> tuple[str, int]:
        if e.op == "not":
            return "!" + self.wrap(e.operand, UNARY), UNARY
        inner = self.wrap(e.operand, UNARY)
        if e.op == "-" and inner.startswith("-"):
            inner = f"({inner})"
        text = f"{e.op}{inner}" if e.op != "+" else inner
        return self.finish(text, UNARY if e.op != "+" else self.p(e.operand)[1], e.ty)

    def finish(self, text: str, prec: int, ty: ScalarType) -> tuple[str, int]:
        """Round f16/bf16 results and wrap narrow integers after an operation."""
        r = round_fn(ty)
        if r:
            return f"{r}({text})", PRIMARY
        if ty.is_int and ty.bits < 32:
            return f"({ty.c_compute})({text})", UNARY
        return text, prec

    def p_BinOp(self, e: N.BinOp) -> tuple[str, int]:
        ty: ScalarType = e.ty
        op = e.op
        if op in ("<<", ">>"):
            a = self.conv(e.left, ty, SHIFT)
            b = self.wrap(e.right, SHIFT + 1)
            return self.finish(f"{a} {op} {b}", SHIFT, ty)
        if ty.is_float and op == "//":
            f = "floor" if ty.name == "f64" else "floorf"
            return self.finish(f"{f}({self.conv(e.left, ty, MUL)} / {self.conv(e.right, ty, MUL + 1)})", PRIMARY, ty)
        if ty.is_float and op == "%":
            f = "fmod" if ty.name == "f64" else "fmodf"
            return self.finish(f"{f}({self.conv(e.left, ty, 0)}, {self.conv(e.right, ty, 0)})", PRIMARY, ty)
        if ty.is_int and op in ("//", "%") and not _nonzero_literal(e.right):
            # A divisor that may be 0 (or -1): the GPU gives some value, the host would trap.
            f = "tsr_div" if op == "//" else "tsr_mod"
            return self.finish(f"{f}({self.conv(e.left, ty, 0)}, {self.conv(e.right, ty, 0)})", PRIMARY, ty)
        prec = _BIN_PREC[op]
        c_op = "/" if op == "//" else op
        a = self.conv(e.left, ty, prec)
        b = self.conv(e.right, ty, prec + 1)
        return self.finish(f"{a} {c_op} {b}", prec, ty)

    def p_Compare(self, e: N.Compare) -> tuple[str, int]:
        op = e.ops[0]
        a, b = e.operands
        common = a.ty if a.ty == b.ty else _common(a.ty, b.ty)
        prec = _CMP_PREC[op]
        return f"{self.conv(a, common, prec)} {op} {self.conv(b, common, prec + 1)}", prec

    def p_BoolOp(self, e: N.BoolOp) -> tuple[str, int]:
        prec = LAND if e.op == "and" else LOR
        c_op = "&&" if e.op == "and" else "||"
        return f"{self.wrap(e.left, prec)} {c_op} {self.wrap(e.right, prec + 1)}", prec

    def p_Ternary(self, e: N.Ternary) -> tuple[str, int]:
        return (f"{self.wrap(e.cond, LOR)} ? {self.conv(e.then, e.ty, COND)} : "
                f"{self.conv(e.orelse, e.ty, COND)}"), COND

    def conv(self, e: N.Expr, ty: ScalarType, prec: int) -> str:
        """`e` converted to `ty` (both are checked scalars)."""
        if e.ty == ty or ty is None:
            return self.wrap(e, prec)
        if e.ty.c_compute == ty.c_compute and not round_fn(ty):
            return self.wrap(e, prec)
        return self.cast_text(e, ty)

    def cast_text(self, e: N.Expr, ty: ScalarType) -> str:
        src: ScalarType = e.ty
        if ty.kind == "bool":
            return f"({self.wrap(e, EQ)} != 0)" if src.kind != "bool" else self.expr(e)
        if ty.is_int and src.is_float:
            return f"tsr_f2i<{ty.c_compute}>({self.expr(e)})"
        r = round_fn(ty)
        if not r and src.c_compute == ty.c_compute:
            return self.expr(e)
        if r:
            if src.is_half and src.name == ty.name:
                return self.expr(e)
            inner = self.expr(e) if src.c_compute == "float" else f"(float)({self.expr(e)})"
            return f"{r}({inner})"
        return f"({ty.c_compute}){self.wrap(e, UNARY)}"

    # ---- memory
    def p_Index(self, e: N.Index) -> tuple[str, int]:
        text = self.raced(e, "read")
        base_ty = e.base.ty
        if isinstance(base_ty, N.TensorType) or (isinstance(base_ty, N.ArrayType) and base_ty.space == "shared"):
            f = load_fn(e.ty)
            if f:
                return f"{f}({text})", PRIMARY
        return text, PRIMARY

    def element(self, e: N.Index) -> str:
        """The C lvalue of an element (no f16 conversion)."""
        base = c_ident(e.base.id)
        bt = e.base.ty
        if isinstance(bt, N.TensorType):
            idx = [self.checked(i, self.expr(d), e.base.id, k) for k, (i, d) in enumerate(zip(e.indices, bt.dims))]
            return f"{base}[{self.flat_index(idx, bt.dims)}]"
        return base + "".join(f"[{self.checked(i, str(n), e.base.id, k)[0]}]"
                              for k, (i, n) in enumerate(zip(e.indices, bt.shape)))

    def raced(self, e: N.Index, how: str) -> str:
        """An element, routed through the race detector for shared arrays under check_bounds."""
        text = self.element(e)
        bt = e.base.ty
        if self.check_bounds and isinstance(bt, N.ArrayType) and bt.space == "shared":
            return f"(*tsr_race_{how}(&{text}, {e.loc.line}))"
        return text

    def checked(self, i: N.Expr, extent: str, array: str, dim: int) -> tuple[str, int]:
        """An index, wrapped in a bounds check when compiling with check_bounds."""
        if not self.check_bounds:
            return self.p(i)
        return (f"tsr_check_index({self.expr(i)}, {extent}, {c_string(self.fn.name)}, {c_string(array)}, "
                f"{dim}, {i.loc.line})"), PRIMARY

    def flat_index(self, indices: list[tuple[str, int]], dims: tuple[N.Expr, ...]) -> str:
        text, prec = indices[0]
        for (i, iprec), d in zip(indices[1:], dims[1:]):
            dim = self.expr(d)
            left = text if prec >= MUL else f"({text})"
            text, prec = f"{left} * {dim} + {i if iprec > ADD else f'({i})'}", ADD
        return text

    def p_Call(self, e: N.Call) -> tuple[str, int]:
        name = e.func.id
        if e.func.ref == "cast":
            return self.cast_text(e.args[0], e.ty), UNARY
        if e.func.ref == "func":
            return f"{c_ident(name)}({', '.join(self.expr(a) for a in e.args)})", PRIMARY
        method = getattr(self, "c_" + name, None)
        if method is not None:
            return method(e), PRIMARY
        if name.startswith("atomic_"):
            return self.atomic(e), PRIMARY
        if name in MATH_F32:
            return self.math(e), PRIMARY
        raise KeyError(name)

    # ---- builtins
    def tid(self) -> str:
        t = self.tile
        if not t:  # a device function: the caller's group shape is only known at run time
            return "(int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))"
        if len(t) == 1:
            return "(int)threadIdx.x"
        if len(t) == 2:
            return f"(int)(threadIdx.x + {t[0]}u * threadIdx.y)"
        return f"(int)(threadIdx.x + {t[0]}u * (threadIdx.y + {t[1]}u * threadIdx.z))"

    def c_tile_linear_id(self, e: N.Call) -> str:
        return self.tid()

    def c_tile_id(self, e: N.Call) -> str:
        return f"(int)threadIdx.{_AXES[e.args[0].value]}"

    def c_group_id(self, e: N.Call) -> str:
        return f"(int)blockIdx.{_AXES[e.args[0].value]}"

    def c_group_count(self, e: N.Call) -> str:
        return f"(int)gridDim.{_AXES[e.args[0].value]}"

    def c_group_shape(self, e: N.Call) -> str:
        axis = e.args[0].value
        if not self.tile:
            return f"(int)blockDim.{_AXES[axis]}"
        return str(self.tile[axis] if axis < len(self.tile) else 1)

    def c_group_tile_count(self, e: N.Call) -> str:
        return self.tile_count()

    def tile_count(self) -> str:
        return str(self.nt) if self.tile else "(int)(blockDim.x * blockDim.y * blockDim.z)"

    def c_group_linear_id(self, e: N.Call) -> str:
        return "tsr_group_linear_id()"

    def c_global_linear_id(self, e: N.Call) -> str:
        return f"(tsr_group_linear_id() * {self.tile_count()} + {self.tid()})"

    def c_grid_tile_count(self, e: N.Call) -> str:
        return f"(tsr_grid_groups() * {self.tile_count()})"

    def c_lane_id(self, e: N.Call) -> str:
        return f"({self.tid()} & 31)"

    def c_warp_id(self, e: N.Call) -> str:
        return f"({self.tid()} >> 5)"

    def math(self, e: N.Call) -> str:
        name = e.func.id
        ty: ScalarType = e.ty
        args = ", ".join(self.expr(a) for a in e.args)
        if name == "abs" and ty.is_int:
            if ty.kind == "uint":
                return self.expr(e.args[0])
            f = "llabs" if ty.bits == 64 else "abs"
            text = f"{f}({args})"
            return f"({ty.c_compute}){text}" if ty.bits < 32 else text
        fn = (MATH_F64 if ty.name == "f64" else MATH_F32)[name]
        text = f"{fn}({args})"
        r = round_fn(ty)
        return f"{r}({text})" if r else text

    def c_min(self, e: N.Call) -> str:
        return self._minmax(e, "min")

    def c_max(self, e: N.Call) -> str:
        return self._minmax(e, "max")

    def _minmax(self, e: N.Call, f: str) -> str:
        ty: ScalarType = e.ty
        fname = {"f32": f"f{f}f", "f64": f"f{f}", "f16": f"f{f}f", "bf16": f"f{f}f"}.get(ty.name, f)
        text = self.expr(e.args[0])
        for a in e.args[1:]:
            text = f"{fname}({text}, {self.expr(a)})"
        return f"({ty.c_compute})({text})" if ty.is_int and ty.bits < 32 else text

    def c_warp_sum(self, e: N.Call) -> str:
        return self._warp(e, "tsr_warp_sum")

    def c_warp_max(self, e: N.Call) -> str:
        return self._warp(e, "tsr_warp_max")

    def c_warp_min(self, e: N.Call) -> str:
        return self._warp(e, "tsr_warp_min")

    def _warp(self, e: N.Call, f: str) -> str:
        ty: ScalarType = e.ty
        text = f"{f}({self.expr(e.args[0])})"
        r = round_fn(ty)
        if r:
            return f"{r}({text})"
        return f"({ty.c_compute}){text}" if ty.is_int and ty.bits < 32 else text

    def c_shfl(self, e: N.Call) -> str:
        return self._shfl(e, "__shfl_sync")

    def c_shfl_xor(self, e: N.Call) -> str:
        return self._shfl(e, "__shfl_xor_sync")

    def c_shfl_down(self, e: N.Call) -> str:
        return self._shfl(e, "__shfl_down_sync")

    def _shfl(self, e: N.Call, f: str) -> str:
        ty: ScalarType = e.ty
        v = self.expr(e.args[0])
        if ty.kind == "bool" or (ty.is_int and ty.bits < 32):
            inner = f"{f}(0xffffffffu, (int)({v}), {self.expr(e.args[1])})"
            return f"({ty.c_compute})({inner})" if ty.kind != "bool" else f"({inner} != 0)"
        return f"{f}(0xffffffffu, {v}, {self.expr(e.args[1])})"

    def c_group_sum(self, e: N.Call) -> str:
        return self._group(e, "tsr_group_sum")

    def c_group_max(self, e: N.Call) -> str:
        return self._group(e, "tsr_group_max")

    def c_group_min(self, e: N.Call) -> str:
        return self._group(e, "tsr_group_min")

    def _group(self, e: N.Call, f: str) -> str:
        ty: ScalarType = e.ty
        ct = "int" if ty.is_int and ty.bits < 32 else ty.c_compute
        text = f"{f}<{self.nt}, {ct}>({self.expr(e.args[0])}, tsr_reduce_scratch)"
        r = round_fn(ty)
        if r:
            return f"{r}({text})"
        return f"({ty.c_compute})({text})" if ty.is_int and ty.bits < 32 else text

    def atomic(self, e: N.Call) -> str:
        name = e.func.id
        ref: N.Index = e.args[0]
        elem: ScalarType = e.ty
        scope = e.kwargs[0].value.value
        suffix = SCOPE_SUFFIX[scope]
        addr = f"&{self.element(ref)}"
        vals = [self.expr(v) for v in e.args[1:]]
        if elem.is_half:
            op = {"atomic_add": "add", "atomic_sub": "sub", "atomic_exch": "exch"}[name]
            return f"tsr_atomic_{op}{suffix}_{elem.name}({addr}, {', '.join(vals)})"
        if elem.is_float and name in ("atomic_max", "atomic_min", "atomic_cas"):
            return f"tsr_{name}{suffix}({addr}, {', '.join(vals)})"
        if elem.name == "f64" and name == "atomic_exch":
            return (f"__longlong_as_double((long long)atomicExch{suffix}(({_U64}*){addr}, "
                    f"({_U64})__double_as_longlong({vals[0]})))")
        if elem.is_float and name == "atomic_sub":
            return f"atomicAdd{suffix}({addr}, -({vals[0]}))"
        cname = ATOMIC_C[name] + suffix
        if elem.name in ("i64", "u64") and not (elem.name == "i64" and name in ("atomic_max", "atomic_min")):
            if name == "atomic_sub":
                cname, vals = "atomicAdd" + suffix, [f"0ull - ({_U64})({vals[0]})"]
            cast_vals = ", ".join(f"({_U64})({v})" if not v.startswith("0ull") else v for v in vals)
            text = f"{cname}(({_U64}*){addr}, {cast_vals})"
            return f"(long long){text}" if elem.name == "i64" else text
        return f"{cname}({addr}, {', '.join(vals)})"


def _nonzero_literal(e: N.Expr) -> bool:
    """A literal divisor other than 0 and -1 (with which C division cannot trap)."""
    return isinstance(e, N.IntLit) and e.value not in (0, -1)


def _common(a: ScalarType, b: ScalarType) -> ScalarType:
    from tessera.dtypes import promote

    return promote(a, b)
