"""Type checking of per-tile vector access (spec section 15): a register array and a 1-D view with
the same constant extent assigned to each other, `r[:] = X[i, j:j + 8]` (a load) and
`Y[i, j:j + 8] = r` (a store), of global tensors and shared arrays.

Before:  r = tregs(f16[8])
         r[:] = X[i, j:j + 8]
After:   Assign(Index(r, ()): view[8] of registers f16[8], Index(X, (i, Slice(j, j + 8))): view[8] of f16[m, n])

Both sides are typed as views (`N.ViewType`); the register array's side has no indices. Each tile
moves its own elements; `lower` makes the `VecMove` statement of the lowered IR. `VectorAccess` is a
part of the type checker (typecheck.FunctionChecker): assignments.Assignments asks it first whether
an assignment is one (`claims`), and it reports every misuse at the place it is written: a partial
or multi-dimensional register array, a value that is not a view, a view that is not 1-D, extents or
element types that differ, a store to a tensor that is not `mut` or to a constant table.
"""

from __future__ import annotations

from tessera.frontend import nodes as N
from tessera.transpile.checks.expr import base_name, type_name
from tessera.transpile.checks.scope import Part, Sym

_EXAMPLE = "r[:] = X[i, j:j + 8] or X[i, j:j + 8] = r"


class VectorAccess(Part):
    """The type checker's part for assignments between a register array and a view."""

    def regs_sym(self, e: N.Expr) -> Sym | None:
        """The register array that `e` names (`r`, or the base of `r[...]`), if it names one."""
        name = e.base if isinstance(e, N.Index) else e
        sym = self.scope.lookup(name.id) if isinstance(name, N.Name) else None
        return sym if sym is not None and sym.ref == "regs" else None

    def claims(self, s: N.Assign) -> bool:
        """Whether `s` is a vector access: a sliced register array assigned (`r[:] = ...`), or a
        register array assigned to a sliced target (`Y[i, j:j + 8] = r`)."""
        t = s.target
        if not isinstance(t, N.Index) or not any(isinstance(i, N.Slice) for i in t.indices):
            return False
        return self.regs_sym(t) is not None or (isinstance(s.value, N.Name) and self.regs_sym(s.value) is not None)

    def assign(self, s: N.Assign) -> N.Stmt:
        assert isinstance(s.target, N.Index)
        if s.annotation:
            self.sink.error(s.loc, "only a name can have a type annotation")
        load = self.regs_sym(s.target) is not None
        regs_expr, view_expr = (s.target, s.value) if load else (s.value, s.target)
        regs = self.registers(regs_expr, load)
        view = self.memory_view(view_expr, load)
        if regs is None or view is None:
            return s
        rt, vt = regs.ty, view.ty
        assert isinstance(rt, N.ViewType) and isinstance(vt, N.ViewType)
        array = base_name(regs.base)
        memory = base_name(view.base) if isinstance(view, N.Index) else "?"
        if len(vt.extents) != 1:
            self.sink.error(view_expr.loc, f"a register array moves to and from a 1-D view, but this view of "
                            f"'{memory}' has {len(vt.extents)} sliced dimensions {list(vt.extents)}; index all "
                            f"but one dimension ({_EXAMPLE})")
            return s
        if rt.extents != vt.extents:
            self.sink.error(s.loc, f"'{array}' has {rt.extents[0]} elements but the view of '{memory}' has "
                            f"{vt.extents[0]}: a vector access moves views of the register array's extent")
            return s
        if rt.base.elem != vt.base.elem:
            self.sink.error(s.loc, f"'{array}' holds {rt.base.elem} but '{memory}' has {vt.base.elem} elements: a "
                            f"vector access does not convert (declare {array} = tregs({vt.base.elem}"
                            f"[{rt.extents[0]}]), or convert element by element)")
            return s
        target, value = (regs, view) if load else (view, regs)
        return N.replace(s, target=target, value=value)

    def registers(self, e: N.Expr, load: bool) -> N.Index | None:
        """The register array side, as a view of the whole array (None after an error)."""
        sym = self.regs_sym(e)
        if sym is None:
            self.sink.error(e.loc, f"a view is assigned a register array of its extent ({_EXAMPLE}); this value "
                            f"is {self._what(e)}")
            return None
        ty = sym.ty
        assert isinstance(ty, N.ArrayType)
        if isinstance(e, N.Index) and not (len(e.indices) == 1 and isinstance(e.indices[0], N.Slice)
                                           and e.indices[0].lo is None and e.indices[0].hi is None):
            self.sink.error(e.loc, f"a vector access moves the whole register array: write {sym.name}[:]")
            return None
        if len(ty.shape) != 1:
            self.sink.error(e.loc, f"a vector access moves a 1-D register array; '{sym.name}' is "
                            f"{type_name(ty)}")
            return None
        base = N.Name(e.loc, sym.name, ty, "regs")
        return N.Index(e.loc, base, (), N.ViewType(ty, (int(ty.shape[0]),)))

    def memory_view(self, e: N.Expr, load: bool) -> N.Index | None:
        """The global or shared side: a view with constant extents (None after an error)."""
        base = e.base if isinstance(e, N.Index) else e
        sym = self.scope.lookup(base.id) if isinstance(base, N.Name) else None
        if sym is None and isinstance(base, N.Name) and base.id not in self.scope.quiet:
            self.scope.undefined(base.loc, base.id)
            return None
        ty = sym.ty if sym is not None else None
        is_tensor = isinstance(ty, N.TensorType)
        is_shared = isinstance(ty, N.ArrayType) and ty.space == "shared"
        if not (is_tensor or is_shared) or (isinstance(e, N.Name) and not is_shared):
            if sym is not None or not isinstance(base, N.Name):
                self.sink.error(e.loc, f"a register array is assigned {'from' if load else 'to'} a 1-D view of a "
                                f"tensor or shared array ({_EXAMPLE}); this is {self._what(e)}")
            return None
        assert sym is not None and isinstance(ty, (N.TensorType, N.ArrayType))
        if not load and isinstance(ty, N.TensorType) and not ty.mut:
            self.sink.error(e.loc, f"cannot store to '{sym.name}': it is not mut; declare the parameter as "
                            f"'{sym.name}: mut {ty.elem}[...]'")
            return None
        if isinstance(e, N.Index) and not any(isinstance(i, N.Slice) for i in e.indices):
            self.sink.error(e.loc, f"this is one element of '{sym.name}'; a register array is assigned "
                            f"{'from' if load else 'to'} a view with a slice ({_EXAMPLE})")
            return None
        return self.fc.memory.view(e, "vector access", "view")

    def _what(self, e: N.Expr) -> str:
        if isinstance(e, N.Index) and isinstance(e.base, N.Name):
            sym = self.scope.lookup(e.base.id)
            what = "a view" if any(isinstance(i, N.Slice) for i in e.indices) else "an element"
            return f"{what} of the {type_name(sym.ty)}" if sym is not None and sym.ty is not None else what
        if isinstance(e, N.Name):
            sym = self.scope.lookup(e.id)
            return f"'{e.id}', {type_name(sym.ty)}" if sym is not None and sym.ty is not None else f"'{e.id}'"
        return "a value, not a view"
