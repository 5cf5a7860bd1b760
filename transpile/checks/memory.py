"""Type checking of the memory builtins (spec section 7): atomics (with their scopes), `tcopy` and
`tcopy_async` with the views they copy between (`A[r0:r0 + BM, c]`, extents constant), `tcommit`
and `twait`. `MemoryBuiltins` is a part of the type checker (typecheck.FunctionChecker) that provides
these typing rules; the fragments' tload and tstore check their views here too, and `MmaViews` types
tmma's operands that are views of shared arrays (`tmma(acc, As[:, kk:kk + 16], Bs[kk:kk + 16, :])`)
for frags.Fragments: their constant starts are checked here, the others by the plan-fragments pass
(transpile/passes/mma_views.py) and at run time in check_bounds builds."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from tessera.base.dtypes import I32, ScalarType
from tessera.frontend import nodes as N
from tessera.transpile.checks.expr import base_name, scalar_type, type_name
from tessera.transpile.checks.rules import Rule, check_arity, scope_arg, typed_call
from tessera.transpile.checks.scope import Part

if TYPE_CHECKING:
    pass


def same_expr(a: object, b: object) -> bool:
    """Structural equality of two expressions, ignoring locations and types."""
    if type(a) is not type(b):
        return False
    if not dataclasses.is_dataclass(a):
        return a == b
    for f in dataclasses.fields(a):
        if f.name in ("loc", "ty", "ref"):
            continue
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, tuple):
            if not isinstance(y, tuple) or len(x) != len(y) or not all(same_expr(p, q) for p, q in zip(x, y)):
                return False
        elif not same_expr(x, y):
            return False
    return True


class MemoryBuiltins(Part):
    """The type checker's part for atomics, tcopy, tcopy_async, tcommit and twait, and views."""

    def rules(self) -> dict[str, Rule]:
        return {"atomic": self.rule_atomic, "tcopy": self.rule_tcopy, "tcopy_async": self.rule_tcopy_async,
                "tcommit": self.rule_tcommit, "twait": self.rule_twait}

    def atomic_target(self, ref: N.Expr, name: str) -> N.Expr:
        if not isinstance(ref, N.Index):
            self.sink.error(ref.loc, f"the first argument of {name}() must be an element of a mut tensor or "
                            "a shared array, such as out[i]")
            return ref
        t = self.fc.expr(ref)
        if not isinstance(t, N.Index):
            return t
        base_ty = t.base.ty
        if isinstance(base_ty, N.TensorType) and not base_ty.mut:
            self.sink.error(ref.loc, f"'{base_name(t.base)}' is not mut; declare it 'mut' to update it atomically")
            return N.replace(t, ty=None)
        if isinstance(base_ty, N.ArrayType) and base_ty.space != "shared":
            self.sink.error(ref.loc, f"atomics need a tensor or shared array, not a {type_name(base_ty)}")
            return N.replace(t, ty=None)
        return t

    def rule_atomic(self, e: N.Call, name: str) -> N.Expr:
        nval = 2 if name == "atomic_cas" else 1
        if not check_arity(self.sink, e, name, 1 + nval, 2 + nval, ("scope",)):
            return e
        ref = self.atomic_target(e.args[0], name)
        scope = scope_arg(self.sink, e, name, 1 + nval)
        vals = [self.exprs.scalar_expr(v, f"value of {name}()") for v in e.args[1:1 + nval]]
        if ref.ty is None or scope is None or any(v.ty is None for v in vals):
            return e
        # A typed target is an element of a tensor or shared array (atomic_target).
        assert isinstance(ref, N.Index) and isinstance(ref.ty, ScalarType), ref
        elem = ref.ty
        ok_types = {"i32", "u32", "i64", "u64", "f32", "f64"}
        if name in ("atomic_add", "atomic_sub", "atomic_exch"):
            ok_types |= {"f16", "bf16"}
        if name in ("atomic_and", "atomic_or", "atomic_xor"):
            ok_types -= {"f32", "f64"}
        if name in ("atomic_inc", "atomic_dec") and elem.name != "u32":
            self.sink.error(e.args[0].loc, f"{name}() needs a u32 element, not {elem}")
            return e
        if elem.name not in ok_types:
            self.sink.error(e.args[0].loc, f"{name}() is not available for {elem} elements")
            return e
        if isinstance(ref.base.ty, N.ArrayType):
            scope = "group"
        vals = [self.exprs.assignable(v, elem, v.loc, f"an element of '{base_name(ref.base)}'") for v in vals]
        return typed_call(e, name, (ref, *vals), elem, (N.Keyword(e.loc, "scope", N.StrLit(e.loc, scope, N.STR)),))

    def rule_tcopy(self, e: N.Call, name: str) -> N.Expr:
        if not check_arity(self.sink, e, name, 2):
            return e
        for a in e.args:
            root = a.base if isinstance(a, N.Index) else a
            if not isinstance(root, N.Name):
                continue
            sym = self.scope.lookup(root.id)
            if self.fc.fn.kind == "device" and sym is not None and sym.ref == "param" \
                    and isinstance(sym.ty, N.TensorType):
                self.sink.error(a.loc, f"'{root.id}' is an array parameter of a device function, which may be global "
                                f"or shared memory, so {name}() cannot copy through it; call {name}() in the "
                                f"kernel, where the shared array is known")
                return e
        dst = self.view(e.args[0], name, "destination")
        src = self.view(e.args[1], name, "source")
        if dst is None or src is None:
            return e
        dt, st = dst.ty, src.ty
        assert isinstance(dt, N.ViewType) and isinstance(st, N.ViewType), (dt, st)  # what view() gives
        if isinstance(dt.base, N.TensorType) and isinstance(st.base, N.TensorType):
            self.sink.error(e.loc, "tcopy() copies global<->shared or shared->shared, not global->global")
            return e
        if isinstance(dt.base, N.TensorType) and not dt.base.mut:
            self.sink.error(e.args[0].loc, f"'{_root(dst)}' is not mut; declare it 'mut' to store to it")
            return e
        if dt.base.elem != st.base.elem:
            self.sink.error(e.loc, f"tcopy() needs the same element type on both sides, got "
                            f"{dt.base.elem} and {st.base.elem}")
            return e
        if dt.extents != st.extents:
            self.sink.error(e.loc, f"tcopy() shapes differ: destination {list(dt.extents)}, source "
                            f"{list(st.extents)}")
            return e
        if len(dt.extents) > 3:
            self.sink.error(e.loc, "tcopy() supports views of at most 3 dimensions")
            return e
        return typed_call(e, name, (dst, src), N.VOID)

    def rule_tcopy_async(self, e: N.Call, name: str) -> N.Expr:
        typed = self.rule_tcopy(e, name)
        if not isinstance(typed, N.Call) or typed.ty is None:
            return typed
        dst, src = (a.ty for a in typed.args)
        assert isinstance(dst, N.ViewType) and isinstance(src, N.ViewType)
        if not isinstance(dst.base, N.ArrayType) or not isinstance(src.base, N.TensorType):
            self.sink.error(e.loc, "tcopy_async() copies a view of a global tensor into shared memory; "
                            "use tcopy() for the other directions")
            return e
        return typed

    def rule_tcommit(self, e: N.Call, name: str) -> N.Expr:
        check_arity(self.sink, e, name, 0)
        return typed_call(e, name, (), N.VOID)

    def rule_twait(self, e: N.Call, name: str) -> N.Expr:
        if not check_arity(self.sink, e, name, 0, 1, ("n",)):
            return e
        arg = e.args[0] if e.args else next((k.value for k in e.kwargs if k.name == "n"), None)
        if arg is not None and e.args and e.kwargs:
            self.sink.error(e.kwargs[0].loc, "twait() got n twice")
            return e
        n = 0 if arg is None else self.scope.const_int(arg, "the n of twait() (groups left pending)", 0, 255)
        if n is None:
            return e
        return typed_call(e, name, (N.IntLit(e.loc, n, I32),), N.VOID)

    def constant_shape(self, ty: N.ArrayType, e: N.Expr, name: str) -> bool:
        sized = [d for d in ty.shape if isinstance(d, str)]
        if sized:
            array = base_name(e.base if isinstance(e, N.Index) else e)
            label = name if " " in name else f"{name}()"
            self.sink.error(e.loc, f"{label} needs shared arrays of constant shape; '{array}' is sized at "
                            f"launch by '{sized[0]}'")
        return not sized

    def view(self, e: N.Expr, name: str, what: str) -> N.Index | None:
        if isinstance(e, N.Name):
            t = self.fc.expr(e)
            if t.ty is None:
                return None
            if isinstance(t.ty, N.ArrayType) and t.ty.space == "shared":
                if not self.constant_shape(t.ty, e, name):
                    return None
                return N.Index(e.loc, t, (), N.ViewType(t.ty, tuple(int(d) for d in t.ty.shape)))
            self.sink.error(e.loc, f"the {what} of {name}() must be a view (A[r0:r0 + BM, c]) or a shared array")
            return None
        if not isinstance(e, N.Index):
            self.sink.error(e.loc, f"the {what} of {name}() must be a view (A[r0:r0 + BM, c]) or a shared array")
            return None
        base = self.fc.expr(e.base)
        bt = base.ty
        if bt is None:
            return None
        dims: tuple[N.Expr, ...]
        if isinstance(bt, N.TensorType):
            dims = bt.dims
        elif isinstance(bt, N.ArrayType) and bt.space == "shared":
            # A tile's vector access may view an array sized at launch (its own extent is constant).
            if name != "vector access" and not self.constant_shape(bt, e, name):
                return None
            dims = tuple(self.fc.expr(N.Name(e.loc, d)) if isinstance(d, str) else N.IntLit(e.loc, int(d))
                         for d in bt.shape)
        else:
            self.sink.error(e.loc, f"the {what} of {name}() must be a view of a tensor or a shared array")
            return None
        if len(e.indices) != len(dims):
            self.sink.error(e.loc, f"'{base_name(base)}' has {len(dims)} dimensions but is indexed with {len(e.indices)}")
            return None
        idx: list[N.Expr] = []
        extents: list[int] = []
        for i, d in zip(e.indices, dims):
            if isinstance(i, N.Slice):
                lo = self.exprs.scalar_expr(i.lo, "slice start") if i.lo is not None else N.IntLit(i.loc, 0, I32)
                hi = self.exprs.scalar_expr(i.hi, "slice stop") if i.hi is not None else None
                ext = self.extent(i, lo, hi, d)
                if ext is None:
                    return None
                extents.append(ext)
                idx.append(N.Slice(i.loc, self.exprs.coerce(lo, I32), hi, I32))
            else:
                t = self.exprs.scalar_expr(i, "index")
                it = scalar_type(t)
                if it is not None and not it.is_int:
                    self.sink.error(i.loc, f"index must be an integer, not {it}")
                    return None
                idx.append(self.exprs.coerce(t, I32))
        if not extents:
            self.sink.error(e.loc, f"the {what} of {name}() has no slice; write A[r0:r0 + n] for a view")
            return None
        return N.Index(e.loc, base, tuple(idx), N.ViewType(bt, tuple(extents)))

    def extent(self, s: N.Slice, lo: N.Expr, hi: N.Expr | None, dim: N.Expr) -> int | None:
        if hi is None:
            hi = dim
        v = self.scope.try_const(N.BinOp(s.loc, "-", hi, lo))
        if not isinstance(v, int):
            v = self._difference(hi, lo)
        if not isinstance(v, int) or isinstance(v, bool):
            self.sink.error(s.loc, "the extent of a view (stop - start) must be a compile-time constant: write "
                            "the slice as A[r0:r0 + BM] with BM constant")
            return None
        if v < 1:
            self.sink.error(s.loc, f"the extent of a view (stop - start) must be at least 1, not {v}")
            return None
        return v

    def _difference(self, hi: N.Expr, lo: N.Expr) -> int | None:
        """`hi - lo` when both are sums of the same run-time terms with constant coefficients plus
        constants (`y0 + BY + 1` less `y0 - 1` is BY + 2), else None."""
        terms: list[tuple[N.Expr, int]] = []
        const = self._linear(hi, 1, terms) + self._linear(lo, -1, terms)
        return const if all(k == 0 for _, k in terms) else None

    def _linear(self, e: N.Expr, sign: int, terms: list[tuple[N.Expr, int]]) -> int:
        """Adds the run-time terms of `sign * e` to `terms` (merging equal ones) and returns its
        constant part."""
        c = self.scope.try_const(e)
        if isinstance(c, int) and not isinstance(c, bool):
            return sign * c
        if isinstance(e, N.BinOp) and e.op in ("+", "-"):
            return self._linear(e.left, sign, terms) + self._linear(e.right, -sign if e.op == "-" else sign, terms)
        if isinstance(e, N.Unary) and e.op in ("-", "+"):
            return self._linear(e.operand, -sign if e.op == "-" else sign, terms)
        if isinstance(e, N.BinOp) and e.op == "*":
            for factor, rest in ((e.left, e.right), (e.right, e.left)):
                k = self.scope.try_const(factor)
                if isinstance(k, int) and not isinstance(k, bool):
                    return self._linear(rest, sign * k, terms)
        for n, (t, k) in enumerate(terms):
            if same_expr(t, e):
                terms[n] = (t, k + sign)
                return 0
        terms.append((e, sign))
        return 0


class MmaViews(Part):
    """tmma's operands that are views: their types, and the typed views for the call."""

    def __init__(self, fc) -> None:  # noqa: ANN001 - typecheck.FunctionChecker (an import cycle)
        super().__init__(fc)
        self._typed: dict[int, N.Index] = {}  # id of the operand as written -> the typed view

    def operand(self, e: N.Index, name: str, what: str) -> N.ArrayType | None:
        """The operand's type as a shared array of the view's extents, or None after its error."""
        view = self.fc.memory.view(e, name, what)
        if view is None:
            return None
        assert isinstance(view.ty, N.ViewType)
        base = view.ty.base
        array = base_name(view.base)
        if not (isinstance(base, N.ArrayType) and base.space == "shared"):
            self.sink.error(e.loc, f"the {what} of {name}() must be a shared array or a view of one; '{array}' is "
                            f"a {type_name(base)} (copy the block to shared memory first)")
            return None
        extents = view.ty.extents
        if len(extents) != 2:
            self.sink.error(e.loc, f"the {what} of {name}() is a 2-D view (two sliced dimensions); "
                            f"this one has {len(extents)}")
            return None
        kept = iter(extents)
        for k, (i, dim) in enumerate(zip(view.indices, base.shape)):
            extent = next(kept) if isinstance(i, N.Slice) else 1
            start = self.scope.try_const(i.lo if isinstance(i, N.Slice) and i.lo is not None else i)
            if isinstance(start, int) and not isinstance(start, bool) and (start < 0 or start + extent > int(dim)):
                shape = ", ".join(str(d) for d in base.shape)
                self.sink.error(e.loc, f"the {what} of {name}() reaches outside '{array}' [{shape}]: dimension {k} "
                                f"covers {start} to {start + extent - 1}; tmma() reads views that lie inside "
                                f"their shared array")
                return None
        self._typed[id(e)] = view
        return N.ArrayType(base.elem, extents, "shared")

    def typed(self, e: N.Expr) -> N.Expr:
        """The typed argument: the view checked by `operand`, or the array or fragment as a name."""
        view = self._typed.pop(id(e), None)
        return view if view is not None else self.fc.expr(e)




def _root(v: N.Expr) -> str:
    return v.base.id if isinstance(v, N.Index) and isinstance(v.base, N.Name) else "?"
