"""Type checking of `tmma`'s operands that are views of shared arrays (spec section 14, v3):
`tmma(acc, As[:, kk:kk + 16], Bs[kk:kk + 16, :])`. A view has two sliced dimensions of constant
extent (the operand's shape, checked against the fragment's by the rule of tmma in frags.py) over
a shared array of constant shape, and lies inside it: a start that is a compile-time constant is
checked here; others are checked by the plan-fragments pass where their range is known
(transpile/passes/mma_views.py), and at run time in check_bounds builds. `MmaViews` is a part of
the type checker, used by frags.Fragments."""

from __future__ import annotations

from tessera.frontend import nodes as N
from tessera.transpile.checks.expr import base_name, type_name
from tessera.transpile.checks.scope import Part


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


__all__ = ["MmaViews"]
