"""What the emitted C computes for each scalar operation of each type, on compile-time values: the
one definition of run-time semantics that constant folding uses (the constant evaluator,
transpile/consts.py, and the fold-constants pass, transpile/lir/fold.py), so that a folded value
equals the value the program computes at run time on either backend (docs/language.md 6.3, 7.4).

A value of a type is a `bool` for bool, an `int` in the type's range for an integer type, and a
`float` holding a value of the type for a float type (an f16 value is a double that f16 can hold).

- Integers narrower than 32 bits are computed in `int` and wrapped back after each operation (as
  the C does); unsigned types wrap; `i32`/`i64` `+ - *`, unary `-`, and `//` of the minimum value
  by -1 overflow (undefined in C). A shift's count must be below the width of the promoted type.
  `<<` on a signed type keeps the low bits (C++20, and what GCC and the GPU do).
- Floats follow IEEE 754 (a division by zero gives an infinity or NaN, `%` is `fmod`, `//` is
  `floor(a / b)` with the sign of a zero kept); f16 and bf16 operations are computed in f32 and
  rounded back.
- Float to integer conversion truncates toward zero and saturates, NaN giving 0 (`tsr_f2i`).

What has no defined value raises `Undefined`, whose `overflow` says whether the value exists but
does not fit (`exact`, when known, is that value: the message shows it).
"""

from __future__ import annotations

import math

from tessera.base.dtypes import F32, ScalarType, int_range, round_to, wrap_int

Value = int | float | bool


class Undefined(Exception):
    """An operation without a defined value at run time."""

    def __init__(self, why: str, overflow: bool = False, exact: Value | None = None) -> None:
        super().__init__(why)
        self.why = why
        self.overflow = overflow
        self.exact = exact


def truthy(v: Value) -> bool:
    """C's test of a scalar: non-zero (NaN included) is true."""
    return v != 0 or (isinstance(v, float) and math.isnan(v))


def trunc_div(a: int, b: int) -> int:
    """C's integer `/`: the quotient truncated toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def trunc_mod(a: int, b: int) -> int:
    """C's integer `%`: the sign of `a`."""
    return a - trunc_div(a, b) * b


def convert(v: Value, src: ScalarType, dst: ScalarType) -> Value:
    """The value `v` of type `src` converted to `dst` as the emitted C converts it."""
    if dst.kind == "bool":
        return truthy(v)
    if dst.is_float:
        if src.is_float:
            return round_to(float(v), dst)
        return round_to(int(v), dst)
    if isinstance(v, float):  # saturating, NaN to 0, toward zero
        lo, hi = int_range(dst)
        if math.isnan(v):
            return 0
        if math.isinf(v):
            return hi if v > 0 else lo
        return max(lo, min(hi, int(v)))
    return wrap_int(int(v), dst)


def _fits(v: int, ty: ScalarType, op: str) -> int:
    """`v` in `ty`: wrapped, unless a signed i32/i64 result does not fit (undefined in C)."""
    lo, hi = int_range(ty)
    if ty.kind == "int" and ty.bits >= 32 and not lo <= v <= hi:
        raise Undefined(f"'{op}' overflows {ty}", overflow=True, exact=v)
    return wrap_int(v, ty)


def _int_binary(op: str, a: int, b: int, ty: ScalarType) -> int:
    if op == "+":
        return _fits(a + b, ty, op)
    if op == "-":
        return _fits(a - b, ty, op)
    if op == "*":
        return _fits(a * b, ty, op)
    if op in ("//", "%"):
        if b == 0:
            raise Undefined("integer division by zero")
        return _fits(trunc_div(a, b) if op == "//" else trunc_mod(a, b), ty, op)
    if op in ("&", "|", "^"):
        return wrap_int(a & b if op == "&" else a | b if op == "|" else a ^ b, ty)
    if op in ("<<", ">>"):
        width = max(ty.bits, 32)  # narrower types are shifted as int
        if not 0 <= b < width:
            raise Undefined(f"shift count {b} is out of range for {ty if ty.bits >= 32 else 'i32'} "
                            f"(0 to {width - 1})")
        return wrap_int(a << b if op == "<<" else a >> b, ty)
    raise Undefined(f"'{op}' of integers")


def _floor(q: float) -> float:
    """C's floor: exact, the sign of a zero kept (floor(-0.25) is -1.0, floor(-0.0) is -0.0)."""
    if not math.isfinite(q):
        return q
    r = float(math.floor(q))
    return math.copysign(r, q) if r == 0.0 else r


def _divide(a: float, b: float) -> float:
    if b != 0.0:
        return a / b
    if math.isnan(a) or a == 0.0:
        return math.nan
    return math.inf if (a < 0) == (math.copysign(1.0, b) < 0) else -math.inf


def _fmod(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b) or math.isinf(a) or b == 0.0:
        return math.nan
    return math.fmod(a, b)  # exact; fmod(a, inf) is a


def _float_binary(op: str, a: float, b: float, ty: ScalarType) -> float:
    """`a op b` in `ty`: f32 and f64 correctly rounded (a double operation on f32 operands, rounded
    once to f32, is); f16 and bf16 computed in f32 and rounded back, as the emitted C does."""
    work = ty if ty.name in ("f32", "f64") else F32
    if op == "+":
        r = a + b
    elif op == "-":
        r = a - b
    elif op == "*":
        r = a * b
    elif op == "/":
        r = _divide(a, b)
    elif op == "//":
        r = _floor(round_to(_divide(a, b), work))
    elif op == "%":
        r = _fmod(a, b)
    else:
        raise Undefined(f"'{op}' needs integer operands")
    return round_to(round_to(r, work), ty)


def binary(op: str, a: Value, b: Value, ty: ScalarType) -> Value:
    """`a op b` for an arithmetic, bitwise or shift operator whose result has type `ty`; both
    operands are values of `ty`, except a shift count, which is any integer."""
    if ty.is_float:
        return _float_binary(op, float(a), float(b), ty)
    if ty.kind == "bool":
        raise Undefined(f"'{op}' of bool")
    return _int_binary(op, int(a), int(b), ty)


def unary(op: str, v: Value, ty: ScalarType) -> Value:
    """`op v` for a unary operator (`-`, `+`, `~`, `not`) on a value of `ty`, the result's type."""
    if op == "not":
        return not truthy(v)
    if op == "+":
        return v
    if ty.is_float:
        if op != "-":
            raise Undefined(f"'{op}' needs an integer operand")
        return -float(v)
    if op == "-":
        return _fits(-int(v), ty, op)
    return wrap_int(~int(v), ty)


def compare(op: str, a: Value, b: Value) -> bool:
    """A comparison of two values of one type (NaN compares unequal to everything)."""
    if op == "<":
        return a < b
    if op == "<=":
        return a <= b
    if op == ">":
        return a > b
    if op == ">=":
        return a >= b
    return a == b if op == "==" else a != b


def absolute(v: Value, ty: ScalarType) -> Value:
    """`abs(v)`: `fabs` for floats (the sign bit cleared); integers wrap (`abs` of the minimum
    value is the minimum value, as on the GPU)."""
    if ty.is_float:
        return math.copysign(float(v), 1.0)
    return wrap_int(abs(int(v)), ty)


def min_max(op: str, values: list[Value], ty: ScalarType) -> Value:
    """`min(...)` or `max(...)` of values of `ty`, folded left as the C nests them. Floats are
    `fminf`/`fmaxf`: a NaN argument is ignored (NaN only when all are); of a -0.0 and a 0.0 the
    C functions may return either, so that is `Undefined` here."""
    r = values[0]
    for x in values[1:]:
        if ty.is_float and math.isnan(float(x)):
            continue
        if ty.is_float and math.isnan(float(r)):
            r = x
        elif x == r and ty.is_float and math.copysign(1.0, float(x)) != math.copysign(1.0, float(r)):
            raise Undefined(f"the sign of {op}(-0.0, 0.0) is unspecified")
        elif (x < r) if op == "min" else (x > r):
            r = x
    return r

