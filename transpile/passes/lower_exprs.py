"""Lowering a function's expressions (part of the `lower` pass, transpile/passes/lower.py): a typed
expression of the syntax tree to the lowered IR's expression: literals to `Const` in their type,
names to `Var`, `Const` (module constants, const parameters) or the builtin they name, operators with
their operands converted to the operation's type (`Cast`), loads with `Affine` indices, calls to
the node the builtin table names (`Intrinsic`, `Collective`, `Atomic`) or a device function's
`Call`; and a slice of a tensor or shared array (an argument of a copy, an mma, a fragment's load
or store, a vector access) to a `View`."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tessera.base.dtypes import I32, ScalarType, promote
from tessera.frontend import nodes as N
from tessera.transpile.builtins import BUILTINS
from tessera.transpile.consts import Value, convert
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.affine import affine


@dataclass
class ExprLowering:
    """The expressions of function `fn`, with `env` for the values of its constants."""

    fn: N.FuncDef
    env: dict[str, Value]  # the module's constants and the function's const parameters

    def expr(self, e: N.Expr) -> L.Expr:
        ty = e.ty
        if isinstance(e, (N.IntLit, N.FloatLit, N.BoolLit)):
            assert isinstance(ty, ScalarType)
            return L.Const(convert(e.value, ty), ty)
        if isinstance(e, N.Name):
            if isinstance(ty, (N.TensorType, N.ArrayType)):  # a whole array passed to a device function
                return L.ArrayArg(e.id, ty.elem)
            return self.name(e)
        if isinstance(e, N.Unary):
            assert isinstance(ty, ScalarType)
            if e.op == "+":
                return self.expr(e.operand)
            x = self.expr(e.operand)
            if e.op == "-" and isinstance(x, L.Const) and x.name is None and not isinstance(x.value, bool):
                return L.Const(-x.value, ty)
            return L.Unary(e.op, x if e.op == "not" else L.converted(x, ty), ty)
        if isinstance(e, N.BinOp):
            assert isinstance(ty, ScalarType)
            a = L.converted(self.expr(e.left), ty)
            b = self.expr(e.right)
            return L.Binary(e.op, a, b if e.op in ("<<", ">>") else L.converted(b, ty), ty)
        if isinstance(e, N.Compare):
            a, b = (self.expr(x) for x in e.operands)
            common = a.dtype if a.dtype == b.dtype else promote(a.dtype, b.dtype)
            return L.Compare(e.ops[0], L.converted(a, common), L.converted(b, common))
        if isinstance(e, N.BoolOp):
            return L.Logical(e.op, self.expr(e.left), self.expr(e.right))
        if isinstance(e, N.Ternary):
            assert isinstance(ty, ScalarType)
            return L.Select(self.expr(e.cond), L.converted(self.expr(e.then), ty), L.converted(self.expr(e.orelse), ty), ty)
        if isinstance(e, N.Index):
            assert isinstance(ty, ScalarType) and isinstance(e.base, N.Name)
            return L.Load(e.base.id, self.index(e.indices), ty)
        if isinstance(e, N.Call):
            return self.call(e)
        raise AssertionError(f"unexpected {type(e).__name__} in a typed tree")

    def name(self, e: N.Name) -> L.Expr:
        ty = e.ty
        assert isinstance(ty, ScalarType), e
        if e.ref == "const":
            return L.Const(convert(self.env[e.id], ty), ty, e.id)
        if e.ref == "builtin":
            if e.id == "WARP_SIZE":
                return L.Const(32, ty)
            if e.id in ("inf", "nan"):  # printed as bits (c_literal): C has no portable constant for them
                return L.Const(math.inf if e.id == "inf" else math.nan, ty)
            return L.Intrinsic(e.id, (), ty)
        return L.Var(e.id, ty)

    def index(self, indices: tuple[N.Expr, ...]) -> tuple[L.Expr, ...]:
        return tuple(affine(self.expr(i)) for i in indices)

    def call(self, e: N.Call) -> L.Expr:
        assert isinstance(e.func, N.Name)
        ty = e.ty
        name = e.func.id
        if e.func.ref == "builtin" and BUILTINS[name].node == "atomic":
            assert isinstance(ty, ScalarType)
            ref, *values = e.args
            assert isinstance(ref, N.Index) and isinstance(ref.base, N.Name)
            scope = e.kwargs[0].value
            assert isinstance(scope, N.StrLit)
            return L.Atomic(name, ref.base.id, self.index(ref.indices), tuple(self.expr(v) for v in values),
                            scope.value, ty)
        args = tuple(self.expr(a) for a in e.args)
        if e.func.ref == "cast":
            assert isinstance(ty, ScalarType)
            return L.Cast(args[0], ty)
        if e.func.ref == "func":
            assert isinstance(ty, ScalarType), "a call of a function without a value is a statement"
            return L.Call(name, args, ty)
        node = BUILTINS[name].node
        assert isinstance(ty, ScalarType), e
        if node == "intrinsic":
            return L.Intrinsic(name, args, ty)
        if node == "collective":
            return L.Collective(name, args, ty)
        raise AssertionError(f"{name}() is a statement")

    def view(self, v: N.Expr) -> L.View:
        assert isinstance(v, N.Index) and isinstance(v.base, N.Name) and isinstance(v.ty, N.ViewType)
        base_ty = v.base.ty
        if not v.indices:  # a whole shared array
            assert isinstance(base_ty, N.ArrayType)
            return L.View(v.base.id, tuple(L.Const(0, I32) for _ in base_ty.shape),
                          tuple(int(d) for d in base_ty.shape))  # constant: check_memory makes sure
        starts: list[L.Expr] = []
        extents: list[int | None] = []
        kept = iter(v.ty.extents)
        for i in v.indices:
            if isinstance(i, N.Slice):
                assert i.lo is not None
                starts.append(affine(self.expr(i.lo)))
                extents.append(next(kept))
            else:
                starts.append(affine(self.expr(i)))
                extents.append(None)
        return L.View(v.base.id, tuple(starts), tuple(extents))

    def whole(self, a: N.Expr) -> L.View:
        """A whole shared array of constant shape (an operand of tmma) as a view."""
        assert isinstance(a, N.Name) and isinstance(a.ty, N.ArrayType)
        return L.View(a.id, tuple(L.Const(0, I32) for _ in a.ty.shape), tuple(int(d) for d in a.ty.shape), checked=False)


__all__ = ["ExprLowering"]
