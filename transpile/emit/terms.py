"""How things are spelled in the emitted C: precedence levels, string literals, variable names,
the f16/bf16 conversions. Shared by the expression and statement printers."""

from __future__ import annotations

from tessera.base.dtypes import ScalarType
from tessera.transpile.lir import nodes as L

# C precedence levels (higher binds tighter).
PRIMARY, UNARY, MUL, ADD, SHIFT, REL, EQ, BAND, BXOR, BOR, LAND, LOR, COND = 16, 15, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3
BIN_PREC = {"*": MUL, "/": MUL, "%": MUL, "//": MUL, "+": ADD, "-": ADD, "<<": SHIFT, ">>": SHIFT,
             "&": BAND, "^": BXOR, "|": BOR}
CMP_PREC = {"<": REL, "<=": REL, ">": REL, ">=": REL, "==": EQ, "!=": EQ}


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


_ONE_ROUNDING = {"f64": "double2", "i32": "int2", "u32": "uint2", "i64": "ll2", "u64": "ull2"}


def convert_fn(src: ScalarType, ty: ScalarType) -> str | None:
    """The CUDA conversion from `src` straight to f16/bf16 where going through `float` could round
    twice (f64 and 32/64-bit integers: `f16(1 + 2**-11 + 2**-40)` is 1 + 2**-10, not 1)."""
    key = _ONE_ROUNDING.get(src.name)
    if key is None or not ty.is_half:
        return None
    return f"__{key}{'half' if ty.name == 'f16' else 'bfloat16'}{'' if src.name == 'f64' else '_rn'}"


def nonzero_literal(e: L.Expr) -> bool:
    """A constant divisor other than 0 and -1 (with which C division cannot trap)."""
    return isinstance(e, L.Const) and not isinstance(e.value, (bool, float)) and e.value not in (0, -1)
