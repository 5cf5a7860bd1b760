"""`ShardSpec`: how a tensor is laid out over a mesh (which dimensions are split over which mesh
axes, whether it is replicated, whether it holds partial results awaiting a reduction), and the
block arithmetic of a split (`numpy.array_split`: the first `n % p` blocks are one longer)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tessera.base.errors import DistError

# Named dimensions: a matrix's rows and columns are its last two dimensions (so that a batch of
# matrices splits the same way), "batch" is the first and "channel" the second (NCHW, CUDA's default).
DIM_NAMES = ("row", "col", "batch", "channel")
REDUCE_OPS = ("sum", "prod", "max", "min", "avg")


@dataclass(frozen=True)
class ShardSpec:
    """`ShardSpec(partition=("row",), mesh_axes=("dp",), replicate=False, reduce=None)`.

    `partition`: dimensions to split ("row", "col", "batch", "channel" or dimension numbers), one
    mesh axis each from `mesh_axes` (in order; when `mesh_axes` is omitted, the mesh's first axes).
    `partition=None`: every process holds the whole tensor. `reduce` ("sum", ...): every process
    holds a full-size partial result; `resolve()` reduces it over `mesh_axes` (all of the mesh's
    axes when omitted) and then splits it as `partition` says."""

    partition: tuple[str | int, ...] | None = None
    mesh_axes: tuple[str, ...] | None = None
    replicate: bool = False
    reduce: str | None = None

    def __post_init__(self) -> None:
        part = self.partition
        if part is not None:
            if isinstance(part, (str, int)):
                part = (part,)
            if not isinstance(part, (tuple, list)) or not part:
                raise DistError(f"ShardSpec(partition=...) must be None or a non-empty tuple of dimensions, not {part!r}")
            for d in part:
                if isinstance(d, bool) or not (d in DIM_NAMES if isinstance(d, str) else isinstance(d, int) and d >= 0):
                    raise DistError(f"ShardSpec(partition=...): {d!r} is no dimension: use {', '.join(DIM_NAMES)} "
                                    "or a dimension number >= 0")
            object.__setattr__(self, "partition", tuple(part))
        axes = self.mesh_axes
        if axes is not None:
            if isinstance(axes, str):
                axes = (axes,)
            if not isinstance(axes, (tuple, list)) or not all(isinstance(a, str) and a for a in axes):
                raise DistError(f"ShardSpec(mesh_axes=...) must be a tuple of mesh axis names, not {axes!r}")
            if len(set(axes)) != len(axes):
                raise DistError(f"ShardSpec(mesh_axes=...) names an axis twice: {tuple(axes)!r}")
            object.__setattr__(self, "mesh_axes", tuple(axes))
            if self.partition is not None and len(axes) != len(self.partition):
                raise DistError(f"ShardSpec: partition {self.partition!r} needs one mesh axis per dimension, "
                                f"mesh_axes has {len(axes)}")
        if not isinstance(self.replicate, bool):
            raise DistError(f"ShardSpec(replicate=...) must be a bool, not {self.replicate!r}")
        if self.replicate and self.partition is not None:
            raise DistError("ShardSpec: replicate=True contradicts a partition")
        if self.reduce is not None and self.reduce not in REDUCE_OPS:
            raise DistError(f"ShardSpec(reduce=...) must be one of {', '.join(REDUCE_OPS)} or None, not {self.reduce!r}")

    def __repr__(self) -> str:
        parts = [f"partition={self.partition!r}"]
        if self.mesh_axes is not None:
            parts.append(f"mesh_axes={self.mesh_axes!r}")
        if self.replicate:
            parts.append("replicate=True")
        if self.reduce is not None:
            parts.append(f"reduce={self.reduce!r}")
        return f"ShardSpec({', '.join(parts)})"


def dim_number(d: str | int, ndim: int, what: str) -> int:
    """The dimension a partition entry names in a tensor of `ndim` dimensions."""
    if isinstance(d, int):
        n = d
    elif d == "row":
        n = ndim - 2 if ndim >= 2 else 0
    elif d == "col":
        n = ndim - 1 if ndim >= 2 else -1
    elif d == "batch":
        n = 0
    else:  # channel
        n = 1
    if not 0 <= n < ndim:
        raise DistError(f"{what}: partition {d!r} names no dimension of a {ndim}-dimensional tensor")
    return n


@dataclass(frozen=True)
class Placement:
    """A layout resolved against a tensor and a mesh: `splits` maps dimension -> mesh axis;
    `pending` names the axes a partial result still has to be reduced over (with `op`)."""

    splits: tuple[tuple[int, str], ...]
    pending: tuple[str, ...] = ()
    op: str | None = None

    def axis_of(self, dim: int) -> str | None:
        return next((a for d, a in self.splits if d == dim), None)

    def dim_of(self, axis: str) -> int | None:
        return next((d for d, a in self.splits if a == axis), None)

    def __repr__(self) -> str:
        splits = ", ".join(f"dim {d} over {a!r}" for d, a in self.splits) or "replicated"
        pending = f"; partial ({self.op}) over {', '.join(map(repr, self.pending))}" if self.pending else ""
        return f"<layout: {splits}{pending}>"

    def local_extent(self, dim: int, extent: int, coords: dict[str, int], sizes: dict[str, int]) -> tuple[int, int]:
        """[start, stop) of this process's part of dimension `dim` (all of it while it is partial
        over its axis: a partial result is full-size until reduced)."""
        axis = self.axis_of(dim)
        if axis is None or axis in self.pending:
            return 0, extent
        return block(extent, sizes[axis], coords[axis])


def place(spec: Any, ndim: int, mesh_axes: tuple[str, ...], what: str) -> Placement:
    """Resolve `spec` for a tensor of `ndim` dimensions on a mesh with `mesh_axes`."""
    if not isinstance(spec, ShardSpec):
        raise DistError(f"{what}: layout must be a dist.ShardSpec, not {type(spec).__name__}")
    axes = spec.mesh_axes
    part = spec.partition or ()
    if axes is None:
        if len(part) > len(mesh_axes):
            raise DistError(f"{what}: partition {spec.partition!r} splits {len(part)} dimensions but the mesh has only "
                            f"{len(mesh_axes)} axes {mesh_axes!r}")
        axes = mesh_axes[:len(part)] if part else (mesh_axes if spec.reduce else ())
    for a in axes:
        if a not in mesh_axes:
            raise DistError(f"{what}: layout names mesh axis {a!r}, but the mesh's axes are {mesh_axes!r}")
    splits: list[tuple[int, str]] = []
    for d, a in zip(part, axes):
        n = dim_number(d, ndim, what)
        if any(n == m for m, _ in splits):
            raise DistError(f"{what}: partition {spec.partition!r} splits dimension {n} twice")
        splits.append((n, a))
    if spec.reduce is None:
        return Placement(tuple(sorted(splits)))
    return Placement(tuple(sorted(splits)), tuple(axes), spec.reduce)


def block(extent: int, parts: int, index: int) -> tuple[int, int]:
    """[start, stop) of block `index` when `extent` is split in `parts` as numpy.array_split does."""
    base, extra = divmod(extent, parts)
    start = index * base + min(index, extra)
    return start, start + base + (1 if index < extra else 0)


def block_sizes(extent: int, parts: int) -> list[int]:
    return [b - a for a, b in (block(extent, parts, i) for i in range(parts))]
