"""Scalar types of .tsr and the typing rules between them (spec section 6).

`f16` and `bf16` are storage types: values of those types are computed in
`float` in the emitted C and rounded back after each operation.
"""

from __future__ import annotations

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


def promote(a: ScalarType, b: ScalarType) -> ScalarType:
    """The wider type wins; an integer with a float gives the float; f16 with bf16 gives f32."""
    if a == b:
        return a
    if a.is_float or b.is_float:
        if not (a.is_float and b.is_float):
            return a if a.is_float else b
        if a.bits != b.bits:
            return a if a.bits > b.bits else b
        return F32  # f16 with bf16
    if a.kind == "bool":
        return b if b.kind != "bool" else a
    if b.kind == "bool":
        return a
    if a.bits != b.bits:
        return a if a.bits > b.bits else b
    # Same width, mixed signedness: C's rule (the unsigned type).
    return a if a.kind == "uint" else b


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


def round_to(v: float, ty: ScalarType) -> float:
    """`v` rounded (to nearest even) to a float type: a literal that takes the type f16 has an
    f16 value, as it would after a store, and one of type f32 the value of the C literal."""
    import struct

    if ty.name == "f32":
        try:
            return struct.unpack("<f", struct.pack("<f", v))[0]
        except OverflowError:
            return float("inf") if v > 0 else float("-inf")
    if ty.name == "f16":
        try:
            return struct.unpack("<e", struct.pack("<e", v))[0]
        except OverflowError:
            return float("inf") if v > 0 else float("-inf")
    if ty.name == "bf16":
        try:
            bits = struct.unpack("<I", struct.pack("<f", v))[0]
        except OverflowError:
            return float("inf") if v > 0 else float("-inf")
        if (bits & 0x7F800000) != 0x7F800000:
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]
    return v


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
