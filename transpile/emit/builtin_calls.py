"""Printing the builtins of the lowered IR (`Intrinsic`, `Collective`, `Atomic`) as C: index
builtins, math, warp and group operations, atomics. The builtin table names each one's printing rule
(`c_<printer>`) and C functions; `CPrinter` (emit/exprs.py) inherits these."""

from __future__ import annotations

from collections.abc import Callable

from tessera.transpile.builtins import BUILTINS
from tessera.transpile.emit.terms import PRIMARY, UNARY, round_fn
from tessera.transpile.lir import nodes as L

_AXES = "xyz"
SCOPE_SUFFIX = {"group": "_block", "device": "", "mesh": "_system"}
_U64 = "unsigned long long"
_BITS_TYPE = {16: "unsigned short", 32: "unsigned int", 64: _U64}


class BuiltinPrinter:
    """The builtin half of CPrinter (which provides `expr`, `p`, `element` and `address`)."""

    fn: L.Function
    tile: tuple[int, ...]
    expr: Callable[[L.Expr], str]
    p: Callable[[L.Expr], tuple[str, int]]
    wrap: Callable[[L.Expr, int], str]
    element: Callable[[str, tuple[L.Expr, ...]], str]
    address: Callable[[str, tuple[L.Expr, ...], str], str]
    elements: dict[str, str]

    def p_Intrinsic(self, e: L.Intrinsic) -> tuple[str, int]:
        if e.op == "grid_groups":
            return "tsr_grid_groups()", PRIMARY
        rule = BUILTINS[e.op].printer
        text, prec = getattr(self, "c_" + rule)(e)
        return text, prec

    def p_Collective(self, e: L.Collective) -> tuple[str, int]:
        return getattr(self, "c_" + BUILTINS[e.op].printer)(e), PRIMARY

    def tid(self) -> str:
        t = self.tile
        if not t:  # a device function: the caller's group shape is only known at run time
            return "(int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))"
        if len(t) == 1:
            return "(int)threadIdx.x"
        if len(t) == 2:
            return f"(int)(threadIdx.x + {t[0]}u * threadIdx.y)"
        return f"(int)(threadIdx.x + {t[0]}u * (threadIdx.y + {t[1]}u * threadIdx.z))"

    def tile_count(self) -> str:
        return str(self.fn.tile_count) if self.tile else "(int)(blockDim.x * blockDim.y * blockDim.z)"

    def _axis(self, e: L.Intrinsic) -> int:
        axis = e.args[0]
        assert isinstance(axis, (L.Const, L.Affine))
        return int(axis.value if isinstance(axis, L.Const) else axis.offset.value)

    def c_tile_linear_id(self, e: L.Intrinsic) -> tuple[str, int]:
        return self.tid(), UNARY

    def c_tile_id(self, e: L.Intrinsic) -> tuple[str, int]:
        return f"(int)threadIdx.{_AXES[self._axis(e)]}", UNARY

    def c_group_id(self, e: L.Intrinsic) -> tuple[str, int]:
        return f"(int)blockIdx.{_AXES[self._axis(e)]}", UNARY

    def c_group_count(self, e: L.Intrinsic) -> tuple[str, int]:
        return f"(int)gridDim.{_AXES[self._axis(e)]}", UNARY

    def c_group_shape(self, e: L.Intrinsic) -> tuple[str, int]:
        axis = self._axis(e)
        if not self.tile:
            return f"(int)blockDim.{_AXES[axis]}", UNARY
        return str(self.tile[axis] if axis < len(self.tile) else 1), PRIMARY

    def c_group_tile_count(self, e: L.Intrinsic) -> tuple[str, int]:
        return self.tile_count(), PRIMARY if self.tile else UNARY

    def c_group_linear_id(self, e: L.Intrinsic) -> tuple[str, int]:
        return "tsr_group_linear_id()", PRIMARY

    def c_global_linear_id(self, e: L.Intrinsic) -> tuple[str, int]:
        return f"(tsr_group_linear_id() * {self.tile_count()} + {self.tid()})", PRIMARY

    def c_grid_tile_count(self, e: L.Intrinsic) -> tuple[str, int]:
        return f"(tsr_grid_groups() * {self.tile_count()})", PRIMARY

    def c_lane_id(self, e: L.Intrinsic) -> tuple[str, int]:
        return f"({self.tid()} & 31)", PRIMARY

    def c_warp_id(self, e: L.Intrinsic) -> tuple[str, int]:
        return f"({self.tid()} >> 5)", PRIMARY

    def c_frag_coord(self, e: L.Intrinsic) -> tuple[str, int]:
        """The element's row or column in a whole-fragment statement (emit/frags.py declares them)."""
        return ("tsr_r" if e.op == "row_index" else "tsr_c"), PRIMARY

    def c_frag_reduce(self, e: L.Intrinsic) -> tuple[str, int]:
        """A row reduction in a whole-fragment statement: its value for the element's row, computed
        before the statement's loop (emit/frags.py)."""
        load = e.args[0]
        assert isinstance(load, L.Load)
        return self.elements[f"{e.op}({load.buf})"], PRIMARY

    def c_math(self, e: L.Intrinsic) -> tuple[str, int]:
        ty = e.dtype
        b = BUILTINS[e.op]
        args = ", ".join(self.expr(a) for a in e.args)
        if e.op == "abs" and ty.is_int:
            if ty.kind == "uint":
                return self.p(e.args[0])
            text = f"{'llabs' if ty.bits == 64 else 'abs'}({args})"
            return (f"({ty.c_compute}){text}", UNARY) if ty.bits < 32 else (text, PRIMARY)
        text = f"{b.cuda_f64 if ty.name == 'f64' else b.cuda}({args})"
        r = round_fn(ty)
        return (f"{r}({text})", PRIMARY) if r else (text, PRIMARY)

    def c_minmax(self, e: L.Intrinsic) -> tuple[str, int]:
        ty = e.dtype
        b = BUILTINS[e.op]
        fname = (b.cuda_f64 if ty.name == "f64" else b.cuda) if ty.is_float else e.op
        text = self.expr(e.args[0])
        for a in e.args[1:]:
            text = f"{fname}({text}, {self.expr(a)})"
        return (f"({ty.c_compute})({text})", UNARY) if ty.is_int and ty.bits < 32 else (text, PRIMARY)

    def _as(self, x: L.Expr, ctype: str) -> str:
        """`x` as the C type `ctype` (a cast unless it already has that type)."""
        if x.dtype.c_compute == ctype and not x.dtype.is_half:
            return self.expr(x)
        return f"({ctype}){self.wrap(x, UNARY)}"

    def c_bits(self, e: L.Intrinsic) -> tuple[str, int]:
        x = e.args[0]
        ty = x.dtype
        b = BUILTINS[e.op]
        fname = b.cuda_f64 if ty.bits == 64 else b.cuda
        wide = ty.bits == 64
        if e.op in ("popc", "brev"):
            text = f"{fname}({self._as(x, _U64 if wide else 'unsigned int')})"
        else:
            text = f"{fname}({self._as(x, 'long long' if wide else 'int')})"
        if e.op == "brev" and ty.kind == "int":
            return f"({ty.c_compute}){text}", UNARY
        return text, PRIMARY

    def c_mulhi(self, e: L.Intrinsic) -> tuple[str, int]:
        ty = e.dtype
        fname = {("int", 32): "__mulhi", ("uint", 32): "__umulhi", ("int", 64): "__mul64hi",
                 ("uint", 64): "__umul64hi"}[ty.kind, ty.bits]
        return f"{fname}({self.expr(e.args[0])}, {self.expr(e.args[1])})", PRIMARY

    def c_bitcast(self, e: L.Intrinsic) -> tuple[str, int]:
        x = e.args[0]
        src, dst = x.dtype, e.dtype
        if src == dst:
            return self.p(x)
        if src.is_int and dst.is_int:
            return f"({dst.c_compute}){self.wrap(x, UNARY)}", UNARY
        v = self.expr(x)
        # the bits of x as an unsigned integer of its width
        bits = {"f32": f"__float_as_uint({v})", "f64": f"__double_as_longlong({v})",
                "f16": f"__half_as_ushort(__float2half_rn({v}))",
                "bf16": f"__bfloat16_as_ushort(__float2bfloat16_rn({v}))"}.get(src.name)
        if bits is None:
            bits = self._as(x, _BITS_TYPE[src.bits])
        if dst.is_int:
            native = "long long" if src.name == "f64" else _BITS_TYPE[src.bits]
            return (bits, PRIMARY) if native == dst.c_compute else (f"({dst.c_compute}){bits}", UNARY)
        if dst.name == "f32":
            return f"__uint_as_float({bits if src.is_float else self._as(x, 'unsigned int')})", PRIMARY
        if dst.name == "f64":
            return f"__longlong_as_double({bits if src.is_float else self._as(x, 'long long')})", PRIMARY
        half = "__ushort_as_half" if dst.name == "f16" else "__ushort_as_bfloat16"
        back = "__half2float" if dst.name == "f16" else "__bfloat162float"
        return f"{back}({half}({bits}))", PRIMARY

    def c_warp_reduce(self, e: L.Collective) -> str:
        ty = e.dtype
        text = f"{BUILTINS[e.op].cuda}({self.expr(e.args[0])})"
        r = round_fn(ty)
        if r:
            return f"{r}({text})"
        return f"(({ty.c_compute}){text})" if ty.is_int and ty.bits < 32 else text

    def c_shuffle(self, e: L.Collective) -> str:
        ty = e.dtype
        f = BUILTINS[e.op].cuda
        v, lane = self.expr(e.args[0]), self.expr(e.args[1])
        if ty.kind == "bool" or (ty.is_int and ty.bits < 32):
            inner = f"{f}(0xffffffffu, (int)({v}), {lane})"
            return f"(({ty.c_compute})({inner}))" if ty.kind != "bool" else f"({inner} != 0)"
        return f"{f}(0xffffffffu, {v}, {lane})"

    def c_warp_vote(self, e: L.Collective) -> str:
        p = e.args[0]
        pred = self.expr(p) if p.dtype.kind == "bool" else f"({self.expr(p)}) != 0"
        text = f"{BUILTINS[e.op].cuda}(0xffffffffu, {pred})"
        return text if e.op == "warp_ballot" else f"({text} != 0)"

    def c_group_reduce(self, e: L.Collective) -> str:
        ty = e.dtype
        ct = "int" if ty.is_int and ty.bits < 32 else ty.c_compute
        text = f"{BUILTINS[e.op].cuda}<{self.fn.tile_count}, {ct}>({self.expr(e.args[0])}, tsr_reduce_scratch)"
        r = round_fn(ty)
        if r:
            return f"{r}({text})"
        return f"(({ty.c_compute})({text}))" if ty.is_int and ty.bits < 32 else text

    def p_Atomic(self, e: L.Atomic) -> tuple[str, int]:
        name, elem = e.op, e.dtype
        suffix = SCOPE_SUFFIX[e.scope]
        addr = self.address(e.buf, e.index, "atomic")  # check_bounds: through the race detector
        vals = [self.expr(v) for v in e.args]
        if elem.is_half:
            op = {"atomic_add": "add", "atomic_sub": "sub", "atomic_exch": "exch"}[name]
            return f"tsr_atomic_{op}{suffix}_{elem.name}({addr}, {', '.join(vals)})", PRIMARY
        if elem.is_float and name in ("atomic_max", "atomic_min", "atomic_cas"):
            return f"tsr_{name}{suffix}({addr}, {', '.join(vals)})", PRIMARY
        if elem.name == "f64" and name == "atomic_exch":
            return (f"__longlong_as_double((long long)atomicExch{suffix}(({_U64}*){addr}, "
                    f"({_U64})__double_as_longlong({vals[0]})))"), PRIMARY
        if elem.is_float and name == "atomic_sub":
            return f"atomicAdd{suffix}({addr}, -({vals[0]}))", PRIMARY
        cname = BUILTINS[name].cuda + suffix
        if elem.name in ("i64", "u64") and not (elem.name == "i64" and name in ("atomic_max", "atomic_min")):
            if name == "atomic_sub":
                cname, vals = "atomicAdd" + suffix, [f"0ull - ({_U64})({vals[0]})"]
            cast_vals = ", ".join(f"({_U64})({v})" if not v.startswith("0ull") else v for v in vals)
            text = f"{cname}(({_U64}*){addr}, {cast_vals})"
            return (f"(long long){text}", UNARY) if elem.name == "i64" else (text, PRIMARY)
        return f"{cname}({addr}, {', '.join(vals)})", PRIMARY
