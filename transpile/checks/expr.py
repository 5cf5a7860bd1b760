"""Type checking of expressions (spec section 6): literals, names, operators, indexing and
attributes, and the implicit conversions between scalars (weak literals retyped, casts recorded).

`Expressions` is the type checker's part for them: the core (typecheck.FunctionChecker) dispatches
a node to its rule here, for names and indexing together with the fragments' and the map kernel's
hooks (FunctionChecker.x_Name, x_Index). A rule returns a copy of the node with `ty` filled in, or
with `ty=None` after reporting an error (callers stay quiet on `None` to avoid cascades). Calls are
checked by calls.BuiltinCalls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeGuard

from tessera.base.dtypes import BOOL, F32, I32, SCALARS, ScalarType, literal_adopts, operand_types
from tessera.base.errors import Loc
from tessera.frontend import nodes as N
from tessera.transpile.checks.scope import BUILTIN_NAMES, Part

if TYPE_CHECKING:
    pass

# Builtin values that, like literals, take the type of the other operand.
WEAK_VALUES = frozenset(["WARP_SIZE", "inf", "nan"])


def is_scalar(t: object) -> TypeGuard[ScalarType]:
    return isinstance(t, ScalarType)


def scalar_type(e: N.Expr) -> ScalarType | None:
    """The type of an operand checked by `Expressions.scalar_expr`: a scalar, or None after an error."""
    assert e.ty is None or isinstance(e.ty, ScalarType), e.ty
    return e.ty


def convertible(src: ScalarType, dst: ScalarType) -> bool:
    if src == dst:
        return True
    if dst.kind == "bool":
        return False
    if dst.is_int:
        return src.is_int or src.kind == "bool"
    return True  # to float: from int, bool or another float


def retype(e: N.Expr, ty: ScalarType) -> N.Expr:
    """Give a weak (literal-only) expression the type `ty`."""
    if isinstance(e, N.Unary):
        return N.replace(e, ty=ty, operand=retype(e.operand, ty))
    if isinstance(e, N.BinOp):
        return N.replace(e, ty=ty, left=retype(e.left, ty), right=retype(e.right, ty))
    if isinstance(e, (N.IntLit, N.FloatLit, N.Name)):
        return N.replace(e, ty=ty)
    return e


class Expressions(Part):
    """The typing rules of expressions other than calls, and the conversions between scalars."""

    def is_weak(self, e: N.Expr) -> bool:
        if isinstance(e, (N.IntLit, N.FloatLit)):
            return True
        if isinstance(e, N.Name):
            s = self.scope.lookup(e.id)
            return bool(s and s.weak) or (s is None and e.id in WEAK_VALUES)
        if isinstance(e, N.Unary) and e.op in ("-", "+", "~"):
            return self.is_weak(e.operand)
        if isinstance(e, N.BinOp):
            return self.is_weak(e.left) and self.is_weak(e.right)
        return False

    # ---- expressions
    def scalar_expr(self, e: N.Expr, what: str = "operand") -> N.Expr:
        t = self.fc.expr(e)
        if isinstance(t.ty, N.TupleType) and isinstance(t, N.Call) and isinstance(t.func, N.Name):
            n = len(t.ty.items)
            self.sink.error(e.loc, f"{t.func.id}() returns {n} values ({', '.join(x.name for x in t.ty.items)}); "
                            f"call it in a tuple assignment ({', '.join('abcdefgh'[:min(n, 8)])} = "
                            f"{t.func.id}(...)) or as a statement")
            return N.replace(t, ty=None)
        if t.ty is not None and not is_scalar(t.ty):
            self.sink.error(e.loc, f"{what} must be a scalar value, not {type_name(t.ty)}")
            return N.replace(t, ty=None) if hasattr(t, "ty") else t
        return t

    def x_IntLit(self, e: N.IntLit) -> N.Expr:
        if not -(2**63) <= e.value < 2**64:
            self.sink.error(e.loc, f"integer literal {e.value} does not fit in 64 bits")
            return e
        ty = I32 if -(2**31) <= e.value < 2**31 else SCALARS["i64"] if e.value < 2**63 else SCALARS["u64"]
        return N.replace(e, ty=ty)

    def x_FloatLit(self, e: N.FloatLit) -> N.Expr:
        if e.value in (float("inf"), float("-inf")):
            self.sink.error(e.loc, "float literal is too large")
        return N.replace(e, ty=F32)

    def x_BoolLit(self, e: N.BoolLit) -> N.Expr:
        return N.replace(e, ty=BOOL)

    def x_StrLit(self, e: N.StrLit) -> N.Expr:
        self.sink.error(e.loc, "a string is only allowed as an argument that asks for one (tprint, tassert, scope=)")
        return e

    def x_Name(self, e: N.Name) -> N.Expr:
        s = self.scope.lookup(e.id)
        if s is None:
            if e.id == "grid_groups":
                return N.replace(e, ty=I32, ref="builtin")
            if e.id == "WARP_SIZE":
                return N.replace(e, ty=I32, ref="builtin")
            if e.id in ("inf", "nan"):  # a float that, like a literal, adopts the other operand's type
                return N.replace(e, ty=F32, ref="builtin")
            if e.id in BUILTIN_NAMES:
                if e.id not in self.scope.quiet:
                    self.sink.error(e.loc, f"'{e.id}' is a builtin function; call it")
                return e
            self.scope.undefined(e.loc, e.id)
            return e
        if s.ref == "func":
            self.sink.error(e.loc, f"'{e.id}' is a device function; call it")
            return e
        return N.replace(e, ty=s.ty, ref=s.ref)

    def x_Unary(self, e: N.Unary) -> N.Expr:
        x = self.scalar_expr(e.operand)
        t = scalar_type(x)
        if t is None:
            return N.replace(e, operand=x)
        if e.op == "not":
            return N.replace(e, operand=x, ty=BOOL)
        if e.op == "~" and not t.is_int:
            self.sink.error(e.loc, f"'~' needs an integer operand, not {t}")
            return N.replace(e, operand=x)
        if t.kind == "bool":
            if e.op == "~":
                self.sink.error(e.loc, "'~' needs an integer operand, not bool")
                return N.replace(e, operand=x)
            x, t = self.coerce(x, I32), I32
        return N.replace(e, operand=x, ty=t)

    def binary_type(self, op: str, a: N.Expr, b: N.Expr, loc: Loc) -> tuple[N.Expr, N.Expr, ScalarType | None]:
        ta, tb = scalar_type(a), scalar_type(b)
        if ta is None or tb is None:
            return a, b, None
        rule = operand_types(op, ta, self.is_weak(a), tb, self.is_weak(b))
        if isinstance(rule, str):
            self.sink.error(loc, rule)
            return a, b, None
        ta2, tb2, res = rule
        return (retype(a, ta2) if ta2 != ta else a), (retype(b, tb2) if tb2 != tb else b), res

    def x_BinOp(self, e: N.BinOp) -> N.Expr:
        a = self.scalar_expr(e.left)
        b = self.scalar_expr(e.right)
        a, b, ty = self.binary_type(e.op, a, b, e.loc)
        return N.replace(e, left=a, right=b, ty=ty)

    def x_Compare(self, e: N.Compare) -> N.Expr:
        if len(e.ops) > 1:
            self.sink.error(e.loc, "chained comparisons are not allowed; combine them with 'and' "
                            "(a < b and b < c)")
            return e
        a = self.scalar_expr(e.operands[0])
        b = self.scalar_expr(e.operands[1])
        a, b, _ = self.binary_type("==", a, b, e.loc)
        ok = a.ty is not None and b.ty is not None
        return N.replace(e, operands=(a, b), ty=BOOL if ok else None)

    def x_BoolOp(self, e: N.BoolOp) -> N.Expr:
        a = self.scalar_expr(e.left)
        b = self.scalar_expr(e.right)
        ok = a.ty is not None and b.ty is not None
        return N.replace(e, left=a, right=b, ty=BOOL if ok else None)

    def x_Ternary(self, e: N.Ternary) -> N.Expr:
        c = self.scalar_expr(e.cond, "condition")
        a = self.scalar_expr(e.then)
        b = self.scalar_expr(e.orelse)
        if a.ty is None or b.ty is None:
            return N.replace(e, cond=c, then=a, orelse=b)
        a, b, ty = self.binary_type("+", a, b, e.loc)
        if a.ty == BOOL and b.ty == BOOL:
            ty = BOOL
        return N.replace(e, cond=c, then=a, orelse=b, ty=ty)

    def coerce(self, e: N.Expr, ty: ScalarType) -> N.Expr:
        """Record an implicit conversion of a checked scalar to `ty` (weak literals are retyped)."""
        if e.ty == ty or e.ty is None:
            return e
        if self.is_weak(e) and isinstance(e.ty, ScalarType) and literal_adopts(e.ty, ty):
            return retype(e, ty)
        return N.Call(e.loc, N.Name(e.loc, ty.name, ref="cast"), (e,), (), ty)

    def assignable(self, value: N.Expr, dst: ScalarType, loc: Loc, what: str) -> N.Expr:
        src = value.ty
        if src is None:
            return value
        if not is_scalar(src):
            self.sink.error(value.loc, f"cannot assign {type_name(src)} to {what}")
            return N.replace(value, ty=None) if hasattr(value, "ty") else value
        if self.is_weak(value) and literal_adopts(src, dst):
            return retype(value, dst)
        if not convertible(src, dst):
            hint = f"; use {dst.name}(...)" if dst.kind != "bool" or src.is_numeric else ""
            self.sink.error(loc, f"cannot convert {src} to {dst} implicitly in assignment to {what}{hint}")
            return value
        return self.coerce(value, dst)

    # ---- indexing
    def x_Index(self, e: N.Index) -> N.Expr:
        base = self.fc.expr(e.base)
        bt = base.ty
        if bt is None:
            return N.replace(e, base=base)
        if isinstance(bt, N.TensorType):
            rank, elem = len(bt.dims), bt.elem
        elif isinstance(bt, N.ArrayType):
            rank, elem = len(bt.shape), bt.elem
        else:
            self.sink.error(e.loc, f"{type_name(bt)} cannot be indexed")
            return N.replace(e, base=base)
        if any(isinstance(i, N.Slice) for i in e.indices):
            self.sink.error(e.loc, "a slice (view) is only allowed as an argument of tcopy or tcopy_async")
            return N.replace(e, base=base)
        if len(e.indices) != rank:
            self.sink.error(e.loc, f"'{base_name(base)}' has {rank} dimension{'s' if rank != 1 else ''} "
                            f"but is indexed with {len(e.indices)}")
            return N.replace(e, base=base)
        idx: list[N.Expr] = []
        for i in e.indices:
            t = self.scalar_expr(i, "index")
            it = scalar_type(t)
            if it is not None and not it.is_int:
                self.sink.error(i.loc, f"index must be an integer, not {it}")
            idx.append(t)
        return N.replace(e, base=base, indices=tuple(idx), ty=elem)

    def x_Attr(self, e: N.Attr) -> N.Expr:
        sym = self.scope.lookup(e.base.id) if isinstance(e.base, N.Name) else None
        if isinstance(e.base, N.Name) and e.base.id == "tshared" and e.name == "alloc":
            self.sink.error(e.loc, "tshared.alloc is only allowed as the value of an assignment at the "
                            "top level of a kernel body")
        elif e.name == "shape" and sym is not None and isinstance(sym.ty, (N.TensorType, N.ArrayType)):
            dims = sym.ty.dims if isinstance(sym.ty, N.TensorType) else sym.ty.shape
            names = [d.id if isinstance(d, N.Name) else str(d.value) if isinstance(d, N.IntLit) else str(d)
                     for d in dims]
            self.sink.error(e.loc, f"'{sym.name}' has no .shape: its dimensions are [{', '.join(names)}], which the "
                            f"body uses by name (write {names[0]} for {sym.name}.shape[0])")
        else:
            self.sink.error(e.loc, f"unknown attribute '{e.name}'")
        return e

    def x_TupleLit(self, e: N.TupleLit) -> N.Expr:
        self.sink.error(e.loc, "a tuple is only allowed in a kernel header (tile[(x, y)])")
        return e

    def x_ListLit(self, e: N.ListLit) -> N.Expr:
        self.sink.error(e.loc, "a list is only allowed in a constant table or an @autotune decorator")
        return e

    def x_Slice(self, e: N.Slice) -> N.Expr:
        self.sink.error(e.loc, "a slice is only allowed inside [] of a tcopy argument")
        return e


def base_name(e: N.Expr) -> str:
    return e.id if isinstance(e, N.Name) else "expression"


def describe(e: object) -> str:
    return {"Slice": "a slice", "Keyword": "a keyword argument"}.get(type(e).__name__, type(e).__name__)


def type_name(t: N.Type | None) -> str:
    if isinstance(t, ScalarType):
        return t.name
    if isinstance(t, N.TensorType):
        return f"tensor {t.elem}[{len(t.dims)}-D]"
    if isinstance(t, N.ArrayType):
        what = {"shared": "shared array", "regs": "register array", "const": "constant table",
                "frag": "fragment"}[t.space]
        return f"{what} {t.elem}{list(t.shape)}"
    if isinstance(t, N.ViewType):
        return "view"
    if isinstance(t, N.TupleType):
        return f"{len(t.items)} values ({', '.join(x.name for x in t.items)})"
    if isinstance(t, N.StrType):
        return "string"
    return "no value"
