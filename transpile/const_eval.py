"""The evaluator of constant expressions (module constants, `-D` defaults, kernel headers, and
the checks of constant operations in bodies): an expression's value is the one the emitted code
computes at run time (tessera.base.scalar_ops), with the types of the type checker.

`i8(100) + i8(100)` is -56 and `u8(300.0)` is 255, as at run time; `f16(1.0001)` is 1.0. On a
typed tree (after typecheck) the evaluator follows the types recorded there; before, it finds
them with the checker's rules (dtypes.operand_types, common_type), retyping literals the same way.
One difference from a kernel body, documented (docs/language.md 3.1): an expression of literals
alone, with the module constants (which behave like literals), is computed exactly as long as it
stays one (`const BIG = 1 << 40` is 2**40). Where it meets a typed operand, or is the argument of
a cast, it is computed in the type it takes there, as in a body.

Every step is bounded: an exact integer of 2**128 or more, or a finite float operation whose
result is not finite (other than a division by zero, which gives IEEE's infinity or NaN), is
`NotConstant` with `error` set, as are a signed i32/i64 overflow, an integer division by zero and
a shift count out of range (run time leaves them undefined); never an exception from Python.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from tessera.base.dtypes import (
    BOOL,
    F32,
    F64,
    I32,
    I64,
    SCALARS,
    ScalarType,
    common_type,
    literal_adopts,
    operand_types,
    promote,
    round_to,
)
from tessera.base.irnode import ir_node
from tessera.base.limits import MAX_CONST_BITS
from tessera.base.scalar_ops import (
    Undefined,
    absolute,
    binary,
    compare,
    convert,
    min_max,
    trunc_div,
    trunc_mod,
    truthy,
    unary,
)
from tessera.frontend import nodes as N
from tessera.transpile.consts import (
    OVERFLOW_FLOAT,
    OVERFLOW_INT,
    NotConstant,
    Value,
    type_of_value,
    value_range_error,
)

_SHIFTS = ("<<", ">>")
_WIDER = {"f16": "f32", "bf16": "f32", "f32": "f64"}


@ir_node
class _Typed:
    """A value with its type; `weak`: made of literals only, retyped where it meets a type (its exact
    value, `None` for an operation, is computed only where it stays literal-only: `exact`)."""

    value: Value | None
    ty: ScalarType
    weak: bool


def evaluate(e: N.Expr, env: Mapping[str, Value], types: Mapping[str, ScalarType] | None = None) -> Value:
    """The value of a constant expression; raises NotConstant (with the offending node's location).
    `env` holds the constants' values; `types` the types of those that are not literal-like (const
    parameters), whose values are values of that type."""
    ev = _Evaluator(env, types or {})
    t = ev.eval(e)
    return ev.exact(e) if t.weak else _known(t)


def evaluate_constant(e: N.Expr, env: Mapping[str, Value]) -> tuple[Value, bool]:
    """A module constant's value, and whether it is made of literals alone (its value then has the
    type of its literal, so a float one must fit f32; a typed one may need f64)."""
    ev = _Evaluator(env, {})
    t = ev.eval(e)
    return (ev.exact(e), True) if t.weak else (_known(t), False)


def int_literal_type(v: int) -> ScalarType:
    """The type of an integer literal alone (docs/language.md 7.4, rule 1)."""
    return I32 if -(2**31) <= v < 2**31 else I64 if v < 2**63 else SCALARS["u64"]


class _Evaluator:
    def __init__(self, env: Mapping[str, Value], types: Mapping[str, ScalarType]) -> None:
        self.env = env
        self.types = types

    def eval(self, e: N.Expr) -> _Typed:
        ty = getattr(e, "ty", None)
        if isinstance(ty, ScalarType):
            return _Typed(self.typed(e, ty), ty, False)
        return self.untyped(e)

    # ---- leaves
    def name(self, e: N.Name) -> _Typed:
        if e.id in self.types and e.id in self.env:
            ty = self.types[e.id]
            v = self.env[e.id]
            return _Typed(round_to(float(v), ty) if ty.is_float else v, ty, False)
        if e.id in self.env:
            v = self.env[e.id]
            return _Typed(v, type_of_value(v), True)
        if e.id == "WARP_SIZE":
            return _Typed(32, I32, True)
        if e.id in ("inf", "nan"):
            return _Typed(math.inf if e.id == "inf" else math.nan, F32, True)
        raise NotConstant(e.loc, f"'{e.id}' is not a compile-time constant", e)

    def literal(self, v: Value, ty: ScalarType, e: N.Expr) -> Value:
        """The literal-like value `v` taking the type `ty` (it must fit, as the checker requires)."""
        if ty.kind == "bool":
            return truthy(v)
        if isinstance(v, float) and not ty.is_float:
            raise NotConstant(e.loc, f"the float {v!r} cannot be {ty}", error=True)
        why = value_range_error(int(v) if isinstance(v, bool) else v, ty)
        if why:
            what = f"the constant '{e.id}' is used as {ty}, but" if isinstance(e, N.Name) and e.id in self.env \
                else "integer literal" if ty.is_int else "float literal"
            raise NotConstant(e.loc, f"{what} {why}", error=True)
        return round_to(v, ty) if ty.is_float else int(v)

    # ---- a tree the type checker has typed
    def typed(self, e: N.Expr, ty: ScalarType) -> Value:
        if isinstance(e, (N.IntLit, N.FloatLit)):
            return self.literal(e.value, ty, e)
        if isinstance(e, N.BoolLit):
            return e.value
        if isinstance(e, N.Name):
            t = self.name(e)
            return self.literal(_known(t), ty, e) if t.weak else convert(_known(t), t.ty, ty)
        if isinstance(e, N.Unary):
            if e.op == "-" and isinstance(e.operand, N.IntLit):  # `-128` as an i8
                return self.literal(-e.operand.value, ty, e)
            x, tx = self.typed_operand(e.operand)
            if e.op == "not":
                return not truthy(x)
            return self.unary(e, convert(x, tx, ty), ty)
        if isinstance(e, N.BinOp):
            (a, ta), (b, tb) = self.typed_operand(e.left), self.typed_operand(e.right)
            return self.arith(e, convert(a, ta, ty), b if e.op in _SHIFTS else convert(b, tb, ty), ty)
        if isinstance(e, N.Compare) and len(e.ops) == 1:
            (a, ta), (b, tb) = self.typed_operand(e.operands[0]), self.typed_operand(e.operands[1])
            common = ta if ta == tb else promote(ta, tb)
            return compare(e.ops[0], convert(a, ta, common), convert(b, tb, common))
        if isinstance(e, N.Ternary):
            arm, t_arm = self.typed_operand(e.then if truthy(self.typed_operand(e.cond)[0]) else e.orelse)
            return convert(arm, t_arm, ty)
        if isinstance(e, N.BoolOp):
            return self.logical(e)
        if isinstance(e, N.Call):
            return _known(self.call(e))
        raise NotConstant(e.loc, "not a compile-time constant")

    def typed_operand(self, e: N.Expr) -> tuple[Value, ScalarType]:
        x = self.eval(e)
        return self.value_of(x, e), x.ty

    # ---- a tree before typecheck: the checker's rules
    def untyped(self, e: N.Expr) -> _Typed:
        if isinstance(e, N.IntLit):
            return _Typed(_bounded(e.value, e), int_literal_type(e.value), True)
        if isinstance(e, N.FloatLit):
            return _Typed(_bounded(e.value, e), F32, True)
        if isinstance(e, N.BoolLit):
            return _Typed(e.value, BOOL, False)
        if isinstance(e, N.Name):
            return self.name(e)
        if isinstance(e, N.Unary):
            return self.untyped_unary(e)
        if isinstance(e, N.BinOp):
            return self.untyped_binary(e)
        if isinstance(e, N.Compare) and len(e.ops) == 1:
            a, b = self.eval(e.operands[0]), self.eval(e.operands[1])
            ta, tb, _ = self.rule("==", a, b, e)
            common = ta if ta == tb else promote(ta, tb)
            av, bv = self.operand(a, e.operands[0], ta, common), self.operand(b, e.operands[1], tb, common)
            return _Typed(compare(e.ops[0], av, bv), BOOL, False)
        if isinstance(e, N.Compare):
            raise NotConstant(e.loc, "chained comparison")
        if isinstance(e, N.BoolOp):
            return _Typed(self.logical(e), BOOL, False)
        if isinstance(e, N.Ternary):
            cond = truthy(self.value_of(self.eval(e.cond), e.cond))
            a, b = self.eval(e.then), self.eval(e.orelse)  # both typed (and checked), as in a body
            ta, tb, res = self.rule("+", a, b, e)
            if ta == BOOL and tb == BOOL:
                res = BOOL
            v = self.operand(a, e.then, ta, res) if cond else self.operand(b, e.orelse, tb, res)
            return _Typed(v, res, False)
        if isinstance(e, N.Call):
            return self.call(e)
        raise NotConstant(getattr(e, "loc", None), "not a compile-time constant")

    def untyped_unary(self, e: N.Unary) -> _Typed:
        x = self.eval(e.operand)
        if e.op == "not":
            return _Typed(not truthy(self.value_of(x, e.operand)), BOOL, False)
        if e.op == "~" and not x.ty.is_int:
            raise NotConstant(e.loc, f"'~' needs an integer operand, not {x.ty}", error=True)
        ty = I32 if x.ty.kind == "bool" else x.ty
        if x.weak:
            return _Typed(None, ty, True)
        return _Typed(self.unary(e, convert(_known(x), x.ty, ty), ty), ty, False)

    def untyped_binary(self, e: N.BinOp) -> _Typed:
        a, b = self.eval(e.left), self.eval(e.right)
        ta, tb, res = self.rule(e.op, a, b, e)
        if a.weak and b.weak:
            return _Typed(None, res, True)
        av = self.operand(a, e.left, ta, res)
        bv = self.operand(b, e.right, tb, tb if e.op in _SHIFTS else res)
        return _Typed(self.arith(e, av, bv, res), res, False)

    def rule(self, op: str, a: _Typed, b: _Typed, e: N.Expr) -> tuple[ScalarType, ScalarType, ScalarType]:
        r = operand_types(op, a.ty, a.weak, b.ty, b.weak)
        if isinstance(r, str):
            raise NotConstant(e.loc, r, error=True)
        return r

    def operand(self, x: _Typed, node: N.Expr, ty: ScalarType, to: ScalarType) -> Value:
        """`x` (the value of `node`) computed in `ty` (a literal-only tree as if retyped to it), then
        converted to `to`."""
        v = self.weak_in(node, ty) if x.weak else convert(_known(x), x.ty, ty)
        return convert(v, ty, to)

    def value_of(self, x: _Typed, node: N.Expr) -> Value:
        """The value of `node` in its type (a literal-only tree computed in the type it has alone)."""
        return self.operand(x, node, x.ty, x.ty)

    def weak_in(self, e: N.Expr, ty: ScalarType) -> Value:
        """The literal-only tree `e` computed in the type `ty` that it takes (checks/expr.py retype)."""
        if isinstance(e, (N.IntLit, N.FloatLit)):
            return self.literal(e.value, ty, e)
        if isinstance(e, N.Name):
            return self.literal(_known(self.name(e)), ty, e)
        if isinstance(e, N.Unary) and e.op == "-" and isinstance(e.operand, N.IntLit):
            return self.literal(-e.operand.value, ty, e)
        if isinstance(e, N.Unary):
            x = self.weak_in(e.operand, ty)
            return x if e.op == "+" else self.unary(e, x, ty)
        assert isinstance(e, N.BinOp), e
        return self.arith(e, self.weak_in(e.left, ty), self.weak_in(e.right, ty), ty)

    def exact(self, e: N.Expr) -> Value:
        """The exact value of the literal-only tree `e` (integers as integers, floats as doubles)."""
        if isinstance(e, (N.IntLit, N.FloatLit)):
            return _bounded(e.value, e)
        if isinstance(e, N.Name):
            return _known(self.name(e))
        if isinstance(e, N.Unary):
            v = self.exact(e.operand)
            v = int(v) if isinstance(v, bool) else v
            return _bounded(v if e.op == "+" else -v if e.op == "-" else ~int(v), e)
        assert isinstance(e, N.BinOp), e
        return _exact(e, self.exact(e.left), self.exact(e.right))

    # ---- operations
    def unary(self, e: N.Unary, v: Value, ty: ScalarType) -> Value:
        try:
            return unary(e.op, v, ty)
        except Undefined as u:
            raise _undefined(e, u, ty) from None

    def arith(self, e: N.BinOp, a: Value, b: Value, ty: ScalarType) -> Value:
        if ty.is_float and e.op in ("&", "|", "^", "<<", ">>"):  # literals retyped by a float operand
            raise NotConstant(e.loc, f"'{e.op}' needs integer operands, but these literals take the type {ty} of "
                              f"the other operand; convert the other operand or this one (i32(...))", error=True)
        try:
            r = binary(e.op, a, b, ty)
        except Undefined as u:
            raise _undefined(e, u, ty) from None
        if isinstance(r, float) and not math.isfinite(r) and _finite(a) and _finite(b) \
                and not (e.op in ("/", "//", "%") and b == 0):
            exact = binary(e.op, a, b, F64)
            shown = f" (its value is {exact!r}); convert an operand to {_WIDER[ty.name]}" \
                if ty.name in _WIDER and math.isfinite(exact) else ""
            raise NotConstant(e.loc, f"constant expression overflows {ty}{shown}", error=True)
        return r

    def logical(self, e: N.BoolOp) -> bool:
        a = truthy(self.value_of(self.eval(e.left), e.left))
        if a == (e.op == "or"):
            return a
        return truthy(self.value_of(self.eval(e.right), e.right))

    def call(self, e: N.Call) -> _Typed:
        if not isinstance(e.func, N.Name) or e.kwargs:
            raise NotConstant(e.loc, "not a compile-time constant")
        name = e.func.id
        if name in SCALARS and len(e.args) == 1 and e.func.ref in (None, "cast"):
            x = self.eval(e.args[0])
            ty = SCALARS[name]
            return _Typed(convert(self.value_of(x, e.args[0]), x.ty, ty), ty, False)
        if (name in ("min", "max") and 2 <= len(e.args) <= 16) or (name == "abs" and len(e.args) == 1):
            args = [self.eval(a) for a in e.args]
            for a, node in zip(args, e.args):
                if a.ty.kind == "bool":
                    raise NotConstant(node.loc, f"{name}() needs a numeric argument, not bool", error=True)
            ty = e.ty if isinstance(e.ty, ScalarType) else common_type([a.ty for a in args], [a.weak for a in args])
            values = [self.operand(a, node, ty if a.weak and literal_adopts(a.ty, ty) else a.ty, ty)
                      for a, node in zip(args, e.args)]
            try:
                return _Typed(absolute(values[0], ty) if name == "abs" else min_max(name, values, ty), ty, False)
            except Undefined as u:
                raise NotConstant(e.loc, u.why) from None
        raise NotConstant(e.loc, "not a compile-time constant")


def _known(t: _Typed) -> Value:
    assert t.value is not None, "the value of an operation of literals is computed by exact() or weak_in()"
    return t.value


def _finite(v: Value) -> bool:
    return not isinstance(v, float) or math.isfinite(v)


def _undefined(e: N.Expr, u: Undefined, ty: ScalarType) -> NotConstant:
    if u.overflow:
        return NotConstant(e.loc, f"constant expression overflows {ty} (its value is {u.exact}); convert an "
                           "operand to a wider type, such as i64(...)", error=True)
    if u.why == "integer division by zero":
        return NotConstant(e.loc, "division by zero in a constant expression", error=True)
    return NotConstant(e.loc, u.why, error=True)


def _bounded(v: Value, e: N.Expr) -> Value:
    """`v`, unless it is an exact integer of 2**MAX_CONST_BITS or more: bounding every step keeps
    evaluation cheap (repeated squaring cannot build huge numbers)."""
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > MAX_CONST_BITS:
        raise NotConstant(e.loc, OVERFLOW_INT, error=True)
    if isinstance(v, float) and math.isinf(v) and isinstance(e, N.FloatLit):
        raise NotConstant(e.loc, "float literal is too large", error=True)
    return v


def _exact(e: N.BinOp, a: Value, b: Value) -> Value:
    """`a op b` of two literal-only values, exactly: integers as integers (C's `//` and `%`,
    which truncate), floats as doubles with IEEE's division by zero."""
    op = e.op
    if isinstance(a, float) or isinstance(b, float):
        fa, fb = float(a), float(b)
        r = binary(op, fa, fb, F64)
        if not math.isfinite(r) and math.isfinite(fa) and math.isfinite(fb) and not (op in ("/", "//", "%") and fb == 0):
            raise NotConstant(e.loc, OVERFLOW_FLOAT, error=True)
        return r
    x, y = int(a), int(b)
    if op in ("//", "%") and y == 0:
        raise NotConstant(e.loc, "division by zero in a constant expression", error=True)
    if op in _SHIFTS and not 0 <= y < 64:
        raise NotConstant(e.loc, "shift count out of range", error=True)
    if op in ("+", "-", "*"):
        r = x + y if op == "+" else x - y if op == "-" else x * y
    elif op in ("&", "|", "^"):
        r = x & y if op == "&" else x | y if op == "|" else x ^ y
    elif op in _SHIFTS:
        r = x << y if op == "<<" else x >> y
    else:
        r = trunc_div(x, y) if op == "//" else trunc_mod(x, y)
    return _bounded(r, e)
