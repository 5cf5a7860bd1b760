"""The `check-cooperation` pass (spec section 7): cooperative operations under tile-dependent control.

Before (reported):  if lane_id() < 16:
                        tbarrier()
After:              the module, unchanged, when nothing is reported.

A value *varies* per lane when it depends on a tile index (`tile_linear_id`, `lane_id`, shuffles,
the old value of an atomic, ...) and per warp when it differs only between warps (`warp_id`, warp
reductions); the builtin table says which builtin gives what, and which must be called by the
whole group or by whole warps. Taints flow through locals, register arrays, returns of device
functions (a tile index behind a call still varies) and control flow: an assignment under a varying
condition varies, and after a `break` or `continue` under a varying condition the rest of the loop
body (and every later iteration) runs only for some tiles. A `return` under a varying condition is
allowed, and a tile that has returned takes no part in later barriers (docs/language.md, section
8.1), but every other cooperative operation after it is an error: a group reduction, a copy or a
fragment statement needs every tile's part, a warp operation every lane's value (after a return
under a warp-uniform condition, warp operations are still allowed).

Inside a device function a value may also depend on a parameter. Then the function's result varies
as the argument does, and a cooperative operation under a condition on a parameter makes the
function require a uniform (or warp-uniform) argument there, which is checked at each call.

A comparison of the linear tile index with a multiple of 32 (`tile_linear_id() < 64`, or a local
that only ever holds `tile_linear_id()`), and its division by a multiple of 32 (or a right shift by
5 or more), are the same for the 32 lanes of a warp (warps are runs of 32 consecutive linear
indices): they vary per warp, not per lane, and may guard warp operations. What the analysis tracks
(the taints, the control a statement runs under, the warp runs) is in checks/taints.py.

The analysis is a fixed point over the whole body, one linear walk per round; taints only grow, so
it ends after a few rounds whatever the nesting depth.
"""

from __future__ import annotations

from tessera.base.errors import DiagnosticSink, Loc, Note
from tessera.frontend import nodes as N
from tessera.transpile.builtins import BUILTINS, Coop, Vary
from tessera.transpile.checks.callgraph import call_coop, coop_class, tree_children, walk
from tessera.transpile.checks.taints import (
    LANE,
    NONE,
    UNIFORM,
    WARP,
    Ctl,
    FunctionFacts,
    Taint,
    WarpRuns,
    returned_note,
)
from tessera.transpile.consts import Value, module_env


class _Walker:
    def __init__(self, fn: N.FuncDef, facts: dict[str, FunctionFacts], sink: DiagnosticSink,
                 env: dict[str, Value] | None = None) -> None:
        self.fn = fn
        self.env = {**(env or {}), **dict(fn.const_values)}
        self.warps = WarpRuns(fn, self.env)
        self.facts = facts
        self.sink = sink
        self.params = {p.name: i for i, p in enumerate(fn.params)} if fn.kind == "device" else {}
        self.var: dict[str, Taint] = {}
        self.escapes: dict[int, Taint] = {}   # per loop (id of the node): taint of its early exits
        self.returns: dict[int, tuple[Taint, Loc | None]] = {}  # per loop: its returns (later iterations)
        self.changed = False
        self.found: list[tuple[Loc, str, Note | None]] = []  # what this round would report
        self.result = NONE
        self.requires: dict[int, tuple[int, str, Loc]] = {}

    # ---- taints of expressions
    def set(self, name: str, t: Taint) -> None:
        old = self.var.get(name, NONE)
        new = old.join(t)
        if new != old:
            self.var[name] = new
            self.changed = True

    def expr(self, e: object, ctl: Ctl) -> Taint:
        """The taint of `e`; on the way, every cooperative call in it is checked against the
        control it runs under (`ctl`; deeper in the arms of `x if c else y` and the right side of
        `and`/`or`, which run only for some tiles)."""
        if isinstance(e, N.Name):
            if e.id in self.params and e.ref in ("param", "local"):  # a local only if it is the parameter, assigned
                return Taint(UNIFORM, ((self.params[e.id], LANE),)).join(self.var.get(e.id, NONE))
            return self.var.get(e.id, NONE)
        if isinstance(e, N.Ternary):
            c = self.expr(e.cond, ctl)
            inner = ctl.deeper(c, e.cond.loc)
            return c.join(self.expr(e.then, inner)).join(self.expr(e.orelse, inner))
        if isinstance(e, N.BoolOp):
            a = self.expr(e.left, ctl)
            return a.join(self.expr(e.right, ctl.deeper(a, e.left.loc)))
        if isinstance(e, N.Call) and isinstance(e.func, N.Name):
            return self.call(e, ctl)
        if isinstance(e, (N.Compare, N.BinOp)) and self.warps.per_warp(e):
            t = NONE
            for operand in tree_children(e):
                t = t.join(self.expr(operand, ctl))
            return t.cap(WARP)
        if isinstance(e, N.Index):
            t = NONE
            for i in e.indices:
                t = t.join(self.expr(i, ctl))
            base = e.base
            if isinstance(base, N.Name) and isinstance(base.ty, N.ArrayType) and base.ty.space == "regs":
                t = t.join(self.var.get(base.id, NONE))
            return t
        t = NONE
        for operand in tree_children(e):
            t = t.join(self.expr(operand, ctl))
        return t

    def call(self, e: N.Call, ctl: Ctl) -> Taint:
        assert isinstance(e.func, N.Name)
        name = e.func.id
        args = [self.expr(a, ctl) for a in e.args]
        for k in e.kwargs:
            self.expr(k.value, ctl)
        if e.func.ref == "func":
            facts = self.facts.get(name, FunctionFacts())
            self.need(name, facts.coop, e, ctl)
            self.arguments(e, facts, args)
            t = Taint(facts.result.level)
            for p, cap in facts.result.params:
                if p < len(args):
                    t = t.join(args[p].cap(cap))
            return t
        joined = NONE
        for a in args:
            joined = joined.join(a)
        b = BUILTINS.get(name) if e.func.ref == "builtin" else None
        if b is None:
            return joined
        self.need(name, b.coop, e, ctl)
        if b.coop == Coop.GROUP:
            # A group reduction is the same in every tile of the group; a group scan differs per tile.
            return NONE if b.result == Vary.UNIFORM else Taint(b.result)
        if b.coop == Coop.WARP and b.result == WARP:
            return joined.cap(WARP)  # a warp reduction is the same in every lane
        return joined.join(Taint(b.result))

    # ---- statements; each returns the taints of its escapes (return, break/continue)
    def block(self, stmts: tuple[N.Stmt, ...], ctl: Ctl) -> tuple[Taint, Taint]:
        ret = exits = NONE
        where = ctl.where
        after = ctl
        for s in stmts:
            c = Ctl(ctl.taint.join(exits), where, after.returned, after.returned_at)
            r, x = self.stmt(s, c)
            if x != NONE and where is None:
                where = s.loc
            ret, exits = ret.join(r), exits.join(x)
            after = after.after_return(r, _return_loc(s))
        return ret, exits

    def stmt(self, s: N.Stmt, ctl: Ctl) -> tuple[Taint, Taint]:
        if isinstance(s, N.If):
            inner = ctl.deeper(self.expr(s.cond, ctl), s.cond.loc)
            r1, x1 = self.block(s.then, inner)
            r2, x2 = self.block(s.orelse, inner)
            return r1.join(r2), x1.join(x2)
        if isinstance(s, (N.While, N.For)):
            parts: tuple[N.Expr, ...]
            if isinstance(s, N.While):
                parts = (s.cond,)
            else:
                assert isinstance(s.iter, N.Call), s.iter  # typecheck accepts only range(...) loops
                parts = s.iter.args
            t = NONE
            for p in parts:
                t = t.join(self.expr(p, ctl))
            inner = ctl.deeper(t.join(self.escapes.get(id(s), NONE)), s.loc)
            inner = inner.after_return(*self.returns.get(id(s), (NONE, None)))
            if isinstance(s, N.For):
                self.set(s.var, inner.taint.join(t))
            r, x = self.block(s.body, inner)
            old = self.escapes.get(id(s), NONE)
            if old.join(x) != old:
                self.escapes[id(s)] = old.join(x)
                self.changed = True
            old_r, at = self.returns.get(id(s), (NONE, None))
            if old_r.join(r) != old_r:
                self.returns[id(s)] = (old_r.join(r), at or _return_loc(s))
                self.changed = True
            return r, NONE
        if isinstance(s, N.Return):
            if s.value is not None:
                self.result = self.result.join(self.expr(s.value, ctl)).join(ctl.taint)
            return ctl.taint, NONE
        if isinstance(s, (N.Break, N.Continue)):
            return NONE, ctl.taint
        if isinstance(s, N.Assign) and isinstance(s.target, N.TupleLit):
            # Each target takes its own value's taint (all of a call's results: the call's).
            values = s.value.items if isinstance(s.value, N.TupleLit) else None
            whole = NONE if values is not None else self.expr(s.value, ctl)
            taints = [self.expr(v, ctl) for v in values] if values is not None else [whole] * len(s.target.items)
            for target, vt in zip(s.target.items, taints):
                self.assign_target(target, vt.join(ctl.taint), ctl)
            return NONE, NONE
        if isinstance(s, (N.Assign, N.AugAssign)) and _is_fragment_statement(s.target):
            self.fragment_statement(s, ctl)
            return NONE, NONE
        if isinstance(s, (N.Assign, N.AugAssign)):
            value = self.expr(s.value, ctl).join(ctl.taint)
            if isinstance(s.target, N.Name):
                self.set(s.target.id, value)
            else:
                where = self.expr(s.target, ctl)  # the indices (and their calls)
                base = s.target.base if isinstance(s.target, N.Index) else None
                if isinstance(base, N.Name) and isinstance(base.ty, N.ArrayType) and base.ty.space == "regs":
                    self.set(base.id, value.join(where))
            return NONE, NONE
        if isinstance(s, N.ExprStmt):
            self.expr(s.expr, ctl)
        return NONE, NONE

    def assign_target(self, target: N.Expr, value: Taint, ctl: Ctl) -> None:
        if isinstance(target, N.Name):
            self.set(target.id, value)
            return
        where = self.expr(target, ctl)
        base = target.base if isinstance(target, N.Index) else None
        if isinstance(base, N.Name) and isinstance(base.ty, N.ArrayType) and base.ty.space == "regs":
            self.set(base.id, value.join(where))

    # ---- whole-fragment statements (spec section 14)
    def fragment_statement(self, s: N.Assign | N.AugAssign, ctl: Ctl) -> None:
        """`acc[:] = ...` computes every element in whichever lane holds it: the whole group runs it
        (like a cooperative operation), and nothing in it may differ between tiles (the element's
        own coordinates are `row_index()` and `col_index()`)."""
        coop = self.cooperative_call(s.value)
        if coop is not None:
            name = coop.func.id if isinstance(coop.func, N.Name) else "this call"
            self.found.append((coop.loc, f"{name}() needs whole warps or the whole group, but a whole-fragment "
                               "statement computes its elements one by one in whichever lane holds each; reduce "
                               "a fragment with tsum(), tmax() or tmin() (axis=1 for rows, axis=0 for columns)", None))
            return
        mark = len(self.found)
        if self.expr(s.value, ctl).level == UNIFORM:
            if ctl.taint.level > UNIFORM:
                self.found.append((s.loc, "a whole-fragment statement must be reached by every tile of the group "
                                   "(each element is computed by whichever lane holds it), but it is under control "
                                   "flow that depends on the tile index",
                                   Note("the tile-dependent condition or loop is here", ctl.where)))
            elif ctl.returned.level > UNIFORM:
                self.found.append((s.loc, "a whole-fragment statement must be reached by every tile of the group "
                                   "(each element is computed by whichever lane holds it), but some tiles may have "
                                   "returned before it", returned_note(ctl)))
            return
        part = self.varying_part(s.value, ctl)
        del self.found[mark:]  # the walk into the parts repeats what the first walk found
        self.expr(s.value, ctl)
        what = f"'{part.id}'" if isinstance(part, N.Name) else "this value"
        if isinstance(part, N.Call) and isinstance(part.func, N.Name):
            what = f"{part.func.id}()"
        self.found.append((part.loc, f"{what} differs between tiles, but a whole-fragment statement computes each "
                           "element in whichever lane holds it, so the result would depend on the fragment's layout; "
                           "use row_index() and col_index() for the element's coordinates, or a row or column "
                           "vector", None))

    def cooperative_call(self, e: N.Expr) -> N.Call | None:
        """The first call in `e` of an operation that whole warps or the whole group must call
        together (a warp or group reduction, a shuffle, a barrier), directly or in a device function."""
        known = {name: f.coop for name, f in self.facts.items()}
        for n in walk(e):
            if isinstance(n, N.Call) and isinstance(n.func, N.Name) and call_coop(n, known) != Coop.NONE:
                return n
        return None

    def varying_part(self, e: N.Expr, ctl: Ctl) -> N.Expr:
        """The innermost part of `e` (varying itself) whose value differs between tiles."""
        for child in tree_children(e):
            if isinstance(child, N.Expr) and self.expr(child, ctl).level > UNIFORM:
                return self.varying_part(child, ctl)
        return e

    # ---- cooperative calls
    def need(self, name: str, coop: Coop, e: N.Call, ctl: Ctl) -> None:
        """`name` needs the whole group (or whole warps) here: check the control it is under."""
        if coop == Coop.NONE:
            return
        allowed = UNIFORM if coop == Coop.GROUP else WARP
        # A barrier is the one operation that tiles which have returned do not hold up (as in
        # CUDA); every other one needs each tile's (or lane's) part.
        barrier = name == "tbarrier" and isinstance(e.func, N.Name) and e.func.ref == "builtin"
        returned = NONE if barrier else ctl.returned
        for p, cap in ctl.taint.join(returned).params:
            if cap > allowed and (p not in self.requires or self.requires[p][0] > allowed):
                self.requires[p] = (allowed, name, ctl.where or ctl.returned_at or e.loc)
        if ctl.taint.level <= allowed and returned.level > allowed:
            group = coop == Coop.GROUP
            self.found.append((e.loc, (f"{name}() must be reached by every tile of the group, but some tiles may "
                                       "have returned before it; only tbarrier() may follow a return that depends "
                                       "on the tile index") if group else
                               (f"{name}() must be reached by all 32 lanes of the warp, but some lanes may have "
                                "returned before it; only tbarrier() may follow a return that depends on the lane "
                                "(a condition that is the same in a whole warp may guard a return)"),
                               returned_note(ctl)))
            return
        if ctl.taint.level <= allowed:
            return
        if coop == Coop.GROUP:
            self.found.append((e.loc, f"{name}() must be reached by every tile of the group, but it is under "
                               "control flow that depends on the tile index",
                               Note("the tile-dependent condition or loop is here", ctl.where)))
        else:
            self.found.append((e.loc, f"{name}() must be reached by all 32 lanes of the warp, but it is under "
                               "control flow that depends on the lane; a condition that is the same in a whole "
                               "warp may guard it, such as warp_id() == 0 or tile_linear_id() < 32",
                               Note("the lane-dependent condition or loop is here", ctl.where)))

    def arguments(self, e: N.Call, facts: FunctionFacts, taints: list[Taint]) -> None:
        """Arguments that a device function needs uniform (it synchronizes under a condition on them)."""
        callee = e.func.id if isinstance(e.func, N.Name) else "?"
        for p, (allowed, op, where) in facts.requires.items():
            if p >= len(e.args):
                continue
            t = taints[p]
            for q, cap in t.params:
                if cap > allowed and (q not in self.requires or self.requires[q][0] > allowed):
                    self.requires[q] = (allowed, f"{callee}() calling {op}", e.args[p].loc)
            if t.level > allowed:
                whose = "the tile index" if allowed == UNIFORM else "the lane"
                self.found.append((e.args[p].loc, f"this argument of {callee}() depends on {whose}, but "
                                   f"{callee}() calls {op}() under control flow that depends on it",
                                   Note(f"the condition in {callee}() is here", where)))

    def run(self) -> FunctionFacts:
        """Walk until no taint changes: the last walk saw the final taints, its findings stand."""
        for _ in range(100):
            self.changed = False
            self.result = NONE
            self.found = []
            self.block(self.fn.body, Ctl(NONE, None))
            if not self.changed:
                break
        for loc, message, note in self.found:
            self.sink.error(loc, message, *([note] if note is not None else []))
        return FunctionFacts(result=self.result, requires=self.requires)


def _return_loc(s: object) -> Loc | None:
    """The first `return` in `s` (not inside a nested function: there are none)."""
    if isinstance(s, N.Return):
        return s.loc
    for child in tree_children(s):
        loc = _return_loc(child)
        if loc is not None:
            return loc
    return None


def _is_fragment_statement(target: N.Expr) -> bool:
    """`acc[:] = ...` on a fragment (typed: `Index(acc, ())`)."""
    return isinstance(target, N.Index) and isinstance(target.base.ty, N.ArrayType) and target.base.ty.space == "frag"


def check_cooperation(module: N.Module, sink: DiagnosticSink) -> N.Module:
    facts: dict[str, FunctionFacts] = {}
    env = module_env(module)
    for fn in module.items:
        if not isinstance(fn, N.FuncDef):
            continue
        found = _Walker(fn, facts, sink, env).run()
        if fn.kind == "device":
            found.coop = coop_class(fn, {k: f.coop for k, f in facts.items()})
        facts[fn.name] = found
    return module
