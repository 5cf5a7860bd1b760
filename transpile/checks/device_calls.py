"""Type checking of device function calls (spec section 6): scalar and array arguments (a tensor
parameter or a shared array for `v: f32[n]`, the callee's shape symbols bound from the caller's
extents), several results (a `TupleType` call, only in a tuple assignment or as a statement), and
the instance of a generic device function that the arguments bind (transpile/checks/generics.py).
`DeviceCalls` is a part of the type checker (typecheck.FunctionChecker); calls.BuiltinCalls sends it
the calls of device functions.

`InlineCalls`, another part, inlines each call of a device function that takes fragments (spec
section 14, `S: mut frag f32[BM, BN]`; docs/language.md section 8.12; the definition's rules are
module_check.py's): the call statement becomes the function's body, checked in the caller's place.

Before:  rescale(Of, alpha, 0.5)        (def rescale(O: mut frag f32[BM, D], a: frag f32[BM], s: f32))
After:   Assign(Name(%inl1_s): f32, FloatLit(0.5), declares=True)
         Assign(Index(Of, ()): f32, Of * alpha[:, None] * %inl1_s)

Fragment and array parameters become the arguments' names, a fragment's shape symbols its constant
extents, an array's the argument's extents; scalar parameters and the body's locals become new
locals of the caller (names.inlined_local), the scalars computed once, in order.
"""

from __future__ import annotations

import dataclasses

from tessera.base.dtypes import I32, SCALARS, ScalarType
from tessera.base.errors import Note
from tessera.frontend import nodes as N
from tessera.transpile.checks.expr import scalar_type, type_name
from tessera.transpile.checks.frag_vectors import inline_functions, takes_fragments
from tessera.transpile.checks.generics import rename
from tessera.transpile.checks.rules import check_warps
from tessera.transpile.checks.scope import BUILTIN_NAMES, Part, Sym
from tessera.transpile.names import inlined_local

_KEPT = frozenset({"None", "tshared"})  # names in an inlined body that are no variable


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
            if p.frag:  # a fragment parameter `S: frag T[M, N]`: T is the fragment's element type
                fs = self.scope.lookup(a.id) if isinstance(a, N.Name) else None
                if fs is None or fs.ref != "frag" or not isinstance(fs.ty, N.ArrayType):
                    self.sink.error(a.loc, f"argument '{p.name}' of {fn.name}() is a fragment ({p.type_name}[...]): "
                                    f"pass a fragment's name")
                    return None
                ty, weak = fs.ty.elem, False
            elif p.dims is not None:  # an array parameter `v: T[n]`: T is the array's element type
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
        if sym.extra.get("inline"):  # takes fragments: only a statement (InlineCalls)
            self.sink.error(e.loc, f"{fn.name}() takes fragments and is inlined: call it as a statement on its "
                            f"own line ({fn.name}(...)); it has no value")
            return e
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
            elementwise = self.fc.frags.frag_shape is not None  # a fragment's name is then its element
            if given is not None and given.ref == "frag" and isinstance(given.ty, N.ArrayType) and not elementwise:
                spelled = f"{given.ty.elem}[{', '.join(str(d) for d in given.ty.shape)}]"
                fix = (f"apply {fn.name}() to each element in a whole-fragment statement ({given.name}[:] = "
                       f"{fn.name}({given.name}))") if fn.ret is not None or fn.rets else \
                    f"declare it '{p.name}: mut frag {spelled}' (the function is then inlined)"
                self.sink.error(a.loc, f"'{given.name}' is a fragment, but parameter '{p.name}' of {fn.name}() is "
                                f"not; {fix}")
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


class InlineCalls(Part):
    """The type checker's part for calls of device functions that take fragments."""

    def __init__(self, fc) -> None:  # noqa: ANN001 - typecheck.FunctionChecker (an import cycle)
        super().__init__(fc)
        self.calls = 0  # calls inlined so far in this function (their locals' numbers)
        self.stack: list[str] = []  # the functions being inlined, outermost first

    @property
    def active(self) -> bool:
        """Whether a function's body is being inlined."""
        return bool(self.stack)

    def claims(self, s: N.ExprStmt) -> bool:
        e = s.expr
        if not (isinstance(e, N.Call) and isinstance(e.func, N.Name)):
            return False
        sym = self.scope.lookup(e.func.id)
        return sym is not None and takes_fragments(sym)

    def inline(self, s: N.ExprStmt) -> tuple[N.Stmt, ...] | N.Stmt:
        e = s.expr
        assert isinstance(e, N.Call) and isinstance(e.func, N.Name)
        sym = self.scope.lookup(e.func.id)
        assert sym is not None
        if sym.extra.get("generic") and not e.kwargs and len(e.args) == len(sym.extra["def"].params):
            sym = self.fc.devices.instantiate(e, sym)  # the instance for the arguments' types
            if sym is None:
                return s
        fn: N.FuncDef = sym.extra["def"]
        if not sym.extra.get("inline_ok", True):  # its definition has errors, reported there
            return s
        if fn.name in self.stack:
            chain = " -> ".join([*self.stack[self.stack.index(fn.name):], fn.name])
            self.sink.error(e.loc, f"{fn.name}() takes fragments and is inlined, so it cannot call itself ({chain})")
            return s
        if e.kwargs:
            self.sink.error(e.kwargs[0].loc, "device functions take positional arguments only")
            return s
        if len(e.args) != len(fn.params):
            self.sink.error(e.loc, f"{fn.name}() takes {len(fn.params)} arguments, got {len(e.args)}")
            return s
        first = len(self.sink.items)
        self.calls += 1
        k = self.calls
        names: dict[str, N.Expr] = {}  # parameters and shape symbols -> what they are at this call
        pre: list[N.Stmt] = []
        shapes: dict[str, N.Expr] = {}
        ok = True
        for a, p in zip(e.args, fn.params):  # fragments first: their extents are constants
            if p.frag:
                ok = self.fragment_argument(a, p, fn, names) and ok
        for a, p in zip(e.args, fn.params):
            if p.frag:
                continue
            if isinstance(p.ty, N.TensorType):
                x = self.fc.devices.array_argument(a, p, fn, shapes)
                if x is None:
                    ok = False
                    continue
                assert isinstance(x, N.Name)  # array_argument takes names only
                names[p.name] = N.Name(a.loc, x.id)
                for d, v in shapes.items():
                    fixed = names.get(d)
                    if isinstance(fixed, N.IntLit) and not (isinstance(v, N.IntLit) and v.value == fixed.value):
                        self.sink.error(a.loc, f"the extent '{d}' of {fn.name}() is {fixed.value} from a fragment, "
                                        f"but '{x.id}' (argument '{p.name}') has the extent {_extent_text(v)} there")
                        ok = False
                    names.setdefault(d, _untyped(v))
            else:
                decl = self.scalar_argument(a, p, fn, inlined_local(p.name, k))
                ok = decl is not None and ok
                if decl is not None:
                    pre.append(decl)
                    names[p.name] = N.Name(a.loc, inlined_local(p.name, k))
        if not ok:
            return s
        known = inline_functions(self.scope.module_syms)

        def local(name: str) -> str | None:
            if name in BUILTIN_NAMES or name in _KEPT or name in self.scope.module_syms or name in known:
                return None
            return inlined_local(name, k)

        body = rename(fn.body, names, local)
        assert isinstance(body, tuple)
        saved = self.fc.loop_depth
        self.fc.loop_depth = 0  # a break in the body does not leave the caller's loop
        self.stack.append(fn.name)
        try:
            out = pre + [x for st in body for x in spliced(self.fc.stmt(st))]
        finally:
            self.stack.pop()
            self.fc.loop_depth = saved
        note = Note(f"in {fn.name}(), inlined by this call", e.loc)
        for i in range(first, len(self.sink.items)):
            diag = self.sink.items[i]
            if diag.loc.line != e.loc.line or diag.loc.col != e.loc.col:
                self.sink.items[i] = dataclasses.replace(diag, notes=(*diag.notes, note))
        return tuple(out)

    def fragment_argument(self, a: N.Expr, p: N.Param, fn: N.FuncDef, names: dict[str, N.Expr]) -> bool:
        """Checks the fragment passed for `p`; binds `p` and its shape symbols in `names`."""
        pty = p.ty
        assert isinstance(pty, N.ArrayType)
        want = f"{'mut ' if p.qual == 'mut' else ''}frag {pty.elem}[{', '.join(str(d) for d in pty.shape)}]"
        what = f"argument '{p.name}' of {fn.name}()"
        sym = self.scope.lookup(a.id) if isinstance(a, N.Name) else None
        if sym is None or sym.ref != "frag" or not isinstance(sym.ty, N.ArrayType):
            if isinstance(a, N.Name) and sym is None and a.id in self.scope.quiet:
                return False  # a rejected declaration, reported already
            given = "an expression" if not isinstance(a, N.Name) else \
                f"'{a.id}' ({type_name(sym.ty) if sym is not None and sym.ty is not None else 'not a fragment'})"
            self.sink.error(a.loc, f"{what} is a fragment ({want}): pass a fragment's name, not {given}")
            return False
        assert isinstance(a, N.Name)
        ty = sym.ty
        if ty.elem != pty.elem:
            self.sink.error(a.loc, f"{what} is a fragment of {pty.elem} ({want}), but '{a.id}' holds {ty.elem}")
            return False
        if len(ty.shape) != len(pty.shape):
            self.sink.error(a.loc, f"{what} has {len(pty.shape)} dimension{'s' if len(pty.shape) != 1 else ''} "
                            f"({want}), but '{a.id}' is a {list(ty.shape)} fragment")
            return False
        for i, (pd, ad) in enumerate(zip(pty.shape, ty.shape)):
            if isinstance(pd, int) and pd != ad:
                self.sink.error(a.loc, f"dimension {i} of {what} is {pd} ({want}), but '{a.id}' is a "
                                f"{list(ty.shape)} fragment")
                return False
            if isinstance(pd, str):
                bound = names.get(pd)
                if isinstance(bound, N.IntLit) and bound.value != ad:
                    self.sink.error(a.loc, f"the extent '{pd}' of {fn.name}() is {bound.value} from an earlier "
                                    f"argument, but dimension {i} of '{a.id}' ({what}) is {ad}")
                    return False
                names[pd] = N.IntLit(a.loc, int(ad))
        names[p.name] = N.Name(a.loc, a.id)
        return True

    def scalar_argument(self, a: N.Expr, p: N.Param, fn: N.FuncDef, local: str) -> N.Stmt | None:
        """`local = a` converted to `p`'s type, declared in the caller (None after an error)."""
        assert isinstance(p.ty, ScalarType)
        t = self.fc.expr(a)
        if isinstance(t.ty, (N.TensorType, N.ArrayType)):
            self.sink.error(a.loc, f"argument '{p.name}' of {fn.name}() is a scalar {p.ty}, not an array")
            return None
        t = self.fc.devices._scalar_typed(t, f"argument '{p.name}' of {fn.name}()")
        if t.ty is None:
            return None
        t = self.exprs.assignable(t, p.ty, a.loc, f"parameter '{p.name}'")
        self.fc.locals[local] = Sym(local, "local", p.ty, a.loc, block=self.fc.block)
        return N.Assign(a.loc, N.Name(a.loc, local, p.ty, "local"), t, declares=True)


def spliced(r: N.Stmt | tuple[N.Stmt, ...]) -> tuple[N.Stmt, ...]:
    """A checked statement as the statements it stands for (an inlined call: the function's body)."""
    return r if isinstance(r, tuple) else (r,)


def _extent_text(x: N.Expr) -> str:
    return str(x.value) if isinstance(x, N.IntLit) else "known at launch"


def _untyped(x: N.Expr) -> N.Expr:
    """A caller's extent (a typed shape symbol, parameter or literal) as the body's source would spell it."""
    if isinstance(x, N.IntLit):
        return N.IntLit(x.loc, x.value)
    if isinstance(x, N.Name):
        return N.Name(x.loc, x.id)
    return x
