"""Distributed tensors: a global shape and dtype, a layout over a mesh, and this process's shard
(`.local`: a NumPy array on the CPU backend, a `DeviceBuffer` on CUDA). `tensor` and `from_numpy`
check collectively that every process agrees on the shape, dtype and layout; arguments that one
process refuses make every process raise (mesh.refuse), never a hang."""

from __future__ import annotations

import itertools
import re
from typing import Any, NoReturn

import numpy as np

from tessera.base.errors import DistError, TesseraError
from tessera.dist.engines import world
from tessera.dist.mesh import Mesh, crc, refuse
from tessera.dist.sharded import Sharded
from tessera.dist.shardspec import Placement, place

_NAME = re.compile(r"[^\x00-\x1f\x7f]{1,64}")
_ALIASES = {"fp32": "f32", "fp16": "f16", "fp64": "f64", "float32": "f32", "float16": "f16", "float64": "f64"}
_counter = itertools.count()


def as_dtype(dtype: Any, what: str) -> np.dtype:
    """A .tsr element type name ("f32"; "fp32" as the design documents spell it) or a NumPy dtype."""
    from tessera.base.dtypes import SCALARS

    name = _ALIASES.get(dtype, dtype) if isinstance(dtype, str) else None
    if name in SCALARS:
        if name == "bf16":
            try:
                import ml_dtypes
            except ImportError:
                raise DistError(f"{what}: dtype 'bf16' needs ml_dtypes (pip install ml_dtypes)") from None
            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(SCALARS[name].numpy)
    try:
        dt = np.dtype(dtype) if not isinstance(dtype, str) else None
    except TypeError:
        dt = None
    if dt is None or dt.kind not in "biuf" or dt.byteorder == ">":
        raise DistError(f"{what}: dtype must be a .tsr scalar type ({', '.join(SCALARS)}) or a NumPy dtype of one, "
                        f"not {dtype!r}"[:300])
    return dt


def dtype_name(code: tuple[int, ...]) -> str:
    for t in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
              "float64", "bfloat16"):
        if crc(t) == code[0]:
            return t
    return "another dtype"


class DistTensor(Sharded):
    """A tensor spread over a mesh; create it with `dist.tensor` or `dist.from_numpy`."""

    def __init__(self, name: str, shape: tuple[int, ...], dtype: np.dtype, placement: Placement, mesh: Mesh,
                 local: Any) -> None:
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.placement = placement
        self.mesh = mesh
        self._local = local

    @property
    def local(self) -> Any:
        """This process's shard: its block of the tensor (the whole tensor when replicated, a
        full-size partial result while a reduction is pending)."""
        return self._local

    @property
    def layout(self) -> Placement:
        """The layout as resolved on the mesh: which dimension is split over which axis, and the
        axes a partial result still has to be reduced over."""
        return self.placement

    def __repr__(self) -> str:
        return (f"<dist tensor {self.name!r} {self.shape} {self.dtype} {self.placement!r} on {self.mesh!r}, "
                f"local {tuple(self._local.shape)}>")

    def ranges(self) -> tuple[tuple[int, int], ...]:
        """[start, stop) of this process's shard in each dimension."""
        return tuple(self.placement.local_extent(d, n, self.mesh.coords, self.mesh.sizes) for d, n in enumerate(self.shape))

    def on_device(self) -> bool:
        return not isinstance(self._local, np.ndarray)

    def with_shards(self, placement: Placement, local: Any, shape: tuple[int, ...] | None = None) -> DistTensor:
        return DistTensor(self.name, self.shape if shape is None else shape, self.dtype, placement, self.mesh, local)

    def resolve(self) -> DistTensor:
        """Carry out a pending reduction (reduce="sum" and the like): reduce-scatter over each axis
        that splits a dimension, all-reduce over the others. Updates this tensor and returns it."""
        from tessera.dist.collectives import resolved

        done = resolved(self)
        self.placement, self._local = done.placement, done.local
        return self

    def to_numpy(self) -> np.ndarray:
        """The global value, on every process (a pending reduction is carried out on a copy)."""
        from tessera.dist.collectives import gathered

        local = gathered(self)
        return local if isinstance(local, np.ndarray) else local.to_host()

    def meta(self) -> list[tuple[str, tuple[int, ...]]]:
        """The fields every process must agree on before this tensor's data move."""
        return [(f"the shape of {self.name!r}", self.shape), (f"the dtype of {self.name!r}", (crc(self.dtype.name),)),
                (f"the layout of {self.name!r}", (crc(repr(self.placement)),)),
                (f"where {self.name!r} lives", (int(self.on_device()),))]

    def show(self) -> dict[str, Any]:
        mine = crc(repr(self.placement))
        return {f"the dtype of {self.name!r}": dtype_name,
                f"the layout of {self.name!r}": lambda v: repr(self.placement) if v[0] == mine else "another layout",
                f"where {self.name!r} lives": lambda v: "device" if v[0] else "host"}


def _args(shape: Any, mesh: Any, name: Any, what: str) -> tuple[tuple[int, ...], str]:
    if not isinstance(mesh, Mesh):
        raise DistError(f"{what}: mesh must be a dist.Mesh, not {type(mesh).__name__}")
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if (not isinstance(shape, (tuple, list)) or not 1 <= len(shape) <= 8
            or not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0 for n in shape)):
        raise DistError(f"{what}: shape must be 1 to 8 non-negative ints, not {shape!r}"[:300])
    if name is None:
        name = f"tensor{next(_counter)}"
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise DistError(f"{what}: name must be a printable str of 1 to 64 characters, not {name!r}"[:300])
    return tuple(int(n) for n in shape), name


def _backend(backend: str) -> str:
    from tessera.api import select_backend

    return select_backend(backend)[0]


def _checked(t: DistTensor, what: str) -> DistTensor:
    t.mesh.check(what, t.meta(), show=t.show())
    return t


def _refused(what: str, e: TesseraError) -> NoReturn:
    """This process refused its arguments: every process of the job (which every mesh covers)
    raises, the others in their check."""
    refuse(world(), what, e if isinstance(e, DistError) else DistError(f"{what}: {e}"))


def tensor(shape: Any, layout: Any = None, mesh: Any = None, dtype: Any = "f32", *, name: str | None = None,
           backend: str = "auto") -> DistTensor:
    """A zero-filled distributed tensor of global `shape` (`layout` defaults to replicated)."""
    from tessera.dist.shardspec import ShardSpec

    what = "dist.tensor()"
    try:  # checked here, agreed on in _checked: a process that refuses its arguments still meets the others
        dims, name = _args(shape, mesh, name, what)
        dt = as_dtype(dtype, what)
        placement = place(layout if layout is not None else ShardSpec(None, replicate=True), len(dims), mesh.axes, what)
        t = DistTensor(name, dims, dt, placement, mesh, None)
        local_shape = tuple(b - a for a, b in t.ranges())
        if _backend(backend) == "cuda":
            from tessera.dist.device import DeviceBuffer

            t._local = DeviceBuffer.zeros(local_shape, dt)
        else:
            t._local = np.zeros(local_shape, dt)
    except TesseraError as e:
        _refused(what, e)
    return _checked(t, f"dist.tensor({name!r})")


def from_numpy(array: Any, layout: Any = None, mesh: Any = None, *, name: str | None = None,
               backend: str = "auto") -> DistTensor:
    """A distributed tensor from the global `array` that every process passes (each keeps its
    block; with a pending reduction each keeps all of its own array, its partial result)."""
    from tessera.dist.shardspec import ShardSpec

    what = "dist.from_numpy()"
    try:  # as in `tensor`
        if not isinstance(array, np.ndarray):
            raise DistError(f"{what}: array must be a NumPy array, not {type(array).__name__}")
        dims, name = _args(array.shape, mesh, name, what)
        dt = as_dtype(array.dtype, what)
        placement = place(layout if layout is not None else ShardSpec(None, replicate=True), len(dims), mesh.axes, what)
        t = DistTensor(name, dims, dt, placement, mesh, None)
        block = np.ascontiguousarray(array[tuple(slice(a, b) for a, b in t.ranges())]).copy()
        if _backend(backend) == "cuda":
            from tessera.dist.device import DeviceBuffer

            t._local = DeviceBuffer.from_host(block)
        else:
            t._local = block
    except TesseraError as e:
        _refused(what, e)
    return _checked(t, f"dist.from_numpy({name!r})")
