"""Type checking of map kernels (spec section 8): a kernel whose body has a whole-tensor statement
(`Z[:] = alpha * X + Y`) computes every element of its tensors the same way.

Before:  Z[:] = alpha * X + Y           (X, Y: f32[n], Z: mut f32[n])
After:   Assign(Index(Z, ()): f32, BinOp(+, BinOp(*, Name(alpha): f32, Index(X, ()): f32), Index(Y, ()): f32))

In a map kernel a tensor's name is its element at the position being computed (typed as an
`Index` with no indices, what `lower` turns into the element of the map's loop). Its body has only
whole-tensor statements, assignments to locals (per element) and `pass`; the tensors it assigns
have the shape of the first one (the iteration space), those it reads broadcast to it by NumPy's
rules (spec section 15: a bias row `b: f32[N]` or a per-row scale `s: f32[M, 1]` over `f32[M, N]`); it uses no tile or group indices, shared memory, register arrays, cooperative
operations or atomics (constant tables may be indexed: a lookup is elementwise). A `vectorize(w)`
clause is allowed on map kernels only.

`MapKernel` is a part of the type checker (typecheck.FunctionChecker): the core's statement walk asks
it whether a statement is allowed, assignments.Assignments has it type whole-tensor targets, and it
hooks first into the checking of names, indexing and calls (FunctionChecker.x_Name, x_Index, x_Call).
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.base.errors import Loc, Note
from tessera.frontend import nodes as N
from tessera.transpile.builtins import BUILTINS, Coop
from tessera.transpile.checks.expr import base_name, type_name
from tessera.transpile.checks.scope import Part

_STATEMENT_WHAT = {"If": "an if statement", "While": "a while loop", "For": "a for loop", "Return": "return",
                   "Break": "break", "Continue": "continue", "ExprStmt": "a call statement"}


@dataclass
class MapState:
    """What a map kernel's statements have established so far."""

    first: Loc                                  # the first whole-tensor statement
    shape: tuple[N.Expr, ...] | None = None     # the tensors' common shape, from the first one named
    shape_of: str = ""
    shape_loc: Loc | None = None


def _dims_key(dims: tuple[N.Expr, ...]) -> tuple[object, ...]:
    return tuple(d.value if isinstance(d, N.IntLit) else d.id if isinstance(d, N.Name) else id(d) for d in dims)


def _dims_text(dims: tuple[N.Expr, ...]) -> str:
    return "[" + ", ".join(str(d.value) if isinstance(d, N.IntLit) else d.id if isinstance(d, N.Name) else "?"
                           for d in dims) + "]"


class MapKernel(Part):
    """The type checker's part for map kernels; what a map kernel's statements have established is
    the core's `FunctionChecker.map` (None outside a map kernel)."""

    def start_map(self) -> None:
        """Called once before the body: decide whether the function is a map kernel."""
        if self.fc.fn.kind == "kernel" and self.fc.fn.is_map:
            first = next(s for s in self.fc.fn.body if isinstance(s, (N.Assign, N.AugAssign))
                         and N.is_whole_tensor(s.target))
            self.fc.map = MapState(first.loc)
            # The iteration space is the shape of the first tensor assigned (spec section 15).
            target = first.target.base if isinstance(first.target, N.Index) else None
            if isinstance(target, N.Name):
                sym = self.scope.lookup(target.id)
                if sym is not None and sym.ref == "param" and isinstance(sym.ty, N.TensorType):
                    self.fc.map.shape, self.fc.map.shape_of, self.fc.map.shape_loc = sym.ty.dims, sym.name, target.loc
        elif self.fc.fn.config is not None and self.fc.fn.config.vectorize is not None:
            clause = next((c for d in self.fc.fn.decorators for c in d.clauses
                           if isinstance(c.func, N.Name) and c.func.id == "vectorize"), None)
            self.sink.error(clause.loc if clause else self.fc.fn.loc,
                            "vectorize(...) is for map kernels, whose body assigns whole tensors (Z[:] = X + Y); "
                            "this kernel has no whole-tensor statement")

    def map_allows(self, s: N.Stmt) -> bool:
        """Whether statement `s` may appear in this map kernel (reported when not)."""
        assert self.fc.map is not None
        if isinstance(s, N.Pass):
            return True
        if isinstance(s, (N.Assign, N.AugAssign)):
            if N.is_whole_tensor(s.target):
                return True
            if isinstance(s.target, N.TupleLit) and all(isinstance(x, N.Name) for x in s.target.items):
                return True  # `hi, lo = f(X)`: locals too
            if isinstance(s.target, N.Name):
                v = s.value
                array = (isinstance(v, N.Attr) or (isinstance(v, N.Call) and (
                    isinstance(v.func, N.Attr) or (isinstance(v.func, N.Name) and v.func.id == "tregs"))))
                if not array:
                    return True
                self.map_error(s.loc, "a map kernel has no shared memory or register arrays")
                return False
            self.map_error(s.target.loc, "a map kernel assigns whole tensors: write "
                           f"{base_name(s.target.base) if isinstance(s.target, N.Index) else 'Z'}[:] = ..., "
                           "not single elements")
            return False
        what = _STATEMENT_WHAT.get(type(s).__name__, "this statement")
        if isinstance(s, N.ExprStmt) and isinstance(s.expr, N.Call) and isinstance(s.expr.func, N.Name):
            what = f"{s.expr.func.id}()"
        hint = "; use `x if c else y` to choose per element" if isinstance(s, N.If) else ""
        self.map_error(s.loc, f"{what} is not allowed in a map kernel, whose body has only whole-tensor statements "
                       f"(Z[:] = ...) and assignments to locals{hint}; write a kernel with explicit indices for more")
        return False

    def map_error(self, loc: Loc, message: str) -> None:
        assert self.fc.map is not None
        self.sink.error(loc, message, Note("this kernel is a map kernel because of this whole-tensor statement",
                                           self.fc.map.first))

    def map_target(self, t: N.Expr) -> N.Expr:
        """The target of `Z[:] = ...`, typed as Z's element (ty None after an error)."""
        assert isinstance(t, N.Index)
        if self.fc.map is None and isinstance(t.base, N.Name) and self.scope.lookup(t.base.id) is None:
            self.scope.undefined(t.base.loc, t.base.id)  # quiet for a fragment whose declaration was refused
            return N.replace(t, ty=None)
        if self.fc.map is None:
            where = "inside a block" if self.fc.fn.kind == "kernel" else "in a device function"
            self.sink.error(t.loc, "whole-tensor statements (Z[:] = ...) make up the top level of a map kernel's "
                            f"body; this one is {where}")
            return N.replace(t, ty=None)
        if not isinstance(t.base, N.Name):
            self.sink.error(t.loc, "a whole-tensor statement assigns a tensor parameter: Z[:] = ...")
            return N.replace(t, ty=None)
        sym = self.scope.lookup(t.base.id)
        if sym is None:
            self.scope.undefined(t.base.loc, t.base.id)
            return N.replace(t, ty=None)
        ty = sym.ty
        if not isinstance(ty, N.TensorType) or sym.ref != "param":
            self.sink.error(t.loc, f"a whole-tensor statement assigns a tensor parameter; '{t.base.id}' is "
                            f"{type_name(ty)}")
            return N.replace(t, ty=None)
        full = all(isinstance(i, N.Slice) and i.lo is None and i.hi is None for i in t.indices)
        if not full or len(t.indices) not in (1, len(ty.dims)):
            self.sink.error(t.loc, f"a whole-tensor statement assigns every element: write {t.base.id}[:] "
                            "(a map kernel has no partial slices or indices)")
            return N.replace(t, ty=None)
        if not ty.mut:
            self.sink.error(t.loc, f"cannot store to '{t.base.id}': it is not mut; declare the parameter as "
                            f"'{t.base.id}: mut {ty.elem}[...]'")
            return N.replace(t, ty=None)
        self.same_shape(t.base.id, ty, t.base.loc)
        return N.Index(t.loc, N.replace(t.base, ty=ty, ref="param"), (), ty.elem)

    def same_shape(self, name: str, ty: N.TensorType, loc: Loc) -> None:
        m = self.fc.map
        assert m is not None
        if m.shape is None:
            m.shape, m.shape_of, m.shape_loc = ty.dims, name, loc
        elif _dims_key(ty.dims) != _dims_key(m.shape):
            assert m.shape_loc is not None
            self.sink.error(loc, f"'{name}' has shape {_dims_text(ty.dims)} but the map's tensors have shape "
                            f"{_dims_text(m.shape)}: every tensor a map kernel assigns has the same shape (use the same "
                            "shape symbols; the tensors it reads may broadcast)", Note(f"the shape of '{m.shape_of}'",
                                                                                     m.shape_loc))

    def broadcasts(self, name: str, ty: N.TensorType, loc: Loc) -> None:
        """A tensor the map reads: its shape broadcasts to the map's by NumPy's rules (dimensions
        aligned from the last; each equal or 1, missing leading ones are 1). Where a dimension is
        a shape symbol other than the map's, the launch checks it (LaunchError)."""
        m = self.fc.map
        assert m is not None
        if m.shape is None:
            m.shape, m.shape_of, m.shape_loc = ty.dims, name, loc
            return
        out = m.shape
        bad = len(ty.dims) > len(out) or any(
            isinstance(d, N.IntLit) and d.value != 1 and isinstance(o, N.IntLit) and d.value != o.value
            for d, o in zip(reversed(ty.dims), reversed(out)))
        if bad:
            assert m.shape_loc is not None
            self.sink.error(loc, f"'{name}' has shape {_dims_text(ty.dims)}, which does not broadcast to the map's "
                            f"shape {_dims_text(out)} (the shape of '{m.shape_of}'): aligned from the last, each "
                            "dimension must be the same or 1", Note(f"the shape of '{m.shape_of}'", m.shape_loc))

    # ---- expressions: a tensor's name is its element; no indices, tile ids or cooperation
    def name(self, e: N.Name, t: N.Expr) -> N.Expr:
        """Name `e` as typed so far `t`: in a map kernel a tensor's name is its element (of a
        tensor that broadcasts, the element the position being computed maps to)."""
        if self.fc.map is None or not isinstance(t.ty, N.TensorType):
            return t
        self.broadcasts(e.id, t.ty, e.loc)
        return N.Index(e.loc, t, (), t.ty.elem)

    def refuse_index(self, e: N.Index) -> N.Expr | None:
        """`e` after its error if it indexes something other than a constant table in a map kernel,
        else None (the next rule checks it)."""
        table = isinstance(e.base, N.Name) and (sym := self.scope.lookup(e.base.id)) is not None \
            and sym.ref == "table"
        if self.fc.map is not None and not table:
            self.sink.error(e.loc, "in a map kernel a tensor's name is its element at the position being computed; "
                            f"it cannot be indexed (write {base_name(e.base)}, not {base_name(e.base)}[...])")
            return e
        return None

    def refuse_call(self, e: N.Call) -> N.Expr | None:
        """`e` after its error if a map kernel cannot call what it calls, else None (calls.BuiltinCalls
        checks it)."""
        if self.fc.map is not None and isinstance(e.func, N.Name):
            name = e.func.id
            sym = self.scope.lookup(name)
            b = BUILTINS.get(name) if sym is None else None
            if b is not None and b.rule in ("index", "index_axis"):
                self.map_error(e.loc, f"{name}() is not allowed in a map kernel: it computes every element the "
                               "same way, without tile or group indices")
                return e
            if b is not None and b.node != "intrinsic":
                self.map_error(e.loc, f"{name}() is not allowed in a map kernel (only elementwise math, casts and "
                               "device functions)")
                return e
            if sym is not None and sym.ref == "func" and sym.extra.get("coop", Coop.NONE) != Coop.NONE:
                self.map_error(e.loc, f"{name}() uses cooperative operations, which a map kernel cannot call")
                return e
            if sym is not None and sym.ref == "func" and sym.extra.get("indices"):
                self.map_error(e.loc, f"{name}() uses tile or group indices, which a map kernel cannot call: it "
                               "computes every element the same way")
                return e
        return None
