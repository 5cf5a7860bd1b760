"""Type checking of device function calls (spec section 6): scalar and array arguments (a tensor
parameter or a shared array for `v: f32[n]`, the callee's shape symbols bound from the caller's
extents), several results (a `TupleType` call, only in a tuple assignment or as a statement), and
the instance of a generic device function that the arguments bind (transpile/checks/generics.py).
`DeviceCalls` is a part of the type checker (typecheck.FunctionChecker); calls.BuiltinCalls sends it
the calls of device functions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tessera.base.dtypes import I32, SCALARS, ScalarType
from tessera.base.errors import Note
from tessera.frontend import nodes as N
from tessera.transpile.checks.expr import scalar_type, type_name
from tessera.transpile.checks.rules import check_warps
from tessera.transpile.checks.scope import Part, Sym

if TYPE_CHECKING:
    pass


class DeviceCalls(Part):
    """The type checker's part for calls of device functions."""

    def instantiate(self, e: N.Call, sym: Sym) -> Sym | None:
        """The instance of a generic device function that a call's arguments bind (transpile/checks/generics.py):
        each type parameter takes the type of the first argument whose parameter has it (a literal
        binds only where no other argument does, with its own type: i32 or f32)."""
        fn: N.FuncDef = sym.extra["def"]
        names = {t.name: t for t in fn.type_params}
        bound: dict[str, tuple[ScalarType, str, bool]] = {}  # T -> (type, parameter, from a literal)
        for a, p in zip(e.args, fn.params):
            if p.type_name not in names:
                continue
            if p.dims is not None:  # an array parameter `v: T[n]`: T is the array's element type
                x = self.fc.expr(a)
                if x.ty is None:
                    return None
                if not isinstance(x.ty, (N.TensorType, N.ArrayType)):
                    self.sink.error(a.loc, f"argument '{p.name}' of {fn.name}() is an array ({p.type_name}[...]): "
                                    f"pass a tensor parameter or a shared array, not {type_name(x.ty)}")
                    return None
                ty, weak = x.ty.elem, False
            else:
                t = self.exprs.scalar_expr(a, f"argument '{p.name}' of {fn.name}()")
                scalar = scalar_type(t)
                if scalar is None:
                    return None
                ty, weak = scalar, self.exprs.is_weak(t)
            prev = bound.get(p.type_name)
            if prev is None or (prev[2] and not weak):
                bound[p.type_name] = (ty, p.name, weak)
            elif not weak and prev[0] != ty:
                self.sink.error(a.loc, f"{fn.name}(): type parameter '{p.type_name}' is {prev[0]} from argument "
                                f"'{prev[1]}' but {ty} from argument '{p.name}'; cast one of them")
                return None
        values: list[tuple[str, str]] = []
        for tp in fn.type_params:
            ty = bound[tp.name][0]
            if tp.allowed is not None and ty.name not in tp.allowed:
                self.sink.error(e.loc, f"{fn.name}(): {tp.name} = {ty} (from argument '{bound[tp.name][1]}') is not "
                                f"one of the types allowed for '{tp.name}' ({', '.join(tp.allowed)})",
                                Note("type parameters here", fn.loc))
                return None
            values.append((tp.name, ty.name))
        return sym.extra["instantiate"](fn, tuple(values))

    def call_device(self, e: N.Call, sym: Sym) -> N.Expr:
        fn: N.FuncDef = sym.extra["def"]
        if sym.extra.get("generic") and not e.kwargs and len(e.args) == len(fn.params):
            inst = self.instantiate(e, sym)
            if inst is None:
                return e
            sym, fn = inst, inst.extra["def"]
        if e.kwargs:
            self.sink.error(e.kwargs[0].loc, "device functions take positional arguments only")
            return e
        if len(e.args) != len(fn.params):
            self.sink.error(e.loc, f"{fn.name}() takes {len(fn.params)} arguments, got {len(e.args)}")
            return e
        if any(p.ty is None for p in fn.params) or (fn.ret is not None and fn.ret not in SCALARS) \
                or any(t not in SCALARS for t in fn.rets):
            # The signature has an unknown type, already reported at the definition.
            for a in e.args:
                self.fc.expr(a)
            return e
        args: list[N.Expr] = []
        shapes: dict[str, N.Expr] = {}  # the callee's shape symbols: the extents they bind to
        ok = True
        for a, p in zip(e.args, fn.params):
            given = self.scope.lookup(a.id) if isinstance(a, N.Name) else None
            if given is not None and given.ref == "frag":
                self.sink.error(a.loc, f"'{given.name}' is a fragment: passing fragments to device functions is not "
                                f"supported yet (argument '{p.name}' of {fn.name}()); write the fragment "
                                f"statements in the kernel")
                ok = False
                continue
            if isinstance(p.ty, N.TensorType):
                x = self.array_argument(a, p, fn, shapes)
                ok = ok and x is not None
                args.append(x if x is not None else a)
                continue
            assert isinstance(p.ty, ScalarType)
            t = self.fc.expr(a)
            if isinstance(t.ty, (N.TensorType, N.ArrayType)):
                self.sink.error(a.loc, f"argument '{p.name}' of {fn.name}() is a scalar {p.ty}, not an array; "
                                f"'{_base(t)}' is a {type_name(t.ty)} (index it to pass one element)")
                ok = False
                continue
            t = self._scalar_typed(t, f"argument '{p.name}' of {fn.name}()")
            args.append(self.exprs.assignable(t, p.ty, a.loc, f"parameter '{p.name}'"))
        if not ok:
            return e
        # The extents of the callee's shape symbols follow the arguments, in the order the symbols
        # first appear in its parameters (lower: the callee's hidden `int` parameters).
        for p in fn.params:
            if isinstance(p.ty, N.TensorType):
                for d in p.ty.dims:
                    if isinstance(d, N.Name) and d.ref == "shape" and d.id in shapes:
                        args.append(shapes.pop(d.id))
        if sym.extra["warp"]:
            check_warps(self.fc, e, f"{fn.name}() uses warp operations and")
        ret: N.Type = N.TupleType(tuple(SCALARS[t] for t in fn.rets)) if fn.rets else \
            SCALARS[fn.ret] if fn.ret else N.VOID
        return N.Call(e.loc, N.Name(e.func.loc, fn.name, ref="func"), tuple(args), (), ret)

    def _scalar_typed(self, t: N.Expr, what: str) -> N.Expr:
        """An already typed argument that must be a scalar."""
        if isinstance(t.ty, N.TupleType):
            return self.exprs.scalar_expr(t, what)  # reported there
        if t.ty is not None and not isinstance(t.ty, ScalarType):
            self.sink.error(t.loc, f"{what} must be a scalar value, not {type_name(t.ty)}")
            return N.replace(t, ty=None)
        return t

    def array_argument(self, a: N.Expr, p: N.Param, fn: N.FuncDef, shapes: dict[str, N.Expr]) -> N.Expr | None:
        """A tensor or shared array passed for the array parameter `p` of device function `fn`;
        binds the callee's shape symbols to the argument's extents (in `shapes`)."""
        pty = p.ty
        assert isinstance(pty, N.TensorType)
        what = f"argument '{p.name}' of {fn.name}()"
        want = f"{'mut ' if pty.mut else ''}{pty.elem}[{', '.join(_dim_text(d) for d in pty.dims)}]"
        x = self.fc.expr(a)
        t = x.ty
        if t is None:
            return None
        if not isinstance(x, N.Name) or not isinstance(t, (N.TensorType, N.ArrayType)):
            self.sink.error(a.loc, f"{what} is an array ({want}): pass a tensor parameter or a shared array, "
                            f"not {type_name(t)}")
            return None
        if isinstance(t, N.ArrayType) and t.space != "shared":
            self.sink.error(a.loc, f"{what} is an array ({want}): a {type_name(t)} cannot be passed, only tensor "
                            "parameters and shared arrays")
            return None
        # A launch-sized shared array's dimension is the integer parameter that sizes it.
        adims: tuple[N.Expr, ...] = t.dims if isinstance(t, N.TensorType) else \
            tuple(N.IntLit(a.loc, d, I32) if isinstance(d, int) else
                  N.Name(a.loc, d, self.scope.params[d].ty, "param") for d in t.shape)
        if t.elem != pty.elem:
            self.sink.error(a.loc, f"{what} has element type {pty.elem}, but '{x.id}' has {t.elem} elements")
            return None
        if len(adims) != len(pty.dims):
            self.sink.error(a.loc, f"{what} has {len(pty.dims)} dimension{'s' if len(pty.dims) != 1 else ''} "
                            f"({want}), but '{x.id}' has {len(adims)}")
            return None
        if pty.mut and isinstance(t, N.TensorType) and not t.mut:
            self.sink.error(a.loc, f"{what} is mut ({fn.name}() may store to it), but '{x.id}' is not; declare "
                            f"'{x.id}: mut {t.elem}[...]'")
            return None
        for k, (pd, ad) in enumerate(zip(pty.dims, adims)):
            if isinstance(pd, N.IntLit):
                if isinstance(ad, N.IntLit) and ad.value != pd.value:
                    self.sink.error(a.loc, f"dimension {k} of {what} is {pd.value}, but '{x.id}' has {ad.value}")
                    return None
                continue
            assert isinstance(pd, N.Name)
            extent = ad if ad.ty == I32 or isinstance(ad, N.IntLit) else \
                N.Call(a.loc, N.Name(a.loc, "i32", ref="cast"), (ad,), (), I32)
            if isinstance(extent, N.IntLit):
                extent = N.IntLit(a.loc, extent.value, I32)
            prev = shapes.get(pd.id)
            if prev is None:
                shapes[pd.id] = extent
            elif isinstance(prev, N.IntLit) and isinstance(extent, N.IntLit) and prev.value != extent.value:
                self.sink.error(a.loc, f"the shape symbol '{pd.id}' of {fn.name}() is {prev.value} from an earlier "
                                f"argument, but dimension {k} of '{x.id}' is {extent.value}")
                return None
        return x


def _dim_text(d: N.Expr) -> str:
    return str(d.value) if isinstance(d, N.IntLit) else d.id if isinstance(d, N.Name) else "?"


def _base(e: N.Expr) -> str:
    return e.id if isinstance(e, N.Name) else "expression"
