"""A model of .tsr scalar arithmetic, written from the contract (docs/language.md 6.2, 6.3, 7.4 and
section 13) without the compiler's code, and a random generator of scalar expressions with their
modelled values.

The model: integers narrower than 32 bits compute in `int` and wrap back; unsigned types wrap;
`i32`/`i64` overflow of `+ - *`, unary `-`, `//` of the minimum by -1, an integer division by zero
and a shift count outside 0..width-1 are undefined (the generator drops such expressions); `<<`
keeps the low bits. `//` and `%` on integers truncate. Float to integer truncates and saturates,
NaN gives 0. Floats are IEEE: f32 and f64 through NumPy, f16 and bf16 computed in f32 and rounded
back (rounding to bf16, and exact integers to any float type, through `fractions`). `min`/`max`
ignore a NaN; of -0.0 and 0.0 they may return either. Literals take the other operand's type; a
`bool` counts as an `i32` in arithmetic. In a constant expression, a float operation on finite
operands whose result is not finite (other than a division by zero) is a compile error.

Each generated expression comes in two spellings: `const_text`, whose leaves are literals (the whole
expression folds at compile time), and `run_text`, whose leaves are elements of input arrays (nothing
folds). See tests/language/test_scalar_folding.py for the three evaluations that must agree.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

INTS = {"i8": (8, True), "i16": (16, True), "i32": (32, True), "i64": (64, True),
        "u8": (8, False), "u16": (16, False), "u32": (32, False), "u64": (64, False)}
FLOATS = {"f16": (11, -14, 15), "bf16": (8, -126, 127), "f32": (24, -126, 127), "f64": (53, -1022, 1023)}
TYPES = ("bool", *INTS, *FLOATS)
NUMPY = {"bool": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "u8": np.uint8,
         "u16": np.uint16, "u32": np.uint32, "u64": np.uint64, "f16": np.float16, "bf16": np.uint16,
         "f32": np.float32, "f64": np.float64}
Value = int | float | bool


class Undefined(Exception):
    """The expression has no defined value at run time."""


def bits(t: str) -> int:
    return 8 if t == "bool" else INTS[t][0] if t in INTS else {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}[t]


def int_range(t: str) -> tuple[int, int]:
    n, signed = INTS[t]
    return (-(2 ** (n - 1)), 2 ** (n - 1) - 1) if signed else (0, 2**n - 1)


def wrap(v: int, t: str) -> int:
    lo, hi = int_range(t)
    return (v - lo) % (hi - lo + 1) + lo


# ---- rounding and conversions
def round_float(x: Fraction | int | float, t: str) -> float:
    """An exact value rounded to nearest even in the float type `t` (infinities on overflow)."""
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x) or x == 0.0):
        return x
    q = Fraction(x)
    if q == 0:
        return 0.0
    p, emin, emax = FLOATS[t]
    a = abs(q)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    quantum = max(e, emin) - (p - 1)
    n = round(a / Fraction(2) ** quantum)  # Fraction rounds half to even
    r = Fraction(n) * Fraction(2) ** quantum
    if r >= Fraction(2) ** (emax + 1):
        return -math.inf if q < 0 else math.inf
    return -float(r) if q < 0 else float(r)  # a negative value that rounds to zero is -0.0


def cast(v: Value, src: str, dst: str) -> Value:
    if dst == "bool":
        return bool(v != 0)
    if src == "bool":
        v, src = int(v), "i32"
    if dst in INTS:
        if src in FLOATS:
            lo, hi = int_range(dst)
            if math.isnan(v):
                return 0
            return hi if v >= hi else lo if v <= lo else int(v)
        return wrap(int(v), dst)
    return round_float(v, dst)


def promote(a: str, b: str) -> str:
    if a == b:
        return a
    a, b = ("i32" if a == "bool" else a), ("i32" if b == "bool" else b)
    if a == b:
        return a
    if a in FLOATS and b in FLOATS:
        return "f32" if {a, b} == {"f16", "bf16"} else a if bits(a) > bits(b) else b
    if a in FLOATS or b in FLOATS:
        return a if a in FLOATS else b
    if bits(a) != bits(b):
        return a if bits(a) > bits(b) else b
    return a if a.startswith("u") else b


# ---- operations on values of a type
def _np(v: float, t: str):
    return np.float64(v) if t == "f64" else np.float32(v)


def float_op(op: str, a: float, b: float, t: str) -> float:
    """`a op b` in float type `t`: f16/bf16 computed in f32 and rounded back."""
    work = "f64" if t == "f64" else "f32"
    x, y = _np(a, work), _np(b, work)
    with np.errstate(all="ignore"):
        r = {"+": lambda: x + y, "-": lambda: x - y, "*": lambda: x * y, "/": lambda: x / y,
             "//": lambda: np.floor(x / y), "%": lambda: np.fmod(x, y)}[op]()
    r = float(r)
    return r if t == work else round_float(r, t)


def int_op(op: str, a: int, b: int, t: str) -> int:
    n, signed = INTS[t]
    if op in ("<<", ">>"):
        if not 0 <= b < max(n, 32):
            raise Undefined("shift count")
        return wrap(a << b if op == "<<" else a >> b, t)
    if op in ("//", "%"):
        if b == 0:
            raise Undefined("division by zero")
        q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
        r = q if op == "//" else a - q * b
    else:
        r = {"+": a + b, "-": a - b, "*": a * b, "&": a & b, "|": a | b, "^": a ^ b}[op]
    lo, hi = int_range(t)
    if signed and n >= 32 and not lo <= r <= hi:
        raise Undefined("signed overflow")
    return wrap(r, t)


def is_finite(v: Value) -> bool:
    return not isinstance(v, float) or math.isfinite(v)


# ---- expressions
@dataclass
class Expr:
    const_text: str
    run_text: str
    ty: str
    value: Value
    const_error: bool = False      # a compile error where it is a constant expression
    zero_sign: bool = False        # a zero whose sign the contract leaves open (min/max of -0.0, 0.0)


@dataclass
class Literal:
    """A weak literal, or an operation on two (`op`, `parts`): the same text in both spellings; it
    takes the other operand's type, and its operations are then computed in that type."""
    text: str
    value: Value | None = None  # a literal's exact value (int or float); None for an operation
    op: str = ""
    parts: tuple[Literal, ...] = ()

    def type_alone(self) -> str:
        if self.op:
            a, b = (p.type_alone() for p in self.parts)
            return (a if bits(a) >= 32 else "i32") if self.op in ("<<", ">>") else promote(a, b)
        if isinstance(self.value, float):
            return "f32"
        assert isinstance(self.value, int)
        return "i32" if -(2**31) <= self.value < 2**31 else "i64" if self.value < 2**63 else "u64"

    def adopts(self, other: str) -> bool:
        return other != "bool" and (other in FLOATS if self.type_alone() in FLOATS else True)

    def value_in(self, t: str) -> Value:
        if self.op:
            x, y = (p.value_in(t) for p in self.parts)
            if t in FLOATS:
                if self.op not in ("+", "-", "*", "/", "//", "%"):
                    raise Undefined("a bitwise operation retyped to a float type is an error")
                v = float_op(self.op, x, y, t)
                if not is_finite(v) and is_finite(x) and is_finite(y) and not (self.op in ("/", "//", "%") and y == 0):
                    raise Undefined("a constant float overflow is an error")
                return v
            return int_op(self.op, int(x), int(y), t)
        if isinstance(self.value, float):
            if t != "f64" and is_finite(self.value) and self.value != 0 and (
                    abs(self.value) > 3.4028234663852886e38 or round_float(self.value, "f32") == 0):
                raise Undefined("literal out of the f32 range")
            return round_float(self.value, t)
        assert isinstance(self.value, int)
        if t in INTS:
            lo, hi = int_range(t)
            if not lo <= self.value <= hi:
                raise Undefined("literal does not fit")
            return self.value
        return round_float(self.value, t)

    def as_expr(self, t: str) -> Expr:
        return Expr(self.text, self.text, t, self.value_in(t))


def float_text(v: float) -> str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(v)


class Generator:
    """Random expressions over typed values, with their modelled value (Undefined ones raise)."""

    def __init__(self, rng: random.Random, inputs: dict[str, list[Value]]) -> None:
        self.rng = rng
        self.inputs = inputs  # per type: the values of the run spelling's input array a_<type>

    # ---- leaves
    def value(self, t: str) -> Value:
        r = self.rng
        if t == "bool":
            return r.random() < 0.5
        if t in INTS:
            lo, hi = int_range(t)
            if r.random() < 0.4:
                return r.choice([lo, hi, lo + 1, hi - 1, hi // 2 + 1, lo // 2 - (1 if lo else 0)])
            return r.choice([0, 1, -1 if lo else 2, r.randint(-100, 100) if lo else r.randint(0, 200),
                             r.randint(lo, hi), r.randint(lo, hi) >> r.randint(0, bits(t) - 1)])
        specials = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 255.9, 300.0, -200.5, 65504.0, 1e10, -3e9, 2.0**31, 2.0**63,
                    2.0**64, math.inf, -math.inf, math.nan, 1e-40, 6e-8, 3.4e38, 1.7e308, 5e-324, 0.1, 1 / 3]
        v = r.choice(specials) if r.random() < 0.6 else r.uniform(-1, 1) * 10.0 ** r.randint(-8, 12)
        return round_float(v, t)

    def leaf(self, t: str) -> Expr:
        v = self.value(t)
        k = len(self.inputs[t])
        self.inputs[t].append(v)
        return Expr(self.literal_text(v, t), f"a_{t}[{k}]", t, v)

    def literal_text(self, v: Value, t: str) -> str:
        """A constant expression of type `t` whose value is exactly `v`."""
        if t == "bool":
            return "True" if v else "False"
        if t in INTS:
            lo, _ = int_range("i64")
            text = f"({lo + 1} - 1)" if v == lo else str(v)
            return f"{t}({text})"
        if t != "f64" or not math.isfinite(v) or round_float(v, "f32") == v:
            return f"{t}({float_text(v)})"  # a float literal is f32: exact for f16, bf16, f32 values
        return f"({float_text(v)} - f64(0))"  # the literal takes the type f64: exact

    def weak(self, t: str) -> Literal:
        """A literal, or sometimes an operation on two, for an operand of type `t`."""
        r = self.rng
        if r.random() < 0.25:
            a, b = self.weak(t), self.weak(t)
            if a.op or b.op:
                return a
            floats = isinstance(a.value, float) or isinstance(b.value, float)
            op = r.choice(["+", "-", "*", "//", "%"] + (["/"] if floats else ["&", "|", "^", "<<", ">>"]))
            return Literal(f"({a.text} {op} {b.text})", op=op, parts=(a, b))
        if t in FLOATS and r.random() < 0.5:
            v = r.choice([0.5, -0.0, 0.1, 3.0, -1.5, 1e-3, 1e5, math.inf, -math.inf, math.nan, 65536.0])
            return Literal(float_text(v), v)
        if t in INTS:
            lo, hi = int_range(t)
            v = r.choice([0, 1, 2, 3, 7, hi, lo, -1, -5, 31, 63, 100])
            v = v if lo <= v <= hi else 1
        else:
            v = r.choice([0, 1, 2, 3, -1, 100, 2**31 - 1, 5000000000])
        return Literal(str(v) if v >= 0 else f"({v})", v)

    # ---- trees
    def pick(self, kinds: tuple[str, ...] = TYPES, bools: float = 1.0) -> str:
        """A type of `kinds`: floats and integers about equally often, bool less."""
        weights = [bools if t == "bool" else 2.5 if t in FLOATS else 1.3 for t in kinds]
        return self.rng.choices(kinds, weights)[0]

    def expr(self, depth: int, want: str | None = None) -> Expr:
        """A random expression; of type `want` when given (converted to it where it has another)."""
        r = self.rng
        t = want or self.pick()
        if depth == 0 or r.random() < 0.2:
            return self.leaf(t)
        kind = r.choice(["cast", "cast", "unary", "binary", "binary", "binary", "binary", "compare", "minmax",
                         "abs", "select", "logic"])
        e = getattr(self, "make_" + kind)(depth - 1, t)
        if want is None or e.ty == want:
            return e
        return self.wrap(f"{want}({e.const_text})", f"{want}({e.run_text})", want, cast(e.value, e.ty, want), [e])

    def make_cast(self, depth: int, t: str) -> Expr:
        x = self.expr(depth)
        return self.wrap(f"{t}({x.const_text})", f"{t}({x.run_text})", t, cast(x.value, x.ty, t), [x])

    def make_unary(self, depth: int, t: str) -> Expr:
        x = self.expr(depth)
        ops = ["-", "+", "not"] + (["~"] if x.ty in INTS else [])
        op = self.rng.choice(ops)
        ct, rt = f"({op} {x.const_text})" if op == "not" else f"({op}{x.const_text})", \
            f"({op} {x.run_text})" if op == "not" else f"({op}{x.run_text})"
        if op == "not":
            return self.wrap(ct, rt, "bool", x.value == 0, [x])
        ty = "i32" if x.ty == "bool" else x.ty
        v = cast(x.value, x.ty, ty)
        if op == "+":
            return self.wrap(ct, rt, ty, v, [x])
        if ty in FLOATS:
            return self.wrap(ct, rt, ty, -v, [x])
        lo, hi = int_range(ty)
        n, signed = INTS[ty]
        r = -v if op == "-" else ~v
        if signed and n >= 32 and not lo <= r <= hi:
            raise Undefined("signed overflow")
        return self.wrap(ct, rt, ty, wrap(r, ty), [x])

    def operands(self, depth: int, int_only: bool = False) -> tuple[Expr | Literal, Expr | Literal]:
        types = tuple(INTS) if int_only else TYPES
        a = self.expr(depth, self.pick(types, 3.0))
        if self.rng.random() < 0.3 and a.ty != "bool":
            lit = self.weak(a.ty)
            return (a, lit) if self.rng.random() < 0.7 else (lit, a)
        return a, self.expr(depth, self.pick(types, 3.0))

    def typed(self, a: Expr | Literal, b: Expr | Literal, shift: bool = False) -> tuple[Expr, Expr, str]:
        """The operands in the types they take (a literal adopts the other's type) and the common type."""
        if isinstance(a, Literal):
            a = a.as_expr(b.ty if a.adopts(b.ty) else a.type_alone())
        elif isinstance(b, Literal):
            b = b.as_expr(a.ty if b.adopts(a.ty) else b.type_alone())
        if shift:
            return a, b, a.ty if bits(a.ty) >= 32 else "i32"
        common = promote(a.ty, b.ty)
        return a, b, common

    def make_binary(self, depth: int, t: str) -> Expr:
        op = self.rng.choice(["+", "-", "*", "/", "//", "%", "&", "|", "^", "<<", ">>"])
        a, b = self.operands(depth, op in ("&", "|", "^", "<<", ">>"))
        a, b, res = self.typed(a, b, op in ("<<", ">>"))
        res = "i32" if res == "bool" else res  # bool arithmetic is i32
        if op == "/" and res not in FLOATS:
            raise Undefined("integer '/' is an error")
        ct, rt = f"({a.const_text} {op} {b.const_text})", f"({a.run_text} {op} {b.run_text})"
        if res in FLOATS:
            x, y = cast(a.value, a.ty, res), cast(b.value, b.ty, res)
            v = float_op(op, x, y, res)
            overflow = not is_finite(v) and is_finite(x) and is_finite(y) and not (op in ("/", "//", "%") and y == 0)
            e = self.wrap(ct, rt, res, v, [a, b])
            e.const_error |= overflow
            return e
        x = cast(a.value, a.ty, res)
        y = cast(b.value, b.ty, b.ty if op in ("<<", ">>") else res)
        return self.wrap(ct, rt, res, int_op(op, int(x), int(y), res), [a, b])

    def make_compare(self, depth: int, t: str) -> Expr:
        op = self.rng.choice(["<", "<=", ">", ">=", "==", "!="])
        a, b = self.operands(depth)
        a, b, _ = self.typed(a, b)
        common = promote(a.ty, b.ty)
        x, y = cast(a.value, a.ty, common), cast(b.value, b.ty, common)
        v = {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y, "==": x == y, "!=": x != y}[op]
        return self.wrap(f"({a.const_text} {op} {b.const_text})", f"({a.run_text} {op} {b.run_text})", "bool",
                         bool(v), [a, b])

    def make_minmax(self, depth: int, t: str) -> Expr:
        op = self.rng.choice(["min", "max"])
        ty = self.pick(TYPES[1:])
        args = [self.expr(depth, ty) for _ in range(self.rng.choice([2, 2, 3]))]
        r, zero_sign = args[0].value, False
        for x in args[1:]:
            y = x.value
            if ty in FLOATS:
                if math.isnan(y):
                    continue
                if math.isnan(r) or (y < r if op == "min" else y > r):
                    r = y
                elif y == r == 0 and math.copysign(1, y) != math.copysign(1, r):
                    zero_sign = True
            else:
                r = min(r, y) if op == "min" else max(r, y)
        e = self.wrap(f"{op}({', '.join(a.const_text for a in args)})", f"{op}({', '.join(a.run_text for a in args)})",
                      ty, r, args)
        e.zero_sign |= zero_sign
        return e

    def make_abs(self, depth: int, t: str) -> Expr:
        ty = self.pick(TYPES[1:])
        x = self.expr(depth, ty)
        v = abs(x.value) if ty in FLOATS else wrap(abs(x.value), ty)
        return self.wrap(f"abs({x.const_text})", f"abs({x.run_text})", ty, v, [x])

    def make_select(self, depth: int, t: str) -> Expr:
        c = self.expr(depth)
        a, b = self.expr(depth, t), self.expr(depth, self.rng.choice([t, self.pick()]))
        ty = promote(a.ty, b.ty)  # bool only when both are
        chosen = a if c.value != 0 else b
        return self.wrap(f"({a.const_text} if {c.const_text} else {b.const_text})",
                         f"({a.run_text} if {c.run_text} else {b.run_text})", ty, cast(chosen.value, chosen.ty, ty),
                         [c, a, b])

    def make_logic(self, depth: int, t: str) -> Expr:
        op = self.rng.choice(["and", "or"])
        a, b = self.expr(depth), self.expr(depth)
        x, y = a.value != 0, b.value != 0
        return self.wrap(f"({a.const_text} {op} {b.const_text})", f"({a.run_text} {op} {b.run_text})", "bool",
                         (x and y) if op == "and" else (x or y), [a, b])

    @staticmethod
    def wrap(ct: str, rt: str, ty: str, v: Value, parts: list) -> Expr:
        e = Expr(ct, rt, ty, v)
        for p in parts:
            e.const_error |= p.const_error
            e.zero_sign |= p.zero_sign
        return e


def generate(rng: random.Random, count: int, depth: int = 3) -> tuple[list[Expr], dict[str, list[Value]]]:
    """`count` expressions with a defined value, and the run spelling's input values per type."""
    inputs: dict[str, list[Value]] = {t: [] for t in TYPES}
    out: list[Expr] = []
    while len(out) < count:
        saved = {t: len(v) for t, v in inputs.items()}
        try:
            out.append(Generator(rng, inputs).expr(depth))
        except Undefined:
            for t, n in saved.items():
                del inputs[t][n:]
    return out, inputs
