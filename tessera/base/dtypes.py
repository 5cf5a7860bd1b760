"""Scalar types of .tsr and the typing rules between them (spec section 6).

`f16` and `bf16` are storage types: values of those types are computed in
`float` in the emitted C and rounded back after each operation.
"""

from __future__ import annotations

import math

from tessera.base.f32 import f32_text
from tessera.base.irnode import ir_node


@ir_node
class ScalarType:
    name: str      # .tsr spelling
    kind: str      # "bool" | "int" | "uint" | "float"
    bits: int
    c_storage: str  # C type in memory
    c_compute: str  # C type of a value in an expression
    numpy: str      # NumPy dtype name

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_numeric(self) -> bool:
        return self.kind != "bool"

    @property
    def is_half(self) -> bool:
        return self.name in ("f16", "bf16")

    @property
    def size(self) -> int:
        return max(1, self.bits // 8)

    @property
    def c_compute_size(self) -> int:
        """Bytes of a value held in its compute type (f16/bf16 tables hold floats)."""
        return 4 if self.is_half else self.size

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return self.name


def _t(name: str, kind: str, bits: int, storage: str, compute: str | None = None, numpy: str | None = None) -> ScalarType:
    return ScalarType(name, kind, bits, storage, compute or storage, numpy or name)


SCALARS: dict[str, ScalarType] = {
    t.name: t
    for t in (
        _t("bool", "bool", 8, "bool", numpy="bool"),
        _t("i8", "int", 8, "signed char", numpy="int8"),
        _t("i16", "int", 16, "short", numpy="int16"),
        _t("i32", "int", 32, "int", numpy="int32"),
        _t("i64", "int", 64, "long long", numpy="int64"),
        _t("u8", "uint", 8, "unsigned char", numpy="uint8"),
        _t("u16", "uint", 16, "unsigned short", numpy="uint16"),
        _t("u32", "uint", 32, "unsigned int", numpy="uint32"),
        _t("u64", "uint", 64, "unsigned long long", numpy="uint64"),
        _t("f16", "float", 16, "__half", "float", numpy="float16"),
        _t("bf16", "float", 16, "__nv_bfloat16", "float", numpy="bfloat16"),
        _t("f32", "float", 32, "float", numpy="float32"),
        _t("f64", "float", 64, "double", numpy="float64"),
    )
}

BOOL = SCALARS["bool"]
I32 = SCALARS["i32"]
I64 = SCALARS["i64"]
F32 = SCALARS["f32"]
F64 = SCALARS["f64"]


def promote(a: ScalarType, b: ScalarType) -> ScalarType:
    """The wider type wins; an integer with a float gives the float; f16 with bf16 gives f32; a
    bool next to a number counts as an i32 (docs/language.md 7.4, rule 6)."""
    if a == b:
        return a
    if a.kind == "bool" or b.kind == "bool":
        return promote(I32 if a.kind == "bool" else a, I32 if b.kind == "bool" else b)
    if a.is_float or b.is_float:
        if not (a.is_float and b.is_float):
            return a if a.is_float else b
        if a.bits != b.bits:
            return a if a.bits > b.bits else b
        return F32  # f16 with bf16
    if a.bits != b.bits:
        return a if a.bits > b.bits else b
    # Same width, mixed signedness: C's rule (the unsigned type).
    return a if a.kind == "uint" else b


def operand_types(op: str, ta: ScalarType, weak_a: bool, tb: ScalarType,
                  weak_b: bool) -> tuple[ScalarType, ScalarType, ScalarType] | str:
    """The typing rule of a binary operator or comparison (docs/language.md 7.4) for operands of
    types `ta` and `tb` (`weak_*`: made of literals only): the types the two operands are computed
    in (a literal takes the other operand's type) and the type of the result, to which both convert
    (a shift's count keeps its own); or why the operation is an error.
    The type checker and the constant evaluator both follow it."""
    if weak_a and not weak_b and literal_adopts(ta, tb):
        ta = tb
    elif weak_b and not weak_a and literal_adopts(tb, ta):
        tb = ta
    if op in ("&", "|", "^", "<<", ">>"):
        for t in (ta, tb):
            if not t.is_int:
                hint = "; for booleans use 'and', 'or' or '!='" if t.kind == "bool" else ""
                return f"'{op}' needs integer operands, not {t}{hint}"
        if op in ("<<", ">>"):
            return ta, tb, ta if ta.bits >= 32 else I32
    res = promote(ta, tb)
    if op == "/" and not res.is_float:
        return ("'/' of two integers is not allowed; use '//' for integer division, "
                "or cast an operand to a float type (f32(x))")
    if res.kind == "bool":
        res = I32  # bool arithmetic is i32 (a comparison compares in promote() of the two types)
    if weak_a and ta != res and literal_adopts(ta, res):
        ta = res
    if weak_b and tb != res and literal_adopts(tb, res):
        tb = res
    return ta, tb, res


def common_type(types: list[ScalarType], weak: list[bool]) -> ScalarType:
    """The type that the arguments of `min`, `max`, `pow` and `fma` convert to: the promotion of
    the non-literal ones; a literal the others' type cannot hold (2.5 next to an i32) widens it, as
    with operators; literals alone promote among themselves."""
    strong = [t for t, w in zip(types, weak) if not w]
    ty = strong[0] if strong else types[0]
    for t in strong[1:]:
        ty = promote(ty, t)
    for i, (t, w) in enumerate(zip(types, weak)):
        if (not strong and i > 0) or (w and not literal_adopts(t, ty)):
            ty = promote(ty, t)
    return ty


def literal_adopts(lit: ScalarType, other: ScalarType) -> bool:
    """Whether a literal of type `lit` takes the type of the other operand."""
    if other.kind == "bool":
        return False
    if lit.is_float:
        return other.is_float
    return other.is_numeric


def c_literal(value: int | float | bool, ty: ScalarType) -> str:
    """A C literal of `value` in compute type of `ty`."""
    if ty.kind == "bool":
        return "true" if value else "false"
    if ty.is_float:
        v = round_to(float(value), ty)
        if v != v:
            return "__int_as_float(0x7fffffff)" if ty.bits <= 32 else "__longlong_as_double(0x7ff8000000000000LL)"
        if v in (float("inf"), float("-inf")):
            sign = "-" if v < 0 else ""
            return f"{sign}__int_as_float(0x7f800000)" if ty.bits <= 32 else f"{sign}__longlong_as_double(0x7ff0000000000000LL)"
        text = repr(v) if ty.bits == 64 else f32_text(v)
        if "e" not in text and "." not in text:
            text += ".0"
        return text if ty.bits == 64 else text + "f"
    v = int(value)
    if ty.kind == "uint":
        return f"{v}u" if ty.bits <= 32 else f"{v}ull"
    if ty.bits == 64:
        return f"{v}ll" if v != -(2**63) else "(-9223372036854775807ll - 1)"
    if v == -(2**31):
        return "(-2147483647 - 1)"
    return str(v)


# (precision in bits with the leading one, exponent of the smallest normal, exponent of the largest)
_FORMATS = {"f16": (11, -14, 15), "bf16": (8, -126, 127), "f32": (24, -126, 127), "f64": (53, -1022, 1023)}


def round_to(v: float | int, ty: ScalarType) -> float:
    """`v` (a double, or an exact integer) rounded once, to nearest even, to the float type `ty`,
    +-inf where it overflows: a literal that takes the type f16 has an f16 value, as it would after
    a store, one of type f32 the value of the C literal, and an integer the value of C's (and
    CUDA's `__ll2half_rn`, `__double2bfloat16`) conversion. The sign of zero, inf and NaN are kept."""
    if isinstance(v, int) and not isinstance(v, bool):
        return _round_int(v, ty)
    v = float(v)
    if ty.name not in _FORMATS or ty.name == "f64" or v == 0.0 or not math.isfinite(v):
        return v
    p, emin, emax = _FORMATS[ty.name]
    _, e = math.frexp(v)  # |v| = m * 2**e with 0.5 <= m < 1: the leading bit is 2**(e - 1)
    quantum = max(e - 1, emin) - (p - 1)
    n = round(math.ldexp(abs(v), -quantum))  # exact scaling; round() ties to even
    return _finish(n, quantum, emax, v < 0)


def _round_int(v: int, ty: ScalarType) -> float:
    p, emin, emax = _FORMATS[ty.name]
    a = abs(v)
    quantum = max(a.bit_length() - 1, emin) - (p - 1)
    if quantum <= 0:
        return float(v)  # exact
    q, r = divmod(a, 1 << quantum)
    half = 1 << (quantum - 1)
    if r > half or (r == half and q & 1):
        q += 1
    return _finish(q, quantum, emax, v < 0)


def _finish(n: int, quantum: int, emax: int, negative: bool) -> float:
    if n.bit_length() + quantum > emax + 1:
        return -math.inf if negative else math.inf
    r = math.ldexp(float(n), quantum)
    return -r if negative else r


def int_range(ty: ScalarType) -> tuple[int, int]:
    if ty.kind == "bool":
        return 0, 1
    if ty.kind == "uint":
        return 0, 2**ty.bits - 1
    return -(2 ** (ty.bits - 1)), 2 ** (ty.bits - 1) - 1


def wrap_int(value: int, ty: ScalarType) -> int:
    """Two's complement wrap of `value` to `ty` (integer overflow wraps, as on the GPU)."""
    lo, hi = int_range(ty)
    span = hi - lo + 1
    return (value - lo) % span + lo
