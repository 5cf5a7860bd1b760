"""Collectives on distributed tensors: what each one means for a layout, the collective check
that every process agrees before any data move, and the dispatch to an engine (MPI for host
arrays, NCCL for device arrays). Each returns a new tensor, or with `async_op=True` a `Handle`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tessera.base.errors import DistError
from tessera.dist.engines import world
from tessera.dist.mesh import agree, crc
from tessera.dist.sharded import Sharded
from tessera.dist.shardspec import REDUCE_OPS, Placement, block_sizes, dim_number


class Handle:
    """An asynchronous collective: `wait()` returns its result tensor (on CUDA, once the work queued
    after it on the default stream is ordered after the collective)."""

    def __init__(self, pending: Any, build: Callable[[Any], Sharded]) -> None:
        self._pending = pending
        self._build = build
        self._result: Sharded | None = None

    def wait(self) -> Sharded:
        if self._result is None:
            self._result = self._build(self._pending.wait())
        return self._result

    def is_completed(self) -> bool:
        return self._result is not None or self._pending.test()


def _start(t: Any, axis: Any, op: str, what: str) -> tuple[str, str]:
    """Checks the arguments, then checks collectively that every process calls the same collective
    on the same tensor: (axis, the text naming the call)."""
    if not isinstance(t, Sharded):  # the others still meet this process in the check, and fail too
        call = f"dist.{op}(<{type(t).__name__}>)"
        agree(world(), call, [("the collective", (crc(call),))],
              show={"the collective": lambda v: call if v[0] == crc(call) else "another call"})
        raise DistError(f"dist.{op}(): expected a dist tensor, not {type(t).__name__}")
    call = f"dist.{op}({t.name!r}, axis={axis!r}{what})"
    digest = crc(call)
    t.mesh.check(call, [("the collective", (digest,)), *t.meta()],
                 show={"the collective": lambda v: call if v[0] == digest else "another call", **t.show()})
    return t.mesh.axis(axis, call), call


def _engine(t: Sharded, axis: str) -> Any:
    return t.mesh.nccl(axis) if t.on_device() else t.mesh.mpi(axis)


def _finish(t: Sharded, placement: Placement, async_op: bool, pending: Any,
            shape: tuple[int, ...] | None = None) -> Any:
    def build(local: Any) -> Sharded:
        return t.with_shards(placement, local, shape)

    handle = Handle(pending, build)
    return handle if async_op else handle.wait()


def _check_op(op: Any, call: str) -> str:
    if op not in REDUCE_OPS:
        raise DistError(f"{call}: op must be one of {', '.join(REDUCE_OPS)}, not {op!r}")
    return str(op)


def _partial_op(t: Sharded, axis: str, op: str, call: str) -> bool:
    """Whether `t` is a partial result over `axis` (then `op` must be its reduction)."""
    if axis not in t.placement.pending:
        return False
    if t.placement.op != op:
        raise DistError(f"{call}: {t.name!r} holds partial results to be reduced with {t.placement.op!r}, not {op!r}")
    return True


def _async(async_op: Any) -> str:
    """`async_op` as part of the call the processes compare: one process passing another value (a
    bad one included) makes every process raise instead of the others entering the collective."""
    return "" if async_op is False else f", async_op={async_op!r}"


def _flag(async_op: Any, call: str) -> bool:
    if not isinstance(async_op, bool):
        raise DistError(f"{call}: async_op must be a bool, not {async_op!r}")
    return async_op


def all_reduce(t: Sharded, axis: str, op: str = "sum", *, async_op: bool = False) -> Any:
    """Reduce the shards of the processes along `axis` elementwise; every one gets the result."""
    axis, call = _start(t, axis, "all_reduce", f", op={op!r}" + _async(async_op))
    op = _check_op(op, call)
    async_op = _flag(async_op, call)
    p = t.placement
    if _partial_op(t, axis, op, call):
        splits = tuple(s for s in p.splits if s[1] != axis)
        pending = tuple(a for a in p.pending if a != axis)
        result = Placement(splits, pending, p.op if pending else None)
    elif p.dim_of(axis) is not None:
        raise DistError(f"{call}: {t.name!r} is split over {axis!r} (dimension {p.dim_of(axis)}): its processes hold "
                        "different blocks; all_gather it, or reduce_scatter partial results")
    else:
        result = p
    return _finish(t, result, async_op, _engine(t, axis).all_reduce(t.local, op, async_op, call))


def reduce_scatter(t: Sharded, axis: str, op: str = "sum", *, dim: Any = None, async_op: bool = False) -> Any:
    """Reduce elementwise along `axis` and give each process its block of the result, split along
    the dimension the layout splits over `axis` (else `dim`, default 0) as numpy.array_split does."""
    axis, call = _start(t, axis, "reduce_scatter", f", op={op!r}, dim={dim!r}" + _async(async_op))
    op = _check_op(op, call)
    async_op = _flag(async_op, call)
    p = t.placement
    partial = _partial_op(t, axis, op, call)
    d = p.dim_of(axis)
    want = dim_number(dim, t.ndim, call) if dim is not None else None
    if d is not None and not partial:
        raise DistError(f"{call}: {t.name!r} is already split over {axis!r} (dimension {d})")
    if d is None:
        d = want if want is not None else 0
        other = p.axis_of(d)
        if other is not None:
            raise DistError(f"{call}: dimension {d} of {t.name!r} is split over {other!r} already; pass dim= to "
                            "scatter another dimension")
    elif want is not None and want != d:
        raise DistError(f"{call}: the layout of {t.name!r} splits dimension {d} over {axis!r}, not dimension {want}")
    sizes = block_sizes(t.shape[d], t.mesh.sizes[axis])
    pending = tuple(a for a in p.pending if a != axis)
    splits = tuple(sorted({*p.splits, (d, axis)}))
    result = Placement(splits, pending, p.op if pending else None)
    return _finish(t, result, async_op, _engine(t, axis).reduce_scatter(t.local, d, sizes, op, async_op, call))


def all_gather(t: Sharded, axis: str, *, async_op: bool = False) -> Any:
    """Join the blocks a layout splits over `axis`: every process along it gets the whole dimension."""
    axis, call = _start(t, axis, "all_gather", _async(async_op))
    async_op = _flag(async_op, call)
    p = t.placement
    d = p.dim_of(axis)
    if axis in p.pending:
        raise DistError(f"{call}: {t.name!r} holds partial results over {axis!r}; resolve() or all_reduce it")
    if d is None:
        raise DistError(f"{call}: {t.name!r} is not split over {axis!r}: every process already has all of it")
    result = replace(p, splits=tuple(s for s in p.splits if s[1] != axis))
    sizes = block_sizes(t.shape[d], t.mesh.sizes[axis])
    return _finish(t, result, async_op, _engine(t, axis).all_gather(t.local, d, sizes, async_op))


def broadcast(t: Sharded, axis: str, root: int = 0, *, async_op: bool = False) -> Any:
    """Every process along `axis` gets the shard of the process at coordinate `root`. Of a tensor
    split over `axis` that is the root's block, which the result holds replicated over `axis`: its
    global shape is the block's (`dist.broadcast(A, axis="dp", root=0)` on row blocks gives every
    process of the axis block 0 of the rows)."""
    axis, call = _start(t, axis, "broadcast", f", root={root!r}" + _async(async_op))
    async_op = _flag(async_op, call)
    n = t.mesh.sizes[axis]
    if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < n:
        raise DistError(f"{call}: root must be a coordinate on {axis!r} (0..{n - 1}), not {root!r}")
    p = t.placement
    if axis in p.pending:
        raise DistError(f"{call}: {t.name!r} holds partial results over {axis!r}: one process's part cannot "
                        "stand for the sum; resolve() or all_reduce it first")
    d = p.dim_of(axis)
    shape, local = t.shape, tuple(t.local.shape)
    if d is not None:  # the root's block, replicated over the axis
        size = block_sizes(t.shape[d], n)[root]
        shape, local = t.shape[:d] + (size,) + t.shape[d + 1:], local[:d] + (size,) + local[d + 1:]
        p = replace(p, splits=tuple(s for s in p.splits if s[1] != axis))
    return _finish(t, p, async_op, _engine(t, axis).broadcast(t.local, root, async_op, local), shape)


def all_to_all(t: Sharded, axis: str, split_dim: Any = 0, concat_dim: Any = 1, *, async_op: bool = False) -> Any:
    """Move the split over `axis` from `concat_dim` to `split_dim`: each process splits its shard
    along `split_dim`, sends block j to process j and joins what it receives along `concat_dim`."""
    axis, call = _start(t, axis, "all_to_all", f", split_dim={split_dim!r}, concat_dim={concat_dim!r}"
                           + _async(async_op))
    async_op = _flag(async_op, call)
    s, c = dim_number(split_dim, t.ndim, call), dim_number(concat_dim, t.ndim, call)
    p = t.placement
    if s == c:
        raise DistError(f"{call}: split_dim and concat_dim are the same dimension ({s})")
    if axis in p.pending:
        raise DistError(f"{call}: {t.name!r} holds partial results over {axis!r}; resolve() it first")
    if p.dim_of(axis) != c:
        raise DistError(f"{call}: {t.name!r} must be split over {axis!r} along concat_dim (dimension {c}); its layout "
                        f"is {p!r}")
    if p.axis_of(s) is not None:
        raise DistError(f"{call}: split_dim {s} of {t.name!r} is split over {p.axis_of(s)!r} already")
    n = t.mesh.sizes[axis]
    result = replace(p, splits=tuple(sorted((s if d == c else d, a) for d, a in p.splits)))
    pending = _engine(t, axis).all_to_all(t.local, s, block_sizes(t.shape[s], n), c, block_sizes(t.shape[c], n),
                                           async_op)
    return _finish(t, result, async_op, pending)


def resolved(t: Sharded) -> Sharded:
    """`t` with its pending reductions carried out (itself when there are none)."""
    for axis in t.placement.pending:
        op = t.placement.op or "sum"
        if t.placement.dim_of(axis) is not None:
            t = reduce_scatter(t, axis, op)
        else:
            t = all_reduce(t, axis, op)
    return t


def gathered(t: Sharded) -> Any:
    """The whole of `t` (its local array once every split is gathered)."""
    t = resolved(t)
    for _, axis in t.placement.splits:
        t = all_gather(t, axis)
    return t.local
