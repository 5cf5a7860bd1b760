"""Compile-time values: literals taking a type, `-D` values, module constants, and the range a
value needs to be of a type. The evaluator of constant expressions is transpile/const_eval.py.

A literal (or a module constant, which behaves like the literal of its value) has an exact value:
a Python int, a double, or a bool. `convert` gives it a type as the type checker's retyping does;
what the program computes with typed values is tessera.base.scalar_ops.
"""

from __future__ import annotations

import math
import re

from tessera.base.dtypes import F64, I64, SCALARS, ScalarType, int_range, round_to
from tessera.base.errors import Loc
from tessera.base.f32 import round_f32
from tessera.base.limits import MAX_CONST_BITS, int_literal_digits, leading_zeros, max_int_digits
from tessera.base.scalar_ops import convert as convert_value
from tessera.frontend import nodes as N

Value = int | float | bool


class NotConstant(Exception):
    """Why an expression has no compile-time value. `error` marks a constant expression that is
    wrong wherever it is written (an overflow, a literal that does not fit its type, a division by
    an integer zero), rather than one that is merely not a constant."""

    def __init__(self, loc: Loc | None, why: str = "", node: object = None, error: bool = False) -> None:
        super().__init__(why)
        self.loc = loc
        self.why = why
        self.node = node  # the name that is not a constant, when that is the reason
        self.error = error


OVERFLOW_INT = f"constant expression overflows: its value needs more than {MAX_CONST_BITS} bits"
OVERFLOW_FLOAT = "constant expression overflows the float range"


def convert(v: Value, ty: ScalarType) -> Value:
    """The literal value `v` as a `ty`, as a literal that takes the type `ty` has it: an integer
    wraps (a literal that does not fit is reported by the checker) or is rounded once to a float
    type; a float stays the literal's double for a float type (printing and folding round it) and
    converts as a double to an integer type; a number is a bool when it is not 0."""
    if ty.kind == "bool":
        return bool(v != 0 or (isinstance(v, float) and math.isnan(v)))
    if isinstance(v, bool):
        v = int(v)
    if ty.is_float:
        return float(v) if isinstance(v, float) else round_to(v, ty)
    return convert_value(v, F64, ty) if isinstance(v, float) else convert_value(v, I64, ty)


def value_range_error(v: Value, ty: ScalarType) -> str | None:
    """Why the compile-time value `v` cannot be a `ty` in the emitted C, or None when it can."""
    if isinstance(v, bool) or ty.kind == "bool":
        return None
    if ty.is_int and isinstance(v, int):
        lo, hi = int_range(ty)
        if not lo <= v <= hi:
            return f"{v} does not fit in {ty} ({lo} to {hi})"
    elif ty.is_float and ty.bits <= 32:  # f16 and bf16 values are computed in f32
        try:
            f = float(v)
        except OverflowError:
            return f"{v} is out of the f32 range"
        if math.isfinite(f):
            g = round_f32(f)
            if math.isinf(g):
                return f"{v!r} is out of the f32 range (at most about 3.4e38)"
            if f != 0.0 and g == 0.0:
                return f"{v!r} is too small for f32 (it would round to 0)"
    return None


def type_of_value(v: Value) -> ScalarType:
    """The type a module constant's value has where nothing gives it one: that of its literal, or
    f64 for a float that f32 cannot hold (the value of an f64 operation)."""
    if isinstance(v, bool):
        return SCALARS["bool"]
    if isinstance(v, int):
        return SCALARS["i32"] if -(2**31) <= v < 2**31 else SCALARS["u64"] if 2**63 <= v < 2**64 else SCALARS["i64"]
    return SCALARS["f32"] if value_range_error(v, SCALARS["f32"]) is None else F64


_INT_RE = re.compile(r"[+-]?(?:0[xX][0-9a-fA-F]+(?:_[0-9a-fA-F]+)*|0[bB][01]+(?:_[01]+)*|0[oO][0-7]+(?:_[0-7]+)*"
                     r"|[0-9]+(?:_[0-9]+)*)")
_FLOAT_RE = re.compile(r"[+-]?(?:(?:[0-9]+(?:_[0-9]+)*)?\.[0-9]+(?:_[0-9]+)*(?:[eE][+-]?[0-9]+)?"
                       r"|[0-9]+(?:_[0-9]+)*\.?[eE][+-]?[0-9]+|[0-9]+(?:_[0-9]+)*\.)")
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_define_value(text: str) -> Value:
    """A `-D` value: an integer, a float, or True/False. Anything else raises ValueError with
    the reason, to follow the value in a message."""
    t = text.strip()
    if t in ("True", "true"):
        return True
    if t in ("False", "false"):
        return False
    if _INT_RE.fullmatch(t):
        sign = -1 if t.startswith("-") else 1
        instead = leading_zeros(t.lstrip("+-"))
        if instead:
            raise ValueError(f"has leading zeros ({instead})")
        digits, base = int_literal_digits(t.lstrip("+-"))
        if len(digits) > max_int_digits(base):
            raise ValueError("does not fit in 64 bits")
        v = sign * int(digits, base)
        if not -(2**63) <= v < 2**64:
            raise ValueError("does not fit in 64 bits")
        return v
    if _FLOAT_RE.fullmatch(t):
        f = float(t.replace("_", ""))
        if not math.isfinite(f):
            raise ValueError("is out of the float range")
        return f
    raise ValueError("is not an integer, float, True or False")


def module_env(module: N.Module) -> dict[str, Value]:
    """The values of the module's constants (first definition of each name) after resolve-constants."""
    env: dict[str, Value] = {}
    for item in module.items:
        if isinstance(item, N.ConstDef) and item.folded is not None and item.name not in env:
            env[item.name] = item.folded
    return env
