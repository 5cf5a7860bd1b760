"""`Mesh`: the job's processes arranged on named axes (rank r at row-major position r), with one
communicator per axis (MPI, and NCCL for device arrays), each created once and reused; and the
collective metadata check that turns a disagreement between processes into a `DistError` on
every process instead of a hang."""

from __future__ import annotations

import math
import re
import zlib
from typing import Any

import numpy as np

from tessera.base.errors import DistError
from tessera.dist.engines import MpiEngine, world

_AXIS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def crc(text: str) -> int:
    """A digest that is the same in every process (Python's hash() of a str is salted per process)."""
    return zlib.crc32(text.encode("utf-8"))


class Mesh:
    """`Mesh(axes=("dp", "tp"), shape=(2, 2))` over the job's processes; the design documents'
    `Mesh(axes=["tp"], devices=range(8))` (one axis, or with `shape`) is accepted too: `devices`
    lists the job's ranks in mesh order (row-major)."""

    def __init__(self, axes: Any, shape: Any = None, devices: Any = None) -> None:
        if isinstance(axes, str) or not isinstance(axes, (tuple, list)) or not axes:
            raise DistError(f"Mesh(axes=...) must be a non-empty tuple of axis names, not {axes!r}")
        for a in axes:
            if not isinstance(a, str) or not _AXIS_NAME.fullmatch(a):
                raise DistError(f"Mesh(axes=...): {a!r} is not an axis name (letters, digits, _)")
        if len(set(axes)) != len(axes):
            raise DistError(f"Mesh(axes=...) names an axis twice: {tuple(axes)!r}")
        self.axes: tuple[str, ...] = tuple(axes)
        self._world = world()
        size = self._world.Get_size()
        order = self._devices(devices, size)
        if shape is None:
            if len(self.axes) != 1:
                raise DistError(f"Mesh(axes={self.axes!r}) needs shape=(...) with one extent per axis")
            shape = (len(order),)
        if isinstance(shape, int) and not isinstance(shape, bool):
            shape = (shape,)
        if (not isinstance(shape, (tuple, list)) or len(shape) != len(self.axes)
                or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in shape)):
            raise DistError(f"Mesh(shape=...) must be {len(self.axes)} positive int(s), one per axis of "
                            f"{self.axes!r}, not {shape!r}")
        self.shape: tuple[int, ...] = tuple(shape)
        if math.prod(self.shape) != size:
            raise DistError(f"Mesh(shape={self.shape!r}) has {math.prod(self.shape)} positions but the job has "
                            f"{size} process{'es' if size != 1 else ''} (start it with mpiexec -n "
                            f"{math.prod(self.shape)})")
        if len(order) != size:
            raise DistError(f"Mesh(devices=...) lists {len(order)} ranks but the job has {size} processes")
        self.rank: int = self._world.Get_rank()
        self.size: int = size
        self._order = order  # mesh position -> rank
        position = np.unravel_index(order.index(self.rank), self.shape)
        self.coords: dict[str, int] = {a: int(c) for a, c in zip(self.axes, position)}
        self.sizes: dict[str, int] = dict(zip(self.axes, self.shape))
        self.digest = crc(f"{self.axes!r}{self.shape!r}{order!r}")
        name = "the mesh (axes, shape, devices)"
        self.check("Mesh()", [(name, (self.digest,))],
                   show={name: lambda v: f"{self!r}, devices {order}" if v[0] == self.digest else "another mesh"})
        self._mpi: dict[str, MpiEngine] = {}
        self._nccl: dict[str, Any] = {}

    @staticmethod
    def _devices(devices: Any, size: int) -> list[int]:
        if devices is None:
            return list(range(size))
        try:
            order = [int(d) for d in devices]
        except (TypeError, ValueError):
            raise DistError(f"Mesh(devices=...) must be the job's ranks (ints), not {devices!r}"[:300]) from None
        if sorted(order) != list(range(len(order))):
            raise DistError(f"Mesh(devices=...) must list each rank 0..{len(order) - 1} once, not {order!r}"[:300])
        return order

    def __repr__(self) -> str:
        return f"Mesh(axes={self.axes!r}, shape={self.shape!r})"

    def axis(self, name: Any, what: str) -> str:
        if name not in self.axes:
            raise DistError(f"{what}: axis={name!r} is not an axis of {self!r}")
        return str(name)

    def ranks_along(self, axis: str) -> list[int]:
        """The ranks of this process's group along `axis`, in coordinate order."""
        k = self.axes.index(axis)
        out = []
        for c in range(self.shape[k]):
            pos = [self.coords[a] for a in self.axes]
            pos[k] = c
            out.append(self._order[int(np.ravel_multi_index(pos, self.shape))])
        return out

    def mpi(self, axis: str) -> MpiEngine:
        """The MPI communicator of this process's group along `axis` (rank = coordinate)."""
        eng = self._mpi.get(axis)
        if eng is None:
            k = self.axes.index(axis)
            others = [self.coords[a] for a in self.axes if a != axis]
            color = int(np.ravel_multi_index(others, [n for i, n in enumerate(self.shape) if i != k])) if others else 0
            eng = self._mpi[axis] = MpiEngine(self._world.Split(color, self.coords[axis]))
        return eng

    def nccl(self, axis: str) -> Any:
        """The NCCL communicator of this process's group along `axis`, bootstrapped over its MPI
        communicator on first use."""
        comm = self._nccl.get(axis)
        if comm is None:
            from tessera.dist.nccl import NcclEngine

            comm = self._nccl[axis] = NcclEngine.bootstrap(self.mpi(axis))
        return comm

    def check(self, what: str, fields: list[tuple[str, tuple[int, ...]]], show: dict[str, Any] | None = None) -> None:
        """See `agree` (over the job's processes, which the mesh covers)."""
        agree(self._world, what, fields, show)


def agree(comm: Any, what: str, fields: list[tuple[str, tuple[int, ...]]], show: dict[str, Any] | None = None) -> None:
    """Every process of `comm` contributes `fields` (name, up to 8 ints) that must agree across
    them: one Allgather of a fixed-size int64 table (the same size whatever the operation, so that
    processes calling different operations still meet in it). A disagreement raises DistError on
    every process, naming the field and which processes had which value (`show[name]` turns a
    value into text)."""
    if len(fields) > MAX_FIELDS or any(len(v) > 8 for _, v in fields):
        raise DistError(f"{what}: too many fields to check (tensors have at most 8 dimensions)")
    vec = np.zeros((MAX_FIELDS, 9), np.int64)
    for i, (_, v) in enumerate(fields):
        vec[i, 0] = len(v)
        vec[i, 1:1 + len(v)] = [x & 0x7FFFFFFFFFFFFFFF for x in v]
    size = comm.Get_size()
    table = np.empty((size, *vec.shape), np.int64)
    comm.Allgather(vec, table)
    if (table == vec).all():  # the common case, tested at once: every process sent this table
        return
    show = show or {}
    for i, (name, _) in enumerate(fields):
        seen: dict[tuple[int, ...], list[int]] = {}
        for r in range(size):
            n = int(table[r, i, 0])
            seen.setdefault(tuple(int(x) for x in table[r, i, 1:1 + n]), []).append(r)
        if len(seen) > 1:
            f = show.get(name)
            where = "; ".join(f"{f(v) if f else v[0] if len(v) == 1 else v} on process{'es' if len(rs) > 1 else ''} "
                              f"{', '.join(map(str, rs))}" for v, rs in seen.items())
            raise DistError(f"{what}: the processes disagree on {name}: {where}")


MAX_FIELDS = 8
