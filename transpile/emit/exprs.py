"""The one printer from lowered-IR expressions to C expressions.

`CPrinter.p(e)` returns the C text of `e` and the C precedence of that text; a parent adds
parentheses from the precedence of what was actually printed (an elided conversion passes its
operand's precedence on). Values of `f16`/`bf16` are `float` in C expressions: loads from memory
convert (`__half2float`), stores round (`__float2half_rn`), and every f16/bf16 operation rounds its
result back (`tsr_round_f16`), so results match the GPU's and NumPy's. Integers narrower than 32 bits
are computed in `int` and wrapped back after each operation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from tessera.base.dtypes import F32, I32, ScalarType, c_literal
from tessera.base.irnode import ir_node
from tessera.transpile.emit.builtin_calls import BuiltinPrinter
from tessera.transpile.emit.terms import (
    ADD,
    BIN_PREC,
    CMP_PREC,
    COND,
    EQ,
    LAND,
    LOR,
    MUL,
    PRIMARY,
    SHIFT,
    UNARY,
    c_string,
    convert_fn,
    load_fn,
    nonzero_literal,
    round_fn,
    store_fn,
)
from tessera.transpile.lir import nodes as L
from tessera.transpile.names import c_ident, var_name

_CHECKED = {"+": "add", "-": "sub", "*": "mul"}


@ir_node
class Context:
    """What the printer needs besides the function: C names of module-level things and the types
    the named constants are declared with, and the compile options that change expressions."""

    names: Mapping[str, str]          # module constants, tables, functions -> C names
    declared: Mapping[str, ScalarType]  # module constants and const parameters -> their C type
    buffers: Mapping[str, L.Buffer]   # the function's buffers and the module's tables
    check_bounds: bool = False


class CPrinter(BuiltinPrinter):
    """Prints expressions of one function (the builtins through BuiltinPrinter)."""

    def __init__(self, fn: L.Function, ctx: Context) -> None:
        self.fn = fn
        self.ctx = ctx
        self.tile = fn.tile
        # In a map kernel's loop (emit/maps.py): the C lvalue of each tensor's element being computed.
        self.elements: dict[str, str] = {}
        # Arrays whose elements are reached under another C name (region mode's shared arrays:
        # members of the group's struct, transpile/cpu/group_memory.py).
        self.array_names: dict[str, str] = {}
        # In a whole-fragment statement (emit/frag_common.with_fragments): float `/` is `tsr_fdiv`.
        self.in_fragment = False

    def inline_division(self, ty: ScalarType) -> bool:
        """Whether `/` of type `ty` prints as `tsr_fdiv` (device/fdiv.cuh): the same IEEE division
        with no call, where a fragment statement divides each of the lane's elements."""
        return self.in_fragment and ty.c_compute == "float"

    def expr(self, e: L.Expr) -> str:
        return self.p(e)[0]

    def wrap(self, e: L.Expr, prec: int) -> str:
        text, p = self.p(e)
        return f"({text})" if p < prec else text

    def p(self, e: L.Expr) -> tuple[str, int]:
        method = getattr(self, "p_" + type(e).__name__)
        return method(e)

    # ---- leaves
    def p_Const(self, e: L.Const) -> tuple[str, int]:
        if e.name is not None and e.name in self.ctx.declared:
            declared = self.ctx.declared[e.name]
            name = self.ctx.names.get(e.name, c_ident(e.name))
            if declared == e.dtype or (declared.is_int and e.dtype.is_int and declared.c_compute == e.dtype.c_compute):
                return name, PRIMARY
            if declared.is_int and e.dtype.is_int:
                # A constant used as another integer type (`K * K` next to an i64 is i64): C would
                # compute in the declared type (int) and overflow; the value fits the type it takes.
                return f"({e.dtype.c_compute}){name}", UNARY
            if declared.is_int and e.dtype.name in ("f32", "f64") and abs(int(e.value)) < 2 ** 24:
                return f"({e.dtype.c_compute}){name}", UNARY
        text = c_literal(e.value, e.dtype)
        return text, PRIMARY if not text.startswith(("(", "-")) else UNARY

    def p_Var(self, e: L.Var) -> tuple[str, int]:
        return var_name(e.name), PRIMARY

    # ---- operators
    def finish(self, text: str, prec: int, ty: ScalarType) -> tuple[str, int]:
        """Round f16/bf16 results and wrap narrow integers after an operation."""
        r = round_fn(ty)
        if r:
            return f"{r}({text})", PRIMARY
        if ty.is_int and ty.bits < 32:
            return f"({ty.c_compute})({text})", UNARY
        return text, prec

    def p_Unary(self, e: L.Unary) -> tuple[str, int]:
        if e.op == "not":
            return "!" + self.wrap(e.x, UNARY), UNARY
        if e.op == "-" and self.overflow_checked(e.dtype):
            return f"tsr_checked_neg({self.expr(e.x)}, {c_string(self.fn.name)}, {self.line})", PRIMARY
        inner = self.wrap(e.x, UNARY)
        if e.op == "-" and inner.startswith("-"):
            inner = f"({inner})"
        return self.finish(f"{e.op}{inner}", UNARY, e.dtype)

    def p_Binary(self, e: L.Binary) -> tuple[str, int]:
        ty, op = e.dtype, e.op
        if op in ("<<", ">>"):
            return self.finish(f"{self.wrap(e.a, SHIFT)} {op} {self.wrap(e.b, SHIFT + 1)}", SHIFT, ty)
        if op in ("/", "//") and self.inline_division(ty):
            quotient = f"tsr_fdiv({self.expr(e.a)}, {self.expr(e.b)})"
            return self.finish(quotient if op == "/" else f"floorf({quotient})", PRIMARY, ty)
        if ty.is_float and op == "//":
            f = "floor" if ty.name == "f64" else "floorf"
            return self.finish(f"{f}({self.wrap(e.a, MUL)} / {self.wrap(e.b, MUL + 1)})", PRIMARY, ty)
        if ty.is_float and op == "%":
            f = "fmod" if ty.name == "f64" else "fmodf"
            return self.finish(f"{f}({self.expr(e.a)}, {self.expr(e.b)})", PRIMARY, ty)
        if ty.is_int and op in ("//", "%") and not nonzero_literal(e.b):
            # A divisor that may be 0 (or -1): the GPU gives some value, the host would trap.
            # Narrow integers are divided as int (their values fit), like C's promotions.
            f = "tsr_div" if op == "//" else "tsr_mod"
            ct = "int" if ty.bits < 32 else ty.c_compute
            return self.finish(f"{f}<{ct}>({self.expr(e.a)}, {self.expr(e.b)})", PRIMARY, ty)
        if op in _CHECKED and self.overflow_checked(ty):
            return (f"tsr_checked_{_CHECKED[op]}({self.expr(e.a)}, {self.expr(e.b)}, {c_string(self.fn.name)}, "
                    f"{self.line})"), PRIMARY
        prec = BIN_PREC[op]
        c_op = "/" if op == "//" else op
        left = self.wrap(e.a, prec)
        if op == "*" and ty.is_int and ty.bits < 32:
            # C promotes narrow operands to int, where 65535 * 65535 overflows (undefined);
            # unsigned arithmetic gives the same low bits, which is all the conversion keeps.
            left = f"(unsigned){self.wrap(e.a, UNARY)}"
        return self.finish(f"{left} {c_op} {self.wrap(e.b, prec + 1)}", prec, ty)

    def overflow_checked(self, ty: ScalarType) -> bool:
        """i32/i64 + - * report overflow in check_bounds builds (C leaves it undefined)."""
        return self.ctx.check_bounds and ty.kind == "int" and ty.bits >= 32

    def p_Compare(self, e: L.Compare) -> tuple[str, int]:
        prec = CMP_PREC[e.op]
        return f"{self.wrap(e.a, prec)} {e.op} {self.wrap(e.b, prec + 1)}", prec

    def p_Logical(self, e: L.Logical) -> tuple[str, int]:
        prec = LAND if e.op == "and" else LOR
        c_op = "&&" if e.op == "and" else "||"
        return f"{self.wrap(e.a, prec)} {c_op} {self.wrap(e.b, prec + 1)}", prec

    def p_Select(self, e: L.Select) -> tuple[str, int]:
        return f"{self.wrap(e.cond, LOR)} ? {self.wrap(e.a, COND)} : {self.wrap(e.b, COND)}", COND

    def p_Cast(self, e: L.Cast) -> tuple[str, int]:
        src, ty = e.x.dtype, e.dtype
        if ty.kind == "bool":
            if src.kind == "bool":
                return self.p(e.x)
            return f"{self.wrap(e.x, EQ)} != 0", EQ
        if ty.is_int and src.is_float:
            return f"tsr_f2i<{ty.c_compute}>({self.expr(e.x)})", PRIMARY
        r = round_fn(ty)
        if r:
            if src.is_half and src.name == ty.name:
                return self.p(e.x)
            direct = convert_fn(src, ty)
            if direct:
                return f"{load_fn(ty)}({direct}({self.expr(e.x)}))", PRIMARY
            inner = self.expr(e.x) if src.c_compute == "float" else f"(float)({self.expr(e.x)})"
            return f"{r}({inner})", PRIMARY
        if src.c_compute == ty.c_compute:
            return self.p(e.x)  # the same C type: nothing to print, and the operand's precedence
        return f"({ty.c_compute}){self.wrap(e.x, UNARY)}", UNARY

    def cast_to(self, e: L.Expr, ty: ScalarType) -> str:
        """`e` converted to `ty` for a context that needs that C type."""
        return self.expr(e) if e.dtype == ty else self.p_Cast(L.Cast(e, ty))[0]

    def p_Affine(self, e: L.Affine) -> tuple[str, int]:
        """An index prints as written: its affine form is for the passes (rewriting signed
        arithmetic in C could overflow where the program does not)."""
        return self.p(e.source)

    # ---- memory
    def p_Load(self, e: L.Load) -> tuple[str, int]:
        buf = self.ctx.buffers[e.buf]
        text = self.access(e.buf, e.index, "read")
        f = load_fn(buf.elem) if buf.space in ("global", "shared", "ref", "frag") else None  # frag: f16/bf16 operands
        return (f"{f}({text})", PRIMARY) if f else (text, PRIMARY)

    def element(self, name: str, index: tuple[L.Expr, ...]) -> str:
        """The C lvalue of an element (no f16 conversion)."""
        if not index:
            return self.elements[name]
        buf = self.ctx.buffers[name]
        cname = self.ctx.names.get(name, c_ident(name)) if buf.space == "const" else c_ident(name)
        cname = self.array_names.get(name, cname)
        if buf.space == "global":
            idx = [self.checked(i, d, name, k) for k, (i, d) in enumerate(zip(index, buf.shape))]
            return f"{cname}[{self.flat_index(idx, buf.shape)}]"
        if buf.space == "shared" and not all(isinstance(d, L.Const) for d in buf.shape):  # sized at launch
            idx = [self.checked(i, d, name, k) for k, (i, d) in enumerate(zip(index, buf.shape))]
            return f"{cname}[{self.flat_index(idx, padded_dims(buf))}]"
        if buf.space == "ref":  # an array parameter: a pointer and the caller's row strides (in elements)
            parts = []
            for k, (i, d) in enumerate(zip(index, buf.shape)):
                text, prec = self.checked(i, d, name, k)
                if k + 1 < len(index):
                    parts.append(f"{text if prec >= MUL else f'({text})'} * {stride_name(name, k)}")
                else:
                    parts.append(text if prec > ADD else f"({text})")
            return f"{cname}[{' + '.join(parts)}]"
        return cname + "".join(f"[{self.checked(i, d, name, k)[0]}]" for k, (i, d) in enumerate(zip(index, buf.shape)))

    def access(self, name: str, index: tuple[L.Expr, ...], how: str) -> str:
        """An element, routed through the race detector for shared arrays under check_bounds."""
        if self.ctx.check_bounds and self.ctx.buffers[name].space in ("shared", "ref"):
            return f"(*{self.address(name, index, how)})"
        return self.element(name, index)

    def address(self, name: str, index: tuple[L.Expr, ...], how: str) -> str:
        """An element's address, routed through the race detector (`tsr_race_<how>`: read, write,
        atomic) for shared arrays under check_bounds."""
        text = self.element(name, index)
        space = self.ctx.buffers[name].space
        if self.ctx.check_bounds and space == "shared":
            return f"tsr_race_{how}(&{text}, {self.line})"
        if self.ctx.check_bounds and space == "ref":  # shared memory only when the caller passed some
            return f"({shared_flag_name(name)} ? tsr_race_{how}(&{text}, {self.line}) : &{text})"
        return f"&{text}"

    def checked(self, i: L.Expr, extent: L.Expr, array: str, dim: int) -> tuple[str, int]:
        """An index, wrapped in a bounds check when compiling with check_bounds."""
        if not self.ctx.check_bounds:
            return self.p(i)
        return (f"tsr_check_index({self.expr(i)}, {self.expr(extent)}, {c_string(self.fn.name)}, "
                f"{c_string(array)}, {dim}, {self.line})"), PRIMARY

    line = 0  # the .tsr line of the statement being printed (for run-time checks)

    def flat_index(self, indices: list[tuple[str, int]], dims: tuple[L.Expr, ...]) -> str:
        text, prec = indices[0]
        for (i, iprec), d in zip(indices[1:], dims[1:]):
            dim = self.wrap(d, MUL + 1)
            left = text if prec >= MUL else f"({text})"
            text, prec = f"{left} * {dim} + {i if iprec > ADD else f'({i})'}", ADD
        return text

    def p_Call(self, e: L.Call, outs: tuple[L.Var, ...] = ()) -> tuple[str, int]:
        name = self.ctx.names.get(e.func, c_ident(e.func))
        args = [self.argument(a) for a in e.args] + [f"&{var_name(v.name)}" for v in outs]
        return f"{name}({', '.join(args)})", PRIMARY

    def argument(self, a: L.Expr) -> str:
        """An argument of a device function; an array is its first element's address, its row
        strides in elements (shared arrays: padded rows) and, in check_bounds builds, whether it is
        in shared memory (for the race detector)."""
        if not isinstance(a, L.ArrayArg):
            return self.expr(a)
        buf = self.ctx.buffers[a.buf]
        name = c_ident(a.buf)
        rank = len(buf.shape)
        if buf.space == "ref":
            parts = [name, *(stride_name(a.buf, k) for k in range(rank - 1))]
            shared = shared_flag_name(a.buf)
        elif buf.space == "shared" and not all(isinstance(d, L.Const) for d in buf.shape):  # sized at launch
            rows = padded_dims(buf)  # a flat pointer
            parts = [name, *(" * ".join(self.wrap(d, MUL + 1) for d in rows[k + 1:]) for k in range(rank - 1))]
            shared = "true"
        elif buf.space == "shared":  # a pipelined array: the stage its loop reads (`index`)
            phys = [int(d.value) for d in buf.shape[len(a.index):]]  # type: ignore[union-attr]
            phys[-1] += buf.pad
            stage = "".join(f"[{self.expr(i)}]" for i in a.index)
            parts = [f"&{name}{stage}{'[0]' * len(phys)}", *(str(math.prod(phys[k + 1:])) for k in range(len(phys) - 1))]
            shared = "true"
        else:
            parts = [name, *(" * ".join(self.wrap(d, MUL + 1) for d in buf.shape[k + 1:]) for k in range(rank - 1))]
            shared = "false"
        if self.ctx.check_bounds:
            parts.append(shared)
        return ", ".join(parts)

    def printf_arg(self, a: L.Expr) -> str:
        ty = a.dtype
        if ty.is_float:
            return f"(double)({self.expr(a)})"
        if ty.bits == 64:
            return f"({'unsigned long long' if ty.kind == 'uint' else 'long long'})({self.expr(a)})"
        return f"({'unsigned' if ty.kind == 'uint' else 'int'})({self.expr(a)})"

    def stored(self, value: L.Expr, elem: ScalarType) -> str:
        """A value stored to memory of element type `elem`; f16/bf16 stores round once."""
        f = store_fn(elem)
        if f is None:
            return self.cast_to(value, elem)
        direct = convert_fn(value.dtype, elem)
        if direct:
            return f"{direct}({self.expr(value)})"
        text = self.expr(value) if value.dtype.c_compute == "float" else self.cast_to(value, F32)
        return f"{f}({text})"


def padded_dims(buf: L.Buffer) -> tuple[L.Expr, ...]:
    """The extents of a launch-sized shared array as laid out: the last one plus the padding (a
    sum that check_bounds builds check for overflow: header_parts.padded_sum)."""
    last = L.Binary("+", buf.shape[-1], L.Const(buf.pad, I32), I32) if buf.pad else buf.shape[-1]
    return (*buf.shape[:-1], last)


def stride_name(array: str, dim: int) -> str:
    """The C name of an array parameter's stride (in elements) of dimension `dim` (not the last)."""
    return f"tsr_stride{dim}_{c_ident(array)}"


def shared_flag_name(array: str) -> str:
    """The C name of an array parameter's flag: the caller passed a shared array (check_bounds builds)."""
    return f"tsr_shared_{c_ident(array)}"
