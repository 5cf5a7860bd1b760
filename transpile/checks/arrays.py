"""Array declarations in a function body (spec sections 7 and 12): `x = tshared.alloc` (the whole
shared budget, element type from the first store), `x = tshared.alloc(f32[64, 32], pad=1)` and
`x = tregs(f32[4, 4], 0.0)` (and `x = tfrag(...)`, declared by frags.Fragments), checked into typed
`Assign` nodes with an `ArrayType`. `ArrayDecls` is a part of the type checker
(typecheck.FunctionChecker): assignments.Assignments asks it first about an assignment to a name."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tessera.base.dtypes import F32, I32, SCALARS, ScalarType
from tessera.frontend import nodes as N
from tessera.transpile.checks.frags import is_tfrag
from tessera.transpile.checks.scope import Part, Sym

if TYPE_CHECKING:
    pass


class ArrayDecls(Part):
    """The type checker's part for array declarations; it keeps the bare allocation on the core
    (`FunctionChecker.bare_alloc`), whose element type the first store decides."""

    def type_bare_alloc(self, elem: ScalarType) -> None:
        sym = self.fc.bare_alloc
        assert sym is not None  # called for a store to the bare allocation
        budget = sym.extra["budget"]
        sym.ty = N.ArrayType(elem, (budget // elem.size,), "shared")
        sym.extra["typed"] = True

    def launch_sized(self, d: N.Expr) -> str | None:
        """A dimension of tshared.alloc that is an integer scalar parameter: the array's size is
        set at launch (spec section 7, launch-sized shared memory)."""
        sym = self.scope.lookup(d.id) if isinstance(d, N.Name) else None
        if sym is None or sym.ref != "param" or not isinstance(sym.ty, ScalarType) or not sym.ty.is_int:
            return None
        return sym.name

    def special_value(self, s: N.Assign) -> N.Stmt | None:
        """`x = tshared.alloc...`, `x = tregs(...)` and `x = tfrag(...)`: array declarations."""
        v = s.value
        is_bare = isinstance(v, N.Attr) and isinstance(v.base, N.Name) and v.base.id == "tshared" and v.name == "alloc"
        is_shaped = (isinstance(v, N.Call) and isinstance(v.func, N.Attr) and isinstance(v.func.base, N.Name)
                     and v.func.base.id == "tshared" and v.func.name == "alloc")
        is_regs = isinstance(v, N.Call) and isinstance(v.func, N.Name) and v.func.id == "tregs" \
            and self.scope.lookup("tregs") is None
        is_frag = is_tfrag(v) and self.scope.lookup("tfrag") is None
        if not (is_bare or is_shaped or is_regs or is_frag):
            return None
        assert isinstance(s.target, N.Name), s.target  # s_Assign's assignments to a name
        name = s.target.id
        if not self.scope.check_new_name(name, s.target.loc) or self.scope.lookup(name) is not None:
            if self.scope.lookup(name) is not None:
                self.sink.error(s.target.loc, f"'{name}' is already defined")
            return s
        if s.annotation:
            self.sink.error(s.loc, "an array declaration takes no type annotation")
        if is_frag:
            return self.fc.frags.frag_decl(s, name)
        if is_bare or is_shaped:
            if not self.fc.in_kernel:
                self.sink.error(v.loc, "shared memory can only be allocated in a kernel")
                return s
            if self.fc.block != (0, 1):
                self.sink.error(v.loc, "shared memory can only be allocated at the top level of a kernel body")
                return s
        if is_bare:
            budget = self.fc.fn.config.shared_budget if self.fc.fn.config else None
            if budget is None:
                self.sink.error(v.loc, "a bare tshared.alloc takes the whole shared(...) budget; "
                                "add shared(SIZE) to the @kernel line")
                return s
            elem = self.fc.bare_elem or F32
            sym = Sym(name, "shared", N.ArrayType(elem, (budget // elem.size,), "shared"), s.loc,
                      block=self.fc.block, extra={"budget": budget, "bare": True, "typed": self.fc.bare_elem is not None})
            self.fc.bare_alloc = sym
            self.fc.locals[name] = sym
            call = N.Call(v.loc, N.Name(v.loc, "tshared.alloc", ref="builtin"), (), (), sym.ty)
            return N.replace(s, target=N.replace(s.target, ty=sym.ty, ref="shared"),
                                       value=call, declares=True)
        assert isinstance(v, N.Call), v  # a shaped allocation or tregs(...)
        kind = "tshared.alloc" if is_shaped else "tregs"
        nargs = len(v.args)
        if nargs not in ((1,) if is_shaped else (1, 2)):
            self.sink.error(v.loc, f"{kind}() takes {'a type like f32[64, 32]' if is_shaped else 'a type like f32[4, 4] and an initial value (which an array written before it is read may leave out)'}")
            return s
        for k in v.kwargs:
            if not (is_shaped and k.name == "pad"):
                self.sink.error(k.loc, f"{kind}() got an unexpected keyword argument '{k.name}'")
                return s
        spec = v.args[0]
        if not (isinstance(spec, N.Index) and isinstance(spec.base, N.Name) and spec.base.id in SCALARS):
            self.sink.error(spec.loc, f"the first argument of {kind}() is an element type with constant "
                            "dimensions, such as f32[64, 32]")
            return s
        elem = SCALARS[spec.base.id]
        shape: list[int | str] = []
        for d in spec.indices:
            sized = self.launch_sized(d) if is_shaped else None
            n = sized if sized is not None else self.scope.const_int(d, f"a dimension of {kind}()", 1)
            if n is None:
                return s
            shape.append(n)
        pad = 0
        for k in v.kwargs:
            p = self.scope.const_int(k.value, "pad", 0)
            if p is None:
                return s
            pad = p
        if is_shaped:
            ty = N.ArrayType(elem, tuple(shape), "shared", pad)
            sym = Sym(name, "shared", ty, s.loc, block=self.fc.block)
            self.fc.locals[name] = sym
            # pad= stays on the typed call: without it the compiler may choose a padding (plan-fragments)
            given = tuple(N.Keyword(k.loc, "pad", N.IntLit(k.loc, pad, I32)) for k in v.kwargs)
            call = N.Call(v.loc, N.Name(v.loc, "tshared.alloc", ref="builtin"), (), given, ty)
            return N.replace(s, target=N.replace(s.target, ty=ty, ref="shared"),
                                       value=call, declares=True)
        init: N.Expr | None = None
        if nargs == 2:
            init = self.exprs.scalar_expr(v.args[1], "initial value of tregs()")
            if init.ty is None:
                return s
            init = self.exprs.assignable(init, elem, v.args[1].loc, "a register array element")
        total = math.prod(int(d) for d in shape)
        if total > 4096:
            self.sink.error(spec.loc, f"tregs() of {total} elements is too large for registers (at most 4096)")
            return s
        ty = N.ArrayType(elem, tuple(shape), "regs")
        self.fc.locals[name] = Sym(name, "regs", ty, s.loc, block=self.fc.block)
        call = N.Call(v.loc, N.Name(v.loc, "tregs", ref="builtin"), (init,) if init is not None else (), (), ty)
        return N.replace(s, target=N.replace(s.target, ty=ty, ref="regs"),
                                   value=call, declares=True)
