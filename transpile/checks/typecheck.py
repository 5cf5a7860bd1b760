"""The `typecheck` pass: names and types of statements and expressions in function bodies
(module level: module_check; expressions: check_expr; calls: check_calls).

Before:  y[i] = x[i] * 2                (y: mut f16[n], x: f16[n], i a local)
After:   Assign(Index(y: f16)[Name(i, ref=local): i32]: f16, BinOp(*, Index(x)[i]: f16, IntLit(2): f16): f16)

The pass only adds types: every expression gets `ty`, every name `ref`, the first assignment of a
local `declares=True`, and implicit conversions become cast calls. Errors go to the sink; checking
goes on so that independent errors are all reported.
"""

from __future__ import annotations

from collections.abc import Mapping

from tessera.base.dtypes import SCALARS, ScalarType
from tessera.base.errors import DiagnosticSink, Loc, Note
from tessera.frontend import nodes as N
from tessera.transpile.checks.const_ranges import ConstRangeChecker
from tessera.transpile.checks.expr import BUILTIN_NAMES, Sym, base_name, is_scalar, scalar_type, type_name
from tessera.transpile.checks.loops import LoopChecker


class FunctionChecker(LoopChecker):
    """Checks one kernel or device function body."""

    def __init__(self, sink: DiagnosticSink, module_syms: dict[str, Sym], fn: N.FuncDef) -> None:
        self.sink = sink
        self.module_syms = module_syms
        self.fn = fn
        self.in_kernel = fn.kind == "kernel"
        self.tile = fn.config.tile if fn.config else ()
        self.params: dict[str, Sym] = {}
        self.locals: dict[str, Sym] = {}
        self.scopes = [self.params, self.locals]
        self.block: tuple[int, ...] = (0,)
        self.block_counter = 0
        self.loop_depth = 0
        self.loop_vars: list[str] = []
        self.quiet: set[str] = set()
        self.bare_alloc: Sym | None = None
        self.bare_elem: ScalarType | None = None

    # -- blocks
    def enter_block(self) -> tuple[int, ...]:
        saved = self.block
        self.block_counter += 1
        self.block = (*self.block, self.block_counter)
        return saved

    def body(self, stmts: tuple[N.Stmt, ...]) -> tuple[N.Stmt, ...]:
        saved = self.enter_block()
        out = tuple(self.stmt(s) for s in stmts)
        self.block = saved
        return out

    def check_new_name(self, name: str, loc: Loc) -> bool:
        if name in BUILTIN_NAMES or name == "tshared":
            self.sink.error(loc, f"'{name}' is a builtin name and cannot be redefined")
            return False
        s = self.module_syms.get(name)
        if s is not None:
            what = {"const": "a module constant", "table": "a constant table", "func": "a function"}.get(s.ref, "defined")
            self.sink.error(loc, f"'{name}' is {what} and cannot be assigned", Note("defined here", s.loc))
            return False
        return True

    # -- statements
    def stmt(self, s: N.Stmt) -> N.Stmt:
        if self.map is not None and not self.map_allows(s):
            return s
        return getattr(self, "s_" + type(s).__name__)(s)

    def s_Pass(self, s: N.Pass) -> N.Stmt:
        return s

    def s_Break(self, s: N.Break) -> N.Stmt:
        if self.loop_depth == 0:
            self.sink.error(s.loc, "'break' outside a loop")
        return s

    def s_Continue(self, s: N.Continue) -> N.Stmt:
        if self.loop_depth == 0:
            self.sink.error(s.loc, "'continue' outside a loop")
        return s

    def s_Return(self, s: N.Return) -> N.Stmt:
        if self.in_kernel:
            if s.value is not None:
                self.sink.error(s.value.loc, "a kernel cannot return a value; store results to a mut tensor")
            return s
        if self.fn.rets:
            return self.tuple_return(s)
        if isinstance(s.value, N.TupleLit):
            what = f"returns one {self.fn.ret} value" if self.fn.ret else "has no return type ('-> type')"
            self.sink.error(s.value.loc, f"'{self.fn.name}' {what}, but this return has {len(s.value.items)} "
                            "values; declare '-> (type, type, ...)' to return several")
            return s
        ret = SCALARS.get(self.fn.ret or "")
        if s.value is None:
            if ret is not None:
                self.sink.error(s.loc, f"'{self.fn.name}' must return a {ret} value")
            return s
        v = self.scalar_expr(s.value, "return value")
        if ret is None:
            self.sink.error(s.value.loc, f"'{self.fn.name}' has no return type ('-> type') but returns a value")
            return s
        return N.replace(s, value=self.assignable(v, ret, s.value.loc, "the return value"))

    def tuple_return(self, s: N.Return) -> N.Stmt:
        """`return a, b` in a function declared `-> (T1, T2)`: each value converted to its type."""
        types = [SCALARS[t] for t in self.fn.rets]
        items = s.value.items if isinstance(s.value, N.TupleLit) else (s.value,) if s.value is not None else ()
        if len(items) != len(types):
            self.sink.error(s.value.loc if s.value is not None else s.loc,
                            f"'{self.fn.name}' returns {len(types)} values ({', '.join(self.fn.rets)}), but this "
                            f"return has {len(items)}")
            for v in items:
                self.expr(v)
            return s
        out = []
        for k, (v, t) in enumerate(zip(items, types)):
            x = self.scalar_expr(v, "return value")
            out.append(self.assignable(x, t, v.loc, f"return value {k + 1} ({t})"))
        assert s.value is not None
        return N.replace(s, value=N.TupleLit(s.value.loc, tuple(out), N.TupleType(tuple(types))))

    def tuple_assign(self, s: N.Assign) -> N.Stmt:
        """`a, b = b, a` and `s, c = f(x)`: every value is computed first (into temporaries, named
        `%tuple<k>` here and by lower), then assigned to the targets left to right, each as a
        single assignment of its value would be."""
        assert isinstance(s.target, N.TupleLit)
        targets = s.target.items
        if s.annotation:
            self.sink.error(s.loc, "only a name can have a type annotation")
        values: tuple[N.Expr, ...] = ()
        if isinstance(s.value, N.TupleLit):
            values = tuple(self.scalar_expr(v, "assigned value") for v in s.value.items)
            types = [scalar_type(v) for v in values]
            value: N.Expr = N.TupleLit(s.value.loc, values, None)
        else:
            value = self.expr(s.value)
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
            self.locals[tmp] = Sym(tmp, "local", ty, s.loc, block=self.block)
            one = self.s_Assign(N.Assign(s.loc, t, N.Name(t.loc, tmp)))
            del self.locals[tmp]
            if not isinstance(one, N.Assign) or one.target.ty is None:
                return s
            typed.append(one.target)
            declares.append(one.declares)
        if isinstance(value, N.TupleLit):
            value = N.replace(value, ty=N.TupleType(tuple(t for t in types if t is not None)))
        return N.replace(s, target=N.replace(s.target, items=tuple(typed)), value=value,
                         declares_each=tuple(declares))

    def s_ExprStmt(self, s: N.ExprStmt) -> N.Stmt:
        if not isinstance(s.expr, N.Call):
            self.sink.error(s.expr.loc, "this expression has no effect; only calls can be statements")
            return s
        return N.replace(s, expr=self.expr(s.expr))

    def s_If(self, s: N.If) -> N.Stmt:
        c = self.cond(s.cond)
        return N.replace(s, cond=c, then=self.body(s.then), orelse=self.body(s.orelse))

    def cond(self, e: N.Expr) -> N.Expr:
        return self.scalar_expr(e, "condition")

    def s_While(self, s: N.While) -> N.Stmt:
        c = self.cond(s.cond)
        self.loop_depth += 1
        b = self.body(s.body)
        self.loop_depth -= 1
        return N.replace(s, cond=c, body=b)

    def s_AugAssign(self, s: N.AugAssign) -> N.Stmt:
        frag = self.frag_sym(s.target)
        if frag is not None:
            target = self.frag_target(s.target, frag)
        else:
            target = self.map_target(s.target) if N.is_whole_tensor(s.target) else self.store_target(s.target)
        if N.is_whole_tensor(s.target) and target.ty is None:
            return s
        value = self.frag_value(s.value, frag.ty.shape) if isinstance(frag, Sym) and isinstance(frag.ty, N.ArrayType) \
            else self.scalar_expr(s.value)
        tt = scalar_type(target)
        if tt is None or value.ty is None:
            return s
        _, value, res = self.binary_type(s.op, target, value, s.loc)
        if res is None:
            return s
        if not (res == tt or (res.is_int and tt.is_int) or (tt.is_float and res.kind != "bool")
                or (tt.kind == "bool" and res.kind == "bool")):
            self.sink.error(s.loc, f"'{s.op}=' gives {res}, which cannot be stored to {tt} "
                            f"'{_target_name(target)}' without a cast")
            return s
        return N.replace(s, target=target, value=value)

    def store_target(self, t: N.Expr) -> N.Expr:
        """Check an assignment target that must already exist (aug-assign, element store)."""
        if isinstance(t, N.Name):
            s = self.lookup(t.id)
            if s is None:
                self.undefined(t.loc, t.id)
                return t
            if s.ref in ("local",):
                return N.replace(t, ty=s.ty, ref=s.ref)
            self.cannot_assign(t, s)
            return t
        if isinstance(t, N.Index):
            x = self.expr(t)
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
        elif s.ref in ("param", "shape"):
            self.sink.error(t.loc, f"cannot assign to the parameter '{t.id}'; copy it to a local first")
        elif s.ref == "const":
            self.sink.error(t.loc, f"cannot assign to the constant '{t.id}'")
        elif s.ref == "func":
            self.sink.error(t.loc, f"'{t.id}' is a function defined at line {s.loc.line} and cannot be assigned")
        else:
            self.sink.error(t.loc, f"cannot assign to the {type_name(s.ty)} '{t.id}'; assign to its elements")

    def s_Assign(self, s: N.Assign) -> N.Stmt:
        if isinstance(s.target, N.TupleLit):
            return self.tuple_assign(s)
        if isinstance(s.value, N.TupleLit):
            self.sink.error(s.value.loc, f"{len(s.value.items)} values assigned to one target; a tuple "
                            "assignment has as many targets as values (a, b = x, y)")
            return s
        if not isinstance(s.target, N.Name):
            if s.annotation:
                self.sink.error(s.loc, "only a name can have a type annotation")
            frag = self.frag_sym(s.target)
            if frag is not None:
                target = self.frag_target(s.target, frag)
            else:
                target = self.map_target(s.target) if N.is_whole_tensor(s.target) else self.store_target(s.target)
            if N.is_whole_tensor(s.target) and target.ty is None:
                return s
            if frag is not None and isinstance(frag.ty, N.ArrayType):
                value = self.frag_value(s.value, frag.ty.shape)
            else:
                value = self.scalar_expr(s.value, "stored value")
            tt, vt = scalar_type(target), scalar_type(value)
            if tt is None or vt is None:
                return s
            assert isinstance(target, N.Index), target  # a typed store target other than a name
            if isinstance(target.base.ty, N.ArrayType) \
                    and target.base.ty.space == "shared" and self.bare_alloc is not None \
                    and base_name(target.base) == self.bare_alloc.name and not self.bare_alloc.extra.get("typed"):
                self.type_bare_alloc(vt)
                target = self.expr(s.target)
                tt = scalar_type(target)
                assert isinstance(target, N.Index) and tt is not None, target  # now of the element type
            value = self.assignable(value, tt, s.loc, f"an element of '{base_name(target.base)}'")
            return N.replace(s, target=target, value=value)
        name = s.target.id
        special = self.special_value(s)
        if special is not None:
            if special is s and self.lookup(name) is None:  # a rejected array declaration
                self.quiet.add(name)
            return special
        existing = self.lookup(name)
        value = self.scalar_expr(s.value, "assigned value")
        if existing is not None and existing.ref in ("local", "loopvar"):
            if existing.ref == "loopvar":
                self.cannot_assign(s.target, existing)
                return s
            if s.annotation:
                self.sink.error(s.annotation_loc or s.loc, f"'{name}' is already declared as {existing.ty}",
                                Note("declared here", existing.loc))
            if not isinstance(existing.ty, ScalarType) or value.ty is None:  # a local is a scalar or untyped
                return s
            value = self.assignable(value, existing.ty, s.loc, f"'{name}'")
            return N.replace(s, target=N.replace(s.target, ty=existing.ty, ref="local"),
                                       value=value)
        if existing is not None:
            self.cannot_assign(s.target, existing)
            return s
        if not self.check_new_name(name, s.target.loc):
            self.quiet.add(name)
            return s
        ty = value.ty
        if s.annotation:
            if s.annotation not in SCALARS:
                self.sink.error(s.annotation_loc or s.loc, f"unknown type '{s.annotation}'")
                return s
            ty = SCALARS[s.annotation]
            if value.ty is not None:
                value = self.assignable(value, ty, s.loc, f"'{name}'")
        if ty is None:
            self.locals[name] = Sym(name, "local", None, s.loc, block=self.block)
            return s
        if ty == N.VOID or not is_scalar(ty):
            self.sink.error(s.value.loc, f"this call has no value to assign to '{name}'")
            return s
        self.locals[name] = Sym(name, "local", ty, s.loc, block=self.block)
        return N.replace(s, target=N.replace(s.target, ty=ty, ref="local"),
                                   value=value, declares=True)

    def run(self) -> N.FuncDef:
        self.start_map()
        body = self.body(self.fn.body)
        ConstRangeChecker(self.sink, self.try_const).run(body)
        if not self.in_kernel and (self.fn.ret or self.fn.rets) and not _always_returns(body):
            self.sink.error(self.fn.loc, f"device function '{self.fn.name}' can reach its end without returning "
                            "a value")
        return N.replace(self.fn, body=body)


def check_function(sink: DiagnosticSink, module_syms: dict[str, Sym], fn: N.FuncDef,
                   params: dict[str, Sym], later_funcs: Mapping[str, Loc] | None = None) -> N.FuncDef:
    """Check a function; a bare `tshared.alloc` whose element type is learned from its first
    store is checked twice, the second time with that type known from the start.
    `later_funcs` are the functions defined further down the file (for a better message)."""
    scratch = DiagnosticSink(sink.source)
    first = FunctionChecker(scratch, module_syms, fn)
    first.params.update(params)
    first.later_funcs = dict(later_funcs or {})
    result = first.run()
    if first.bare_alloc is None or not first.bare_alloc.extra.get("typed"):
        sink.merge(scratch)
        return result
    second = FunctionChecker(sink, module_syms, fn)
    second.params.update(params)
    second.later_funcs = first.later_funcs
    assert isinstance(first.bare_alloc.ty, N.ArrayType)
    second.bare_elem = first.bare_alloc.ty.elem
    return second.run()


def _always_returns(body: tuple[N.Stmt, ...]) -> bool:
    for s in body:
        if isinstance(s, N.Return):
            return True
        if isinstance(s, N.If) and s.orelse and _always_returns(s.then) and _always_returns(s.orelse):
            return True
        if isinstance(s, N.While) and isinstance(s.cond, N.BoolLit) and s.cond.value and not _has_break(s.body):
            return True
    return False


def _has_break(body: tuple[N.Stmt, ...]) -> bool:
    for s in body:
        if isinstance(s, N.Break):
            return True
        if isinstance(s, N.If) and (_has_break(s.then) or _has_break(s.orelse)):
            return True
    return False


def _target_name(t: N.Expr) -> str:
    if isinstance(t, N.Name):
        return t.id
    if isinstance(t, N.Index) and isinstance(t.base, N.Name):
        return f"{t.base.id}[...]"
    return "target"
