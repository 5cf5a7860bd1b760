"""Compile-time constants: evaluation of constant expressions, `-D` values, module constants.

Integer arithmetic follows the target (C): `//` and `%` truncate toward zero,
overflow wraps at 64 bits. A result of `None` means "not a constant". Every step is
bounded (`_checked`): an int of 2**128 or more, or a float overflow, is `NotConstant`
with the reason, never an exception from Python's arithmetic.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Mapping

from tessera.base.dtypes import SCALARS, ScalarType
from tessera.base.errors import Loc
from tessera.base.limits import MAX_CONST_BITS, MAX_INT_DIGITS, int_literal_digits
from tessera.frontend import nodes as N

Value = int | float | bool


class NotConstant(Exception):
    def __init__(self, loc, why: str = "", node: object = None) -> None:
        super().__init__(why)
        self.loc = loc
        self.why = why
        self.node = node  # the name that is not a constant, when that is the reason


def trunc_div(a: int, b: int) -> int:
    """C's integer `/`: the quotient truncated toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def trunc_mod(a: int, b: int) -> int:
    """C's integer `%`: the sign of `a`."""
    return a - trunc_div(a, b) * b


def _arith(op: str, a: Value, b: Value, loc: Loc | None) -> Value:
    if op in ("//", "%", "/") and b == 0:
        raise NotConstant(loc, "division by zero in a constant expression")
    try:
        r = _arith_raw(op, a, b, loc)
        # inf and nan propagate (inf - 1 is inf); only finite operands may not overflow
        return r if _nonfinite(a) or _nonfinite(b) else _checked(r, loc)
    except OverflowError:  # a float operation out of range (an int operand is below 2**128)
        raise NotConstant(loc, OVERFLOW_FLOAT) from None


_COMMON = {"+": operator.add, "-": operator.sub, "*": operator.mul}
_BITS = {"&": operator.and_, "|": operator.or_, "^": operator.xor}
INT_OPS = {**_COMMON, **_BITS}  # the integer operations whose exact result is Python's


def _arith_raw(op: str, a: Value, b: Value, loc: Loc | None) -> Value:
    if isinstance(a, int) and isinstance(b, int):
        return _int_arith(op, a, b, loc)
    if op in ("&", "|", "^", "<<", ">>"):
        raise NotConstant(loc, f"'{op}' needs integer operands")
    return _float_arith(op, float(a), float(b), loc)


def _int_arith(op: str, a: int, b: int, loc: Loc | None) -> Value:
    """Integer arithmetic as in C: `//` and `%` truncate toward zero (bools count as 0 and 1)."""
    if op in _COMMON:
        return _COMMON[op](a, b)
    if op == "/":
        raise NotConstant(loc, "integer '/'")
    if op in ("//", "%"):
        return trunc_div(a, b) if op == "//" else trunc_mod(a, b)
    if op in _BITS:
        return _BITS[op](a, b)
    if op in ("<<", ">>"):
        if b < 0 or b >= 64:
            raise NotConstant(loc, "shift count out of range")
        return a << b if op == "<<" else a >> b
    raise NotConstant(loc)


def _float_arith(op: str, a: float, b: float, loc: Loc | None) -> Value:
    if op in _COMMON:
        return _COMMON[op](a, b)
    if op == "/":
        return a / b
    if op == "//":
        q = a / b
        if _nonfinite(a) or _nonfinite(b):
            return q  # inf, nan or a zero: its own floor
        return float(math.floor(_checked(q, loc)))  # floor(a / b) as in the C, a float
    if op == "%":
        return math.nan if _nonfinite(a) or math.isnan(b) else math.fmod(a, b)  # C's fmod
    raise NotConstant(loc)


def _nonfinite(v: Value) -> bool:
    return isinstance(v, float) and not math.isfinite(v)


OVERFLOW_INT = f"constant expression overflows: its value needs more than {MAX_CONST_BITS} bits"
OVERFLOW_FLOAT = "constant expression overflows the float range"


def _checked(v: Value, loc: Loc | None) -> Value:
    """`v`, unless it is an int of 2**MAX_CONST_BITS or more or a float that is not finite:
    bounding every step keeps evaluation cheap (repeated squaring cannot build huge numbers) and
    keeps infinities and NaN out of the C text."""
    if isinstance(v, float) and not math.isfinite(v):
        raise NotConstant(loc, OVERFLOW_FLOAT)
    if isinstance(v, int) and v.bit_length() > MAX_CONST_BITS:
        raise NotConstant(loc, OVERFLOW_INT)
    return v


COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
           "!=": operator.ne}


def evaluate(e: N.Expr, env: Mapping[str, Value]) -> Value:
    """Value of a constant expression; raises NotConstant (with the offending node's location)."""
    if isinstance(e, N.BoolLit):
        return e.value
    if isinstance(e, (N.IntLit, N.FloatLit)):
        return _checked(e.value, e.loc)
    if isinstance(e, N.Name):
        if e.id in env:
            return env[e.id]
        if e.id == "WARP_SIZE":
            return 32
        if e.id in ("inf", "nan"):
            return math.inf if e.id == "inf" else math.nan
        raise NotConstant(e.loc, f"'{e.id}' is not a compile-time constant", e)
    if isinstance(e, N.Unary):
        v = evaluate(e.operand, env)
        if e.op == "not":
            return not v
        if e.op == "-":
            return -v if _nonfinite(v) else _checked(-v, e.loc)
        if e.op == "+":
            return v
        if isinstance(v, bool) or not isinstance(v, int):
            raise NotConstant(e.loc, "'~' needs an integer operand")
        return ~v
    if isinstance(e, N.BinOp):
        return _arith(e.op, evaluate(e.left, env), evaluate(e.right, env), e.loc)
    if isinstance(e, N.Compare):
        if len(e.ops) != 1:
            raise NotConstant(e.loc, "chained comparison")
        return COMPARE[e.ops[0]](evaluate(e.operands[0], env), evaluate(e.operands[1], env))
    if isinstance(e, N.BoolOp):
        a = evaluate(e.left, env)
        if e.op == "and":
            return evaluate(e.right, env) if a else a
        return a if a else evaluate(e.right, env)
    if isinstance(e, N.Ternary):
        return evaluate(e.then, env) if evaluate(e.cond, env) else evaluate(e.orelse, env)
    if isinstance(e, N.Call) and isinstance(e.func, N.Name) and not e.kwargs:
        name = e.func.id
        args = [evaluate(a, env) for a in e.args]
        if name in ("min", "max") and len(args) >= 2:
            if any(isinstance(a, float) and math.isnan(a) for a in args):
                raise NotConstant(e.loc, "NaN in min/max")  # C's fmin/fmax ignore a NaN, Python's do not
            return min(args) if name == "min" else max(args)
        if name == "abs" and len(args) == 1:
            return abs(args[0]) if _nonfinite(args[0]) else _checked(abs(args[0]), e.loc)
        if name in SCALARS and len(args) == 1 and _nonfinite(args[0]):
            if SCALARS[name].is_float:
                return args[0]
            raise NotConstant(e.loc, f"{args[0]!r} has no {name} value")
        if name in SCALARS and len(args) == 1:
            try:
                return _checked(convert(args[0], SCALARS[name]), e.loc)
            except (OverflowError, ValueError):  # an infinite or NaN value given for a const parameter
                raise NotConstant(e.loc, OVERFLOW_FLOAT) from None
    raise NotConstant(getattr(e, "loc", None), "not a compile-time constant")


def convert(v: Value, ty: ScalarType) -> Value:
    if ty.kind == "bool":
        return bool(v)
    if ty.is_float:
        return float(v)
    from tessera.base.dtypes import wrap_int

    return wrap_int(int(v), ty)


def type_of_value(v: Value) -> ScalarType:
    if isinstance(v, bool):
        return SCALARS["bool"]
    if isinstance(v, int):
        return SCALARS["i32"] if -(2**31) <= v < 2**31 else SCALARS["i64"]
    return SCALARS["f32"]


_INT_RE = re.compile(r"[+-]?(?:0[xX][0-9a-fA-F]+(?:_[0-9a-fA-F]+)*|[0-9]+(?:_[0-9]+)*)")
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
        digits, base = int_literal_digits(t.lstrip("+-"))
        if len(digits) > MAX_INT_DIGITS:
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
