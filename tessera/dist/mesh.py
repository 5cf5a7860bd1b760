"""`Mesh`: the job's processes arranged on named axes (rank r at row-major position r), with one
communicator per axis (MPI, and NCCL for device arrays), each created once and reused; and the
collective metadata check that turns a disagreement between processes into a `DistError` on
every process instead of a hang."""

from __future__ import annotations

import math
import re
import zlib
from typing import Any, NoReturn

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
        self._world = world()
        try:  # checked here, agreed on below: a process that refuses its arguments still meets the others
            self.axes, self.shape, order = self._checked(axes, shape, devices, self._world.Get_size())
        except DistError as e:
            refuse(self._world, "Mesh()", e)
        size = self._world.Get_size()
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

    @classmethod
    def _checked(cls, axes: Any, shape: Any, devices: Any, size: int) -> tuple[tuple[str, ...], tuple[int, ...], list[int]]:
        """(axes, shape, the ranks in mesh order) of a mesh over a job of `size` processes."""
        if isinstance(axes, str) or not isinstance(axes, (tuple, list)) or not axes:
            raise DistError(f"Mesh(axes=...) must be a non-empty tuple of axis names, not {axes!r}"[:300])
        for a in axes:
            if not isinstance(a, str) or not _AXIS_NAME.fullmatch(a):
                raise DistError(f"Mesh(axes=...): {a!r} is not an axis name (letters, digits, _)"[:300])
        if len(set(axes)) != len(axes):
            raise DistError(f"Mesh(axes=...) names an axis twice: {tuple(axes)!r}")
        axes = tuple(axes)
        order = cls._devices(devices, size)
        if shape is None:
            if len(axes) != 1:
                raise DistError(f"Mesh(axes={axes!r}) needs shape=(...) with one extent per axis")
            shape = (len(order),)
        if isinstance(shape, int) and not isinstance(shape, bool):
            shape = (shape,)
        if (not isinstance(shape, (tuple, list)) or len(shape) != len(axes)
                or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in shape)):
            raise DistError(f"Mesh(shape=...) must be {len(axes)} positive int(s), one per axis of "
                            f"{axes!r}, not {shape!r}"[:300])
        shape = tuple(shape)
        if math.prod(shape) != size:
            raise DistError(f"Mesh(shape={shape!r}) has {math.prod(shape)} positions but the job has "
                            f"{size} process{'es' if size != 1 else ''} (start it with mpiexec -n "
                            f"{math.prod(shape)})")
        if len(order) != size:
            raise DistError(f"Mesh(devices=...) lists {len(order)} ranks but the job has {size} processes")
        return axes, shape, order

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


def agree(comm: Any, what: str, fields: list[tuple[str, tuple[int, ...]]], show: dict[str, Any] | None = None,
          rejected: DistError | None = None) -> None:
    """Every process of `comm` contributes `fields` (name, up to 8 ints) that must agree across
    them: one Allgather of a fixed-size int64 table (the same size whatever the operation, so that
    processes calling different operations still meet in it). A disagreement raises DistError on
    every process, naming the field and which processes had which value (`show[name]` turns a
    value into text). `rejected`: this process refused its own arguments (it sends no fields, and
    `refuse` raises its error after this returns); every other process then raises an error naming
    the processes that refused theirs and why (one more Allgather, of the first one's message)."""
    if len(fields) > MAX_FIELDS or any(len(v) > 8 for _, v in fields):
        raise DistError(f"{what}: too many fields to check (tensors have at most 8 dimensions)")
    vec = np.zeros((MAX_FIELDS + 1, 9), np.int64)  # row 0: whether this process refused its arguments
    vec[0, 0] = rejected is not None
    for i, (_, v) in enumerate(fields if rejected is None else (), 1):
        vec[i, 0] = len(v)
        vec[i, 1:1 + len(v)] = [x & 0x7FFFFFFFFFFFFFFF for x in v]
    size = comm.Get_size()
    table = np.empty((size, *vec.shape), np.int64)
    comm.Allgather(vec, table)
    refused = [r for r in range(size) if table[r, 0, 0]]
    if refused:
        why = _first_reason(comm, rejected, refused[0])
        if rejected is not None:
            return
        raise DistError(f"{what}: process{'es' if len(refused) > 1 else ''} {', '.join(map(str, refused))} "
                        f"refused {'their' if len(refused) > 1 else 'its'} arguments ({why})")
    if (table == vec).all():  # the common case, tested at once: every process sent this table
        return
    show = show or {}
    for i, (name, _) in enumerate(fields, 1):
        seen: dict[tuple[int, ...], list[int]] = {}
        for r in range(size):
            n = int(table[r, i, 0])
            seen.setdefault(tuple(int(x) for x in table[r, i, 1:1 + n]), []).append(r)
        if len(seen) > 1:
            f = show.get(name)
            where = "; ".join(f"{f(v) if f else v[0] if len(v) == 1 else v} on process{'es' if len(rs) > 1 else ''} "
                              f"{', '.join(map(str, rs))}" for v, rs in seen.items())
            raise DistError(f"{what}: the processes disagree on {name}: {where}")


def refuse(comm: Any, what: str, error: DistError) -> NoReturn:
    """Raise `error`, this process's refusal of its own arguments to `what`, once the other
    processes of `comm` know: they meet it in `agree` (whatever operation they call) and raise too."""
    agree(comm, what, [], rejected=error)
    raise error


def _first_reason(comm: Any, rejected: DistError | None, first: int) -> str:
    """The message of process `first`'s refusal, as every process of `comm` receives it."""
    mine = np.zeros(REASON_BYTES, np.uint8)
    if rejected is not None:
        text = str(rejected).encode("utf-8", "replace")[:REASON_BYTES]
        mine[:len(text)] = np.frombuffer(text, np.uint8)
    every = np.empty((comm.Get_size(), REASON_BYTES), np.uint8)
    comm.Allgather(mine, every)
    return bytes(every[first]).rstrip(b"\0").decode("utf-8", "replace")


MAX_FIELDS = 8
REASON_BYTES = 512  # of a refusal's message, sent to the other processes
