"""Cooperative operations under tile-dependent control flow (spec section 7).

A value is *lane-varying* when it depends on a tile index (`tile_linear_id`, `tile_id`,
`lane_id`, `global_linear_id`, shuffles, atomics' old values) and *warp-varying* when it
differs only between warps (`warp_id`, warp reductions). Taints flow through locals to a
fixed point, including through assignments under a varying condition. Then:
`tbarrier`, group reductions, `tcopy` and calls of cooperative device functions may not
sit under any varying condition or loop; warp operations may not sit under a lane-varying one.
"""

from __future__ import annotations

import dataclasses
import functools

from tessera import nodes as N
from tessera.errors import DiagnosticSink, Loc, Note

UNIFORM, WARP, LANE = 0, 1, 2


def _deeper(taint: int, loc: Loc, ctl: int, where: Loc | None) -> tuple[int, Loc | None]:
    """The control taint inside a construct whose condition has `taint` (and where it is)."""
    return (taint, loc) if taint > ctl else (ctl, where)
_LANE_SOURCES = {"tile_linear_id", "tile_id", "lane_id", "global_linear_id", "shfl", "shfl_xor", "shfl_down",
                 "atomic_add", "atomic_sub", "atomic_max", "atomic_min", "atomic_and", "atomic_or", "atomic_xor",
                 "atomic_exch", "atomic_cas"}
_WARP_SOURCES = {"warp_id", "warp_sum", "warp_max", "warp_min"}
_GROUP_OPS = {"tbarrier", "group_sum", "group_max", "group_min", "tcopy", "tcopy_async", "twait", "tcommit"}
_WARP_OPS = {"warp_sum", "warp_max", "warp_min", "shfl", "shfl_xor", "shfl_down"}


@functools.cache
def _child_fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if f.name not in ("loc", "ty"))


def _children(e: object):
    if not dataclasses.is_dataclass(e):
        return
    for name in _child_fields(type(e)):
        v = getattr(e, name)
        if isinstance(v, tuple):
            yield from (x for x in v if dataclasses.is_dataclass(x))
        elif dataclasses.is_dataclass(v) and not isinstance(v, (N.TensorType, N.ArrayType, N.ViewType)):
            yield v


class _Taint:
    def __init__(self, cooperative_funcs: set[str], warp_funcs: set[str]) -> None:
        self.var: dict[str, int] = {}
        self.changed = False
        self.coop_funcs = cooperative_funcs
        self.warp_funcs = warp_funcs

    def expr(self, e: object) -> int:
        t = UNIFORM
        if isinstance(e, N.Name):
            return self.var.get(e.id, UNIFORM)
        if isinstance(e, N.Call) and isinstance(e.func, N.Name):
            if e.func.id in _LANE_SOURCES:
                t = LANE
            elif e.func.id in _WARP_SOURCES:
                t = WARP
            elif e.func.id in ("group_sum", "group_max", "group_min"):
                return UNIFORM
        for c in _children(e):
            if isinstance(c, N.Name) and isinstance(e, N.Call) and c is e.func:
                continue
            t = max(t, self.expr(c))
        return t

    def set(self, name: str, t: int) -> None:
        if t > self.var.get(name, UNIFORM):
            self.var[name] = t
            self.changed = True

    def block(self, stmts: tuple[N.Stmt, ...], ctl: int) -> int:
        """Propagate taints; returns the taint of break/continue control inside (for the loop)."""
        exits = UNIFORM
        for s in stmts:
            if isinstance(s, N.Assign) and isinstance(s.target, N.Name) or isinstance(s, N.AugAssign) and isinstance(s.target, N.Name):
                self.set(s.target.id, max(ctl, self.expr(s.value)))
            elif isinstance(s, N.If):
                c = max(ctl, self.expr(s.cond))
                exits = max(exits, self.block(s.then, c), self.block(s.orelse, c))
            elif isinstance(s, N.While):
                c = max(ctl, self.expr(s.cond))
                inner = self.block(s.body, c)
                self.block(s.body, max(c, inner))
            elif isinstance(s, N.For):
                c = max([ctl] + [self.expr(a) for a in s.iter.args])
                self.set(s.var, c)
                inner = self.block(s.body, c)
                self.block(s.body, max(c, inner))
            elif isinstance(s, (N.Break, N.Continue)):
                exits = max(exits, ctl)
        return exits


class _Check:
    def __init__(self, taint: _Taint, sink: DiagnosticSink) -> None:
        self.t = taint
        self.sink = sink

    def calls(self, e: object, ctl: int, where: Loc | None) -> None:
        # The arms of `x if c else y` and the right side of `and`/`or` run only for some tiles.
        if isinstance(e, N.Ternary):
            self.calls(e.cond, ctl, where)
            c = self.t.expr(e.cond)
            nc, nw = _deeper(c, e.cond.loc, ctl, where)
            self.calls(e.then, nc, nw)
            self.calls(e.orelse, nc, nw)
            return
        if isinstance(e, N.BoolOp):
            self.calls(e.left, ctl, where)
            c = self.t.expr(e.left)
            nc, nw = _deeper(c, e.left.loc, ctl, where)
            self.calls(e.right, nc, nw)
            return
        if isinstance(e, N.Call) and isinstance(e.func, N.Name):
            name = e.func.id
            is_func = e.func.ref == "func"
            coop = name in _GROUP_OPS or (is_func and name in self.t.coop_funcs)
            if coop and ctl > UNIFORM:
                self.sink.error(e.loc, f"{name}() must be reached by every tile of the group, but it is under "
                                "control flow that depends on the tile index",
                                Note("the tile-dependent condition or loop is here", where))
            elif (name in _WARP_OPS or (is_func and name in self.t.warp_funcs)) and ctl >= LANE:
                self.sink.error(e.loc, f"{name}() must be reached by all 32 lanes of the warp, but it is under "
                                "control flow that depends on the lane",
                                Note("the lane-dependent condition or loop is here", where))
        for c in _children(e):
            self.calls(c, ctl, where)

    def block(self, stmts: tuple[N.Stmt, ...], ctl: int, where: Loc | None) -> None:
        for s in stmts:
            if isinstance(s, N.If):
                self.calls(s.cond, ctl, where)
                c = self.t.expr(s.cond)
                nc, nw = _deeper(c, s.cond.loc, ctl, where)
                self.block(s.then, nc, nw)
                self.block(s.orelse, nc, nw)
            elif isinstance(s, (N.While, N.For)):
                parts = (s.cond,) if isinstance(s, N.While) else s.iter.args
                for p in parts:
                    self.calls(p, ctl, where)
                c = max([self.t.expr(p) for p in parts], default=UNIFORM)
                c = max(c, self.t.block(s.body, max(ctl, c)))
                nc, nw = _deeper(c, s.loc, ctl, where)
                self.block(s.body, nc, nw)
            else:
                self.calls(s, ctl, where)


def check_cooperation(module: N.Module, sink: DiagnosticSink) -> N.Module:
    coop: set[str] = set()
    warp: set[str] = set()
    for fn in module.items:
        if not isinstance(fn, N.FuncDef):
            continue
        taint = _Taint(coop, warp)
        taint.changed = True
        while taint.changed:
            taint.changed = False
            taint.block(fn.body, UNIFORM)
        _Check(taint, sink).block(fn.body, UNIFORM, None)
        if fn.kind == "device" and any(u in fn.uses for u in ("tbarrier", "group_reduce", "tcopy", "coop_call")):
            coop.add(fn.name)
        if fn.kind == "device" and any(u in fn.uses for u in ("warp", "warp_call")):
            warp.add(fn.name)
    return module
