"""The `typecheck` pass: names and types of statements and expressions in function bodies
(module level: module_check).

Before:  y[i] = x[i] * 2                (y: mut f16[n], x: f16[n], i a local)
After:   Assign(Index(y: f16)[Name(i, ref=local): i32]: f16, BinOp(*, Index(x)[i]: f16, IntLit(2): f16): f16)

The pass only adds types: every expression gets `ty`, every name `ref`, the first assignment of a
local `declares=True`, and implicit conversions become cast calls. Errors go to the sink; checking
goes on so that independent errors are all reported.

`FunctionChecker` checks one body. It owns the state the checking shares (the scope with its
symbols, the block and loop depth, the bare allocation, the map kernel's state), walks the
statements and dispatches each statement and expression to the part that checks it; each part is
an object with one job that is given the checker and reaches the state and the other parts through
it: `Expressions` (expr.py), `BuiltinCalls` (calls.py), `DeviceCalls` (device_calls.py), `InlineCalls`
(device_calls.py),
`MemoryBuiltins` (memory.py), `Fragments` (frags.py), `ArrayDecls` (arrays.py), `MapKernel`
(maps.py), `Loops` (loops.py), `VectorAccess` (vectors.py) and `Assignments` (assignments.py). A
builtin's call goes to the implementation of its typing rule in the rule table (rules.py) that the
parts providing rules make.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tessera.base.dtypes import SCALARS, ScalarType
from tessera.base.errors import DiagnosticSink, Loc
from tessera.frontend import nodes as N
from tessera.transpile.checks.arrays import ArrayDecls
from tessera.transpile.checks.assignments import Assignments
from tessera.transpile.checks.calls import BuiltinCalls
from tessera.transpile.checks.const_ranges import ConstRangeChecker
from tessera.transpile.checks.device_calls import DeviceCalls, InlineCalls, spliced
from tessera.transpile.checks.expr import Expressions, describe
from tessera.transpile.checks.frags import Fragments
from tessera.transpile.checks.loops import Loops
from tessera.transpile.checks.maps import MapKernel, MapState
from tessera.transpile.checks.memory import MemoryBuiltins
from tessera.transpile.checks.rules import RuleProvider, rule_table
from tessera.transpile.checks.scope import Scope, Sym
from tessera.transpile.checks.vectors import VectorAccess


class FunctionChecker:
    """Checks one kernel or device function body."""

    def __init__(self, sink: DiagnosticSink, module_syms: dict[str, Sym], fn: N.FuncDef) -> None:
        self.sink = sink
        self.fn = fn
        self.in_kernel = fn.kind == "kernel"
        self.tile = fn.config.tile if fn.config else ()
        self.params: dict[str, Sym] = {}
        self.locals: dict[str, Sym] = {}
        self.scope = Scope(sink, module_syms, self.params, self.locals, self.tile)
        self.block: tuple[int, ...] = (0,)
        self.block_counter = 0
        self.loop_depth = 0
        self.bare_alloc: Sym | None = None  # a bare tshared.alloc (arrays.ArrayDecls)
        self.bare_elem: ScalarType | None = None  # its element type, when a first check learned it
        self.map: MapState | None = None  # in a map kernel: what its statements established (maps.MapKernel)
        # The parts, each given this checker (a part may use those made before it when it is made).
        self.exprs = Expressions(self)
        self.memory = MemoryBuiltins(self)
        self.devices = DeviceCalls(self)
        self.inline = InlineCalls(self)
        self.calls = BuiltinCalls(self)
        self.frags = Fragments(self)
        self.arrays = ArrayDecls(self)
        self.maps = MapKernel(self)
        self.loops = Loops(self)
        self.vectors = VectorAccess(self)
        self.assigns = Assignments(self)
        self.rule_parts: tuple[RuleProvider, ...] = (self.calls, self.memory, self.frags)
        self.rules = rule_table(self.rule_parts)
        x = self.exprs
        self._expr_rules: dict[str, Callable[[Any], N.Expr]] = {
            "IntLit": x.x_IntLit, "FloatLit": x.x_FloatLit, "BoolLit": x.x_BoolLit, "StrLit": x.x_StrLit,
            "Unary": x.x_Unary, "BinOp": x.x_BinOp, "Compare": x.x_Compare, "BoolOp": x.x_BoolOp,
            "Ternary": x.x_Ternary, "Attr": x.x_Attr, "TupleLit": x.x_TupleLit, "ListLit": x.x_ListLit,
            "Slice": x.x_Slice,
            # Asked of several parts in turn (below).
            "Name": self.x_Name, "Index": self.x_Index, "Call": self.x_Call,
        }
        self._stmt_rules: dict[str, Callable[[Any], N.Stmt | tuple[N.Stmt, ...]]] = {
            "Assign": self.assigns.s_Assign, "AugAssign": self.assigns.s_AugAssign, "For": self.loops.s_For,
            "Pass": self.s_Pass, "Break": self.s_Break, "Continue": self.s_Continue, "Return": self.s_Return,
            "ExprStmt": self.s_ExprStmt, "If": self.s_If, "While": self.s_While,
        }

    # -- expressions
    def expr(self, e: N.Expr) -> N.Expr:
        """`e` typed (see expr.py), by the rule for its kind of node."""
        rule = self._expr_rules.get(type(e).__name__)
        if rule is None:
            self.sink.error(e.loc, f"{describe(e)} is not allowed here")
            return e
        return rule(e)

    def x_Name(self, e: N.Name) -> N.Expr:
        """A name: typed by its symbol; then a fragment's name inside an elementwise statement, and a
        tensor's in a map kernel, is its element."""
        t = self.exprs.x_Name(e)
        t = self.frags.name(e, t)
        return self.maps.name(e, t)

    def x_Index(self, e: N.Index) -> N.Expr:
        """An element: a map kernel indexes only constant tables, and nobody indexes a fragment."""
        refused = self.maps.refuse_index(e)
        if refused is None:
            refused = self.frags.refuse_index(e)
        return refused if refused is not None else self.exprs.x_Index(e)

    def x_Call(self, e: N.Call) -> N.Expr:
        """A call: a map kernel calls only elementwise builtins and device functions."""
        refused = self.maps.refuse_call(e)
        return refused if refused is not None else self.calls.call(e)

    # -- blocks
    def enter_block(self) -> tuple[int, ...]:
        saved = self.block
        self.block_counter += 1
        self.block = (*self.block, self.block_counter)
        return saved

    def body(self, stmts: tuple[N.Stmt, ...]) -> tuple[N.Stmt, ...]:
        saved = self.enter_block()
        out = tuple(x for s in stmts for x in spliced(self.stmt(s)))  # (no frame more per nested block)
        self.block = saved
        return out

    # -- statements
    def stmt(self, s: N.Stmt) -> N.Stmt | tuple[N.Stmt, ...]:
        """`s` typed; the call of a device function that takes fragments is its inlined body."""
        if self.map is not None and not self.maps.map_allows(s):
            return s
        return self._stmt_rules[type(s).__name__](s)

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
        v = self.exprs.scalar_expr(s.value, "return value")
        if ret is None:
            self.sink.error(s.value.loc, f"'{self.fn.name}' has no return type ('-> type') but returns a value")
            return s
        return N.replace(s, value=self.exprs.assignable(v, ret, s.value.loc, "the return value"))

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
            x = self.exprs.scalar_expr(v, "return value")
            out.append(self.exprs.assignable(x, t, v.loc, f"return value {k + 1} ({t})"))
        assert s.value is not None
        return N.replace(s, value=N.TupleLit(s.value.loc, tuple(out), N.TupleType(tuple(types))))

    def s_ExprStmt(self, s: N.ExprStmt) -> N.Stmt | tuple[N.Stmt, ...]:
        if self.inline.claims(s):
            return self.inline.inline(s)
        if not isinstance(s.expr, N.Call):
            self.sink.error(s.expr.loc, "this expression has no effect; only calls can be statements")
            return s
        return N.replace(s, expr=self.expr(s.expr))

    def s_If(self, s: N.If) -> N.Stmt:
        c = self.cond(s.cond)
        return N.replace(s, cond=c, then=self.body(s.then), orelse=self.body(s.orelse))

    def cond(self, e: N.Expr) -> N.Expr:
        return self.exprs.scalar_expr(e, "condition")

    def s_While(self, s: N.While) -> N.Stmt:
        c = self.cond(s.cond)
        self.loop_depth += 1
        b = self.body(s.body)
        self.loop_depth -= 1
        return N.replace(s, cond=c, body=b)

    def run(self) -> N.FuncDef:
        self.maps.start_map()
        body = self.body(self.fn.body)
        ConstRangeChecker(self.sink, self.scope.const_or_why).run(body)
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
    first.scope.later_funcs = dict(later_funcs or {})
    result = first.run()
    if first.bare_alloc is None or not first.bare_alloc.extra.get("typed"):
        sink.merge(scratch)
        return result
    second = FunctionChecker(sink, module_syms, fn)
    second.params.update(params)
    second.scope.later_funcs = first.scope.later_funcs
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
