"""Static work counts of a lowered kernel for a launch's shapes: the autotuner's cost-model input.

A walk over the kernel's body multiplies what each statement does by the trip counts of the loops
around it, evaluated with the launch's shape symbols and the variant's constants:
- FLOPs: floating-point `+ - * /` (an `fma` is two, a compound assignment one more), per tile;
- global bytes: loads and stores of global tensors and per-tile vector accesses
  (`r[:] = X[i, j:j + 8]`), per tile, and copies (`tcopy`, `tcopy_async`) between global and
  shared memory, per group (a group copies cooperatively);
- shared-memory accesses (words), per tile; barriers, per group;
- tensor-core work (spec section 12), per group and per kind of `mma.sync` (f16/bf16 -> f32,
  TF32, 8-bit -> i32): an `Mma` on an `M x N` fragment with `K`-wide operands is 2 * M * N * K
  operations; its operands are read from shared memory (each warp reads the rows of A and the
  columns of B of its block of the fragment, lir/frag_layout.py); a `FragLoad` / `FragStore` moves
  M * N elements of its view (global: copy bytes; shared: words), and a `FragAssign` evaluates its
  expression once per element of the fragment.
A loop bound may be a local assigned before the loop (`stop = min(N, m0 + BM) if causal else N`,
with comparisons and conditional expressions). Where a bound depends on a value known only at run
time (a tile index, a loaded value) the tile and group indices count as 0, a loop whose stop is
not known runs once, and so does a `while` loop; of the two branches of an `if` the larger counts.
These are estimates of what the kernel asks for, not of what reaches DRAM through the caches;
`global_footprint` gives the other bound: the bytes of the global tensors, which a launch that
touches all of them must move at least once.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import fields

from tessera.base.irnode import ir_node
from tessera.transpile.consts import Value
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.frag_layout import MMA_KINDS, choose
from tessera.transpile.lir.visit import children, stmt_exprs

_FLOAT_OPS = frozenset("+-*/")
_MAX_TRIPS = 1 << 40


@ir_node
class WorkCounts:
    """Per tile and per group, for one launch of one variant."""

    flops: float = 0.0          # per tile: on the FMA pipes
    global_bytes: float = 0.0   # per tile: loads and stores of global tensors
    copy_bytes: float = 0.0     # per group: copies between global and shared memory, fragment loads/stores
    shared_words: float = 0.0   # per tile: shared-memory loads and stores, in 4-byte words
    barriers: float = 0.0       # per group
    mma_f16: float = 0.0        # per group: tensor-core operations, f16 or bf16 operands (f32 accumulate)
    mma_tf32: float = 0.0       # per group: ... f32 operands (TF32)
    mma_i8: float = 0.0         # per group: ... 8-bit integer operands (i32 accumulate)

    def _combine(self, o: WorkCounts, f: Callable[[float, float], float]) -> WorkCounts:
        return WorkCounts(*(f(getattr(self, d.name), getattr(o, d.name)) for d in fields(self)))

    def __add__(self, o: WorkCounts) -> WorkCounts:
        return self._combine(o, lambda a, b: a + b)

    def scaled(self, k: float) -> WorkCounts:
        return WorkCounts(*(getattr(self, d.name) * k for d in fields(self)))

    def larger(self, o: WorkCounts) -> WorkCounts:
        return self._combine(o, max)

    @property
    def mma_ops(self) -> float:
        """Tensor-core operations per group, every kind."""
        return self.mma_f16 + self.mma_tf32 + self.mma_i8


# The WorkCounts field of each mma.sync operand type (frag_layout.MMA_KINDS).
MMA_FIELD = {"f16": "mma_f16", "bf16": "mma_f16", "f32": "mma_tf32", "i8": "mma_i8", "u8": "mma_i8"}


_COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
            "!=": operator.ne}
_INDICES = ("tile_linear_id", "tile_id", "group_id", "group_linear_id", "global_linear_id", "lane_id", "warp_id")


def _value(e: L.Expr, env: Mapping[str, Value]) -> int | None:
    """An integer expression's value with `env` (None when it depends on anything else)."""
    if isinstance(e, L.Const):
        return e.value if isinstance(e.value, int) and not isinstance(e.value, bool) else None
    if isinstance(e, L.Var):
        v = env.get(e.name)
        return v if isinstance(v, int) and not isinstance(v, bool) else None
    if isinstance(e, L.Cast):
        return _value(e.x, env)
    if isinstance(e, L.Affine):
        return _value(e.source, env)
    if isinstance(e, L.Binary):
        a, b = _value(e.a, env), _value(e.b, env)
        if a is None or b is None:
            return None
        if e.op == "+":
            return a + b
        if e.op == "-":
            return a - b
        if e.op == "*":
            return a * b
        if e.op in ("//", "/") and b:
            return int(a / b)
        if e.op == "%" and b:
            return int(math.fmod(a, b))
        return None
    if isinstance(e, L.Compare):
        a, b = _value(e.a, env), _value(e.b, env)
        return None if a is None or b is None else int(_COMPARE[e.op](a, b))
    if isinstance(e, L.Select):
        c = _value(e.cond, env)
        return None if c is None else _value(e.a if c else e.b, env)
    if isinstance(e, L.Intrinsic) and e.op in _INDICES and isinstance(env, _ZeroDefault):
        return 0  # a tile or group index, at the first tile of the first group
    if isinstance(e, L.Intrinsic) and e.op in ("min", "max") and len(e.args) == 2:
        a, b = _value(e.args[0], env), _value(e.args[1], env)
        if a is None or b is None:
            return None
        return min(a, b) if e.op == "min" else max(a, b)
    return None


class _Counter:
    def __init__(self, fn: L.Function, env: Mapping[str, Value]) -> None:
        self.env = dict(env)
        self.space = {b.name: b for b in fn.buffers}
        self.tiles = max(1, fn.tile_count)

    def _bound(self, e: L.Expr) -> int | None:
        v = _value(e, self.env)
        if v is None:  # a start that depends on the tile (a strided loop): take it as 0
            v = _value(e, _ZeroDefault(self.env))
        return v

    def trips(self, s: L.For) -> float:
        """A loop's trip count; its start may depend on the tile (taken at the first tile), its stop
        on the locals assigned before it (`stop = N`); one trip when it is not known."""
        a, b, step = self._bound(s.start), _value(s.stop, self.env), self._bound(s.step)
        if a is None or b is None or not step:
            return 1.0
        return float(min(len(range(a, b, step)), _MAX_TRIPS))

    def local(self, var: L.Var, value: L.Expr | None) -> None:
        """Record a local's integer value, at the first tile of the first group (a loop bound may
        be one); forget it when it is not known."""
        v = _value(value, _ZeroDefault(self.env)) if value is not None else None
        if v is None:
            self.env.pop(var.name, None)
        else:
            self.env[var.name] = v

    def expr(self, e: L.Expr) -> WorkCounts:
        out = WorkCounts()
        stack = [e]
        flops = global_bytes = words = 0.0
        while stack:
            x = stack.pop()
            if isinstance(x, L.Binary) and x.dtype.is_float and x.op in _FLOAT_OPS:
                flops += 1
            elif isinstance(x, L.Intrinsic) and x.dtype.is_float:
                flops += 2 if x.op == "fma" else 1
            elif isinstance(x, (L.Load, L.Atomic)):
                b = self.space.get(x.buf)
                if b is not None and b.space == "global":
                    global_bytes += b.elem.size
                elif b is not None and b.space == "shared":
                    words += max(1, b.elem.size // 4)
            stack.extend(children(x))
        if flops or global_bytes or words:
            out = WorkCounts(flops, global_bytes, 0.0, words)
        return out

    def store(self, s: L.Store | L.Assign) -> WorkCounts:
        extra = WorkCounts(flops=1.0) if s.op is not None and (s.op_type or s.value.dtype).is_float else WorkCounts()
        if isinstance(s, L.Store):
            b = self.space.get(s.buf)
            if b is not None and b.space == "global":
                extra = extra + WorkCounts(global_bytes=float(b.elem.size))
            elif b is not None and b.space == "shared":
                extra = extra + WorkCounts(shared_words=float(max(1, b.elem.size // 4)))
        return extra

    def copy(self, s: L.Copy) -> WorkCounts:
        src = self.space.get(s.src.buf)
        dst = self.space.get(s.dst.buf)
        extents = [x for x in s.src.extents if x is not None] or [1]
        elem = src.elem.size if src is not None else 4
        nbytes = float(math.prod(extents) * elem)
        spaces = {b.space for b in (src, dst) if b is not None}
        return WorkCounts(copy_bytes=nbytes) if "global" in spaces else WorkCounts()

    def _frag_shape(self, name: str) -> tuple[int, int]:
        b = self.space.get(name)
        dims = [_value(d, self.env) for d in b.shape] if b is not None else []
        return (dims[0] or 0, dims[1] or 0) if len(dims) == 2 else (0, 0)

    def mma(self, s: L.Mma) -> WorkCounts:
        """One `Mma` of the whole group: 2 * M * N * K tensor-core operations and the operand
        words its warps read from shared memory."""
        m, n = self._frag_shape(s.acc)
        a = [x for x in s.a.extents if x is not None]
        src = self.space.get(s.a.buf)
        if not a or src is None or src.elem.name not in MMA_KINDS:
            return WorkCounts()
        k = a[-1]
        ops = WorkCounts(**{MMA_FIELD[src.elem.name]: 2.0 * m * n * k})
        warps = max(1, self.tiles // 32)
        layout = choose(m, n, warps)
        rows, cols = (layout.warp_m, layout.warp_n) if layout is not None else (m, n)
        words = warps * (rows + cols) * k * src.elem.size / 4  # A's rows and B's columns of each warp's block
        return ops + WorkCounts(shared_words=words / self.tiles)

    def frag_move(self, view: L.View, acc: str) -> WorkCounts:
        """A `FragLoad` / `FragStore`: the fragment's M * N elements through `view`."""
        m, n = self._frag_shape(acc)
        b = self.space.get(view.buf)
        if b is None:
            return WorkCounts()
        if b.space == "global":
            return WorkCounts(copy_bytes=float(m * n * b.elem.size))
        if b.space == "shared":
            return WorkCounts(shared_words=m * n * max(1, b.elem.size // 4) / self.tiles)
        return WorkCounts()

    def vec_move(self, s: L.VecMove) -> WorkCounts:
        """A per-tile vector access: the view's elements, this tile's own."""
        b = self.space.get(s.view.buf)
        n = math.prod(x for x in s.view.extents if x is not None)
        if b is not None and b.space == "global":
            return WorkCounts(global_bytes=float(n * b.elem.size))
        if b is not None and b.space == "shared":
            return WorkCounts(shared_words=float(n * max(1, b.elem.size // 4)))
        return WorkCounts()

    def frag_assign(self, s: L.FragAssign) -> WorkCounts:
        """A `FragAssign`: its expression per element of the fragment, spread over the tiles."""
        m, n = self._frag_shape(s.acc)
        work = self.expr(s.value)
        if s.op is not None and (s.op_type or s.value.dtype).is_float:
            work = work + WorkCounts(flops=1.0)
        return work.scaled(m * n / self.tiles)

    def body(self, body: tuple[L.Stmt, ...]) -> WorkCounts:
        total = WorkCounts()
        for s in body:
            total = total + self.stmt(s)
        return total

    def stmt(self, s: L.Stmt) -> WorkCounts:
        if isinstance(s, L.For):
            return self.body(s.body).scaled(self.trips(s))
        if isinstance(s, L.If):
            return self.expr(s.cond) + self.body(s.then).larger(self.body(s.orelse))
        if isinstance(s, L.While):
            return self.expr(s.cond) + self.body(s.body)
        if isinstance(s, L.ElementLoop):
            return self.body(s.body)  # per element: scaled by the elements per tile by the caller
        if isinstance(s, L.Copy):
            return self.copy(s)
        if isinstance(s, (L.Barrier, L.AsyncWait)):
            return WorkCounts(barriers=1.0)
        if isinstance(s, L.Mma):
            return self.mma(s)
        if isinstance(s, L.FragLoad):
            return self.frag_move(s.src, s.acc)
        if isinstance(s, L.FragStore):
            return self.frag_move(s.dst, s.acc)
        if isinstance(s, L.FragAssign):
            return self.frag_assign(s)
        if isinstance(s, L.VecMove):
            return self.vec_move(s)
        if isinstance(s, L.Decl) or (isinstance(s, L.Assign) and s.op is None):
            self.local(s.var, s.init if isinstance(s, L.Decl) else s.value)
        elif isinstance(s, L.Assign):
            self.env.pop(s.var.name, None)
        work = WorkCounts()
        for e in stmt_exprs(s):
            work = work + self.expr(e)
        if isinstance(s, (L.Store, L.Assign)):
            work = work + self.store(s)
        return work


class _ZeroDefault(dict):
    """An environment in which a name it does not know is 0 (a tile index at its first tile)."""

    def get(self, key, default=None):
        return super().get(key, 0)


def count_work(fn: L.Function, shapes: Mapping[str, int], groups: int) -> WorkCounts:
    """Per-tile (FLOPs, global bytes, shared words) and per-group (copy bytes, barriers,
    tensor-core operations) counts of kernel `fn` launched on `groups` groups with these shape symbols."""
    env: dict[str, Value] = {c.name: c.value for c in fn.consts}
    env.update(shapes)
    counter = _Counter(fn, env)
    work = counter.body(fn.body)
    loops = [s for s in fn.body if isinstance(s, L.ElementLoop)]
    if loops:  # a map kernel: its elements spread over every tile of the grid
        count = _value(loops[0].count, env) or 1
        per_tile = count / max(1, groups * fn.tile_count)
        work = WorkCounts(work.flops * per_tile, work.global_bytes * per_tile, work.copy_bytes,
                          work.shared_words * per_tile, work.barriers, work.mma_f16, work.mma_tf32, work.mma_i8)
    return work


def global_footprint(fn: L.Function, shapes: Mapping[str, int]) -> float:
    """Bytes of the kernel's global tensors with these shape symbols (a dimension that is not
    known counts as 1)."""
    env: dict[str, Value] = {c.name: c.value for c in fn.consts}
    env.update(shapes)
    total = 0.0
    for b in fn.buffers:
        if b.space == "global":
            total += math.prod(max(0, _value(d, env) or 1) for d in b.shape) * b.elem.size
    return total
