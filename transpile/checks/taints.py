"""What the cooperation check (checks/cooperation.py) tracks: how a value varies between the tiles
of a group (`Taint`: uniform, per warp or per lane, and through which parameters of the enclosing
device function), what the callers of a device function need to know (`FunctionFacts`), the
control a statement runs under (`Ctl`: how its conditions and loops vary, and which tiles may have
returned before it), and which uses of the linear tile index are the same in a whole warp
(`WarpRuns`: warps are runs of 32 consecutive linear indices).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tessera.base.errors import Loc, Note
from tessera.base.irnode import ir_node
from tessera.frontend import nodes as N
from tessera.transpile.builtins import Coop, Vary
from tessera.transpile.checks.callgraph import tree_children
from tessera.transpile.const_eval import evaluate
from tessera.transpile.consts import NotConstant, Value

UNIFORM, WARP, LANE = Vary.UNIFORM, Vary.WARP, Vary.LANE


@ir_node
class Taint:
    """How a value varies: `level` on its own, and for each parameter of the enclosing device
    function it depends on, the highest level through which that parameter shows."""

    level: int = UNIFORM
    params: tuple[tuple[int, int], ...] = ()

    def join(self, other: Taint) -> Taint:
        if other is NONE or other == self:
            return self
        if self is NONE:
            return other
        caps = dict(self.params)
        for p, c in other.params:
            caps[p] = max(caps.get(p, UNIFORM), c)
        return Taint(max(self.level, other.level), tuple(sorted(caps.items())))

    def cap(self, level: int) -> Taint:
        return Taint(min(self.level, level), tuple((p, min(c, level)) for p, c in self.params))

    def exceeds(self, level: int) -> bool:
        return self.level > level or any(c > level for _, c in self.params)


NONE = Taint()


@dataclass
class FunctionFacts:
    """What callers need to know about a device function."""

    coop: Coop = Coop.NONE
    result: Taint = NONE
    # parameter index -> (the highest level its argument may have, the operation, where it is)
    requires: dict[int, tuple[int, str, Loc]] = field(default_factory=dict)


@dataclass
class Ctl:
    taint: Taint
    where: Loc | None  # the condition or loop that made control vary
    returned: Taint = NONE  # how the tiles that may have returned before this point vary
    returned_at: Loc | None = None  # the first such return

    def deeper(self, t: Taint, loc: Loc) -> Ctl:
        joined = self.taint.join(t)
        return Ctl(joined, loc if joined != self.taint else self.where, self.returned, self.returned_at)

    def after_return(self, t: Taint, loc: Loc | None) -> Ctl:
        joined = self.returned.join(t)
        return Ctl(self.taint, self.where, joined, self.returned_at or (loc if joined != self.returned else None))


def returned_note(ctl: Ctl) -> Note:
    return Note("tiles may return here, under a condition that depends on the tile index", ctl.returned_at)


class WarpRuns:
    """A comparison of the linear tile index with a multiple of 32 (`tile_linear_id() < 64`, or a
    local that only ever holds `tile_linear_id()`), and its division by a multiple of 32 (or a right
    shift by 5 or more), in function `fn` with the constants `env`."""

    def __init__(self, fn: N.FuncDef, env: dict[str, Value]) -> None:
        self.linear = linear_locals(fn)
        self.env = env

    def per_warp(self, e: N.Compare | N.BinOp) -> bool:
        """`tile_linear_id() < 64`, `t >= 32`, `t // 32`, `t >> 5`: the same in the 32 lanes of a warp."""
        if isinstance(e, N.BinOp):
            k = self.constant(e.right)
            return self.is_linear(e.left) and k is not None and (
                (e.op == "//" and k > 0 and k % 32 == 0) or (e.op == ">>" and k >= 5))
        if len(e.ops) != 1 or e.ops[0] not in ("<", "<=", ">", ">="):
            return False
        (a, b), op = e.operands, e.ops[0]
        if not self.is_linear(a):
            a, b, op = b, a, {"<": ">", "<=": ">=", ">": "<", ">=": "<="}[op]
        k = self.constant(b)
        if not self.is_linear(a) or k is None:
            return False
        return (k if op in ("<", ">=") else k + 1) % 32 == 0

    def is_linear(self, e: N.Expr) -> bool:
        """The tile's linear index within its group (warps are its runs of 32)."""
        return (isinstance(e, N.Name) and e.id in self.linear) or is_tile_linear_id(e)

    def constant(self, e: N.Expr) -> int | None:
        try:
            v = evaluate(e, self.env)
        except NotConstant:
            return None
        return v if isinstance(v, int) and not isinstance(v, bool) else None


def is_tile_linear_id(e: object) -> bool:
    return isinstance(e, N.Call) and isinstance(e.func, N.Name) and e.func.id == "tile_linear_id" \
        and e.func.ref == "builtin" and not e.args


def linear_locals(fn: N.FuncDef) -> frozenset[str]:
    """Locals that only ever hold `tile_linear_id()` (`t = tile_linear_id()`, never changed)."""
    linear: set[str] = set()
    other: set[str] = set()
    stack: list[object] = list(fn.body)
    while stack:
        n = stack.pop()
        if isinstance(n, N.Assign) and isinstance(n.target, N.TupleLit):
            other.update(t.id for t in n.target.items if isinstance(t, N.Name))
        if isinstance(n, (N.Assign, N.AugAssign)) and isinstance(n.target, N.Name):
            plain = isinstance(n, N.Assign) and is_tile_linear_id(n.value)
            (linear if plain else other).add(n.target.id)
        elif isinstance(n, N.For):
            other.add(n.var)
        stack.extend(tree_children(n))
    return frozenset(linear - other)
