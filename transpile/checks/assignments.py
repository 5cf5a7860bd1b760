"""Type checking of assignments (spec section 6): to a name (a new local, with an optional type
annotation, or an existing one), to an element (`y[i] = v`), augmented (`s += v`), to several
targets (`a, b = b, a`, `s, c = f(x)`), and whole-tensor and whole-fragment statements
(`Z[:] = X + Y`, `acc[:] = acc * alpha`); each value converted to its target's type. An assignment
between a register array and a view (`r[:] = X[i, j:j + 8]`) is vectors.VectorAccess's.

`Assignments` is a part of the type checker (typecheck.FunctionChecker), whose statement walk
sends it `Assign` and `AugAssign` statements. An assignment to a name first asks arrays.ArrayDecls
whether it declares an array; a whole-tensor target is the map kernel's (maps.MapKernel) or a
fragment's (frags.Fragments).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tessera.base.dtypes import SCALARS, ScalarType
from tessera.base.errors import Note
from tessera.frontend import nodes as N
from tessera.transpile.checks.callgraph import walk
from tessera.transpile.checks.expr import base_name, is_scalar, scalar_type, type_name
from tessera.transpile.checks.scope import Part, Sym

if TYPE_CHECKING:
    pass


class Assignments(Part):
    """The type checker's part for assignment statements."""

    def s_Assign(self, s: N.Assign) -> N.Stmt:
        if isinstance(s.target, N.TupleLit):
            return self.tuple_assign(s)
        if isinstance(s.value, N.TupleLit):
            self.sink.error(s.value.loc, f"{len(s.value.items)} values assigned to one target; a tuple "
                            "assignment has as many targets as values (a, b = x, y)")
            return s
        if self.fc.vectors.claims(s):
            return self.fc.vectors.assign(s)
        if not isinstance(s.target, N.Name):
            if s.annotation:
                self.sink.error(s.loc, "only a name can have a type annotation")
            typed = self.element_store(s.target, s.value, "stored value")
            if typed is None:
                return s
            target, value = typed
            tt, vt = scalar_type(target), scalar_type(value)
            if tt is None or vt is None:
                return s
            assert isinstance(target, N.Index), target  # a typed store target other than a name
            bare = self.fc.bare_alloc
            bt = target.base.ty
            if isinstance(bt, N.ArrayType) and bt.space == "shared" and bare is not None \
                    and base_name(target.base) == bare.name and not bare.extra.get("typed"):
                self.fc.arrays.type_bare_alloc(vt)
                target = self.fc.expr(s.target)
                tt = scalar_type(target)
                assert isinstance(target, N.Index) and tt is not None, target  # now of the element type
            if not self.fc.frags.converts(target, s.value):  # fragment to fragment: converts as C does
                value = self.exprs.assignable(value, tt, s.loc, f"an element of '{base_name(target.base)}'")
            return N.replace(s, target=target, value=value)
        name = s.target.id
        special = self.fc.arrays.special_value(s)
        if special is not None:
            if special is s and self.scope.lookup(name) is None:  # a rejected array declaration
                self.scope.quiet.add(name)
            return special
        existing = self.scope.lookup(name)
        value = self.exprs.scalar_expr(s.value, "assigned value")
        if existing is not None and existing.ref in ("local", "loopvar"):
            if existing.ref == "loopvar":
                self.cannot_assign(s.target, existing)
                return s
            if s.annotation:
                self.sink.error(s.annotation_loc or s.loc, f"'{name}' is already declared as {existing.ty}",
                                Note("declared here", existing.loc))
            if not isinstance(existing.ty, ScalarType) or value.ty is None:  # a local is a scalar or untyped
                return s
            value = self.exprs.assignable(value, existing.ty, s.loc, f"'{name}'")
            return N.replace(s, target=N.replace(s.target, ty=existing.ty, ref="local"), value=value)
        if existing is not None:
            self.cannot_assign(s.target, existing)
            return s
        if not self.scope.check_new_name(name, s.target.loc):
            self.scope.quiet.add(name)
            return s
        ty = value.ty
        if s.annotation:
            if s.annotation not in SCALARS:
                self.sink.error(s.annotation_loc or s.loc, f"unknown type '{s.annotation}'")
                return s
            ty = SCALARS[s.annotation]
            if value.ty is not None:
                value = self.exprs.assignable(value, ty, s.loc, f"'{name}'")
        if ty is None:
            self.fc.locals[name] = Sym(name, "local", None, s.loc, block=self.fc.block)
            return s
        if ty == N.VOID or not is_scalar(ty):
            self.sink.error(s.value.loc, f"this call has no value to assign to '{name}'")
            return s
        self.fc.locals[name] = Sym(name, "local", ty, s.loc, block=self.fc.block)
        return N.replace(s, target=N.replace(s.target, ty=ty, ref="local"), value=value, declares=True)

    def tuple_assign(self, s: N.Assign) -> N.Stmt:
        """`a, b = b, a` and `s, c = f(x)`: every value is computed first (into temporaries, named
        `%tuple<k>` here and by lower), then assigned to the targets left to right, each as a
        single assignment of its value would be. After an error, the names it would have declared
        are not reported again where they are used."""
        typed = self._tuple_assign(s)
        if typed is s:
            assert isinstance(s.target, N.TupleLit)
            for t in s.target.items:
                if isinstance(t, N.Name) and self.scope.lookup(t.id) is None:
                    self.scope.quiet.add(t.id)
        return typed

    def _tuple_assign(self, s: N.Assign) -> N.Stmt:
        assert isinstance(s.target, N.TupleLit)
        targets = s.target.items
        if s.annotation:
            self.sink.error(s.loc, "only a name can have a type annotation")
        values: tuple[N.Expr, ...] = ()
        if isinstance(s.value, N.TupleLit):
            values = tuple(self.exprs.scalar_expr(v, "assigned value") for v in s.value.items)
            types = [scalar_type(v) for v in values]
            value: N.Expr = N.TupleLit(s.value.loc, values, None)
        else:
            value = self.fc.expr(s.value)
            if value.ty is None:
                return s
            if not isinstance(value.ty, N.TupleType):
                what = (f"one {value.ty} value" if isinstance(value.ty, ScalarType) else
                        "no value" if value.ty == N.VOID else type_name(value.ty))
                self.sink.error(s.value.loc, f"a tuple assignment to {len(targets)} targets needs {len(targets)} "
                                f"values, but this is {what}")
                return s
            types = list(value.ty.items)
        if len(types) != len(targets):
            self.sink.error(s.loc, f"a tuple assignment to {len(targets)} targets needs {len(targets)} values, "
                            f"but {len(types)} are given")
            return s
        if any(t is None for t in types):
            return s
        typed: list[N.Expr] = []
        declares: list[bool] = []
        for k, (t, ty) in enumerate(zip(targets, types)):
            tmp = f"%tuple{k}"
            assert ty is not None
            self.fc.locals[tmp] = Sym(tmp, "local", ty, s.loc, block=self.fc.block)
            one = self.s_Assign(N.Assign(s.loc, t, N.Name(t.loc, tmp)))
            del self.fc.locals[tmp]
            if not isinstance(one, N.Assign) or one.target.ty is None:
                return s
            typed.append(one.target)
            declares.append(one.declares)
        if isinstance(value, N.TupleLit):
            value = N.replace(value, ty=N.TupleType(tuple(t for t in types if t is not None)))
        return N.replace(s, target=N.replace(s.target, items=tuple(typed)), value=value,
                         declares_each=tuple(declares))

    def s_AugAssign(self, s: N.AugAssign) -> N.Stmt:
        typed = self.element_store(s.target, s.value, "operand")
        if typed is None:
            return s
        target, value = typed
        tt = scalar_type(target)
        if tt is None or value.ty is None:
            return s
        _, value, res = self.exprs.binary_type(s.op, target, value, s.loc)
        if res is None:
            return s
        if not (res == tt or (res.is_int and tt.is_int) or (tt.is_float and res.kind != "bool")
                or (tt.kind == "bool" and res.kind == "bool")):
            self.sink.error(s.loc, f"'{s.op}=' gives {res}, which cannot be stored to {tt} "
                            f"'{_target_name(target)}' without a cast")
            return s
        return N.replace(s, target=target, value=value)

    def element_store(self, t: N.Expr, v: N.Expr, what: str) -> tuple[N.Expr, N.Expr] | None:
        """The typed target and value of a store other than to a name (None where the target is a
        whole tensor that could not be typed): a fragment's value is elementwise (`acc[:] = acc * 2`),
        anything else's a scalar."""
        target, frag = self.element_target(t)
        if N.is_whole_tensor(t) and target.ty is None:
            return None
        if frag is not None and isinstance(frag.ty, N.ArrayType):
            return target, self.fc.frags.frag_value(v, frag.ty.shape)
        return target, self.exprs.scalar_expr(v, what)

    def element_target(self, t: N.Expr) -> tuple[N.Expr, Sym | None]:
        """The target of a store other than to a name, and the fragment it assigns if it is `acc[:]`:
        a whole fragment, a map kernel's whole tensor `Z[:]` or an element that exists."""
        frag = self.fc.frags.frag_sym(t)
        if frag is not None:
            return self.fc.frags.frag_target(t, frag), frag
        return (self.fc.maps.map_target(t) if N.is_whole_tensor(t) else self.store_target(t)), None

    def store_target(self, t: N.Expr) -> N.Expr:
        """Check an assignment target that must already exist (aug-assign, element store)."""
        if isinstance(t, N.Name):
            s = self.scope.lookup(t.id)
            if s is None:
                self.scope.undefined(t.loc, t.id)
                return t
            if s.ref in ("local",):
                return N.replace(t, ty=s.ty, ref=s.ref)
            self.cannot_assign(t, s)
            return t
        if isinstance(t, N.Index):
            x = self.fc.expr(t)
            if not isinstance(x, N.Index) or x.ty is None:
                return x
            bt, base = x.base.ty, base_name(x.base)
            if isinstance(bt, N.TensorType) and not bt.mut:
                self.sink.error(t.loc, f"cannot store to '{base}': it is not mut; declare the parameter "
                                f"as '{base}: mut {bt.elem}[...]'")
                return N.replace(x, ty=None)
            if isinstance(bt, N.ArrayType) and bt.space == "const":
                self.sink.error(t.loc, f"cannot store to the constant table '{base}'")
                return N.replace(x, ty=None)
            return x
        self.sink.error(t.loc, "cannot assign to this expression")
        return t

    def cannot_assign(self, t: N.Name, s: Sym) -> None:
        if s.ref == "loopvar":
            self.sink.error(t.loc, f"cannot assign to the loop variable '{t.id}'")
        elif s.ref == "shape":
            self.sink.error(t.loc, f"cannot assign to the shape symbol '{t.id}' (bound at launch from an array's "
                            "extent); copy it to a local first")
        elif s.ref == "param":  # an array parameter: a scalar one that the body assigns is a local
            self.sink.error(t.loc, f"cannot assign to the parameter '{t.id}'; copy it to a local first")
        elif s.ref == "const":
            self.sink.error(t.loc, f"cannot assign to the constant '{t.id}'")
        elif s.ref == "func":
            self.sink.error(t.loc, f"'{t.id}' is a function defined at line {s.loc.line} and cannot be assigned")
        else:
            self.sink.error(t.loc, f"cannot assign to the {type_name(s.ty)} '{t.id}'; assign to its elements")


def assigned_names(body: tuple[N.Stmt, ...]) -> frozenset[str]:
    """The names that `body` assigns (`x = e`, `x += e`, `a, x = ...`) anywhere in it. A scalar
    parameter among them is a local of the function, initialized from the argument (passed by value,
    as in CUDA: `h ^= h >> 16` in a hash mixer); transpile/passes/param_locals.py lowers it."""
    out: set[str] = set()
    for s in body:
        for n in walk(s):
            if isinstance(n, (N.Assign, N.AugAssign)):
                targets = n.target.items if isinstance(n.target, N.TupleLit) else (n.target,)
                out.update(t.id for t in targets if isinstance(t, N.Name))
    return frozenset(out)


def _target_name(t: N.Expr) -> str:
    if isinstance(t, N.Name):
        return t.id
    if isinstance(t, N.Index) and isinstance(t.base, N.Name):
        return f"{t.base.id}[...]"
    return "target"
