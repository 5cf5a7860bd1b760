"""The MPI engine: the job's processes (mpi4py's COMM_WORLD; a process started without a launcher
is MPI's singleton, a job of one) and the host-array collectives of one mesh axis, each a single
MPI call on that axis's communicator. Every collective here takes C-contiguous NumPy arrays and
returns a `Pending` whose `wait()` gives the result array; nothing is pickled (buffer calls only).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import sys
import sysconfig
from collections.abc import Callable
from typing import Any

import numpy as np

from tessera.base.errors import DistError

_WORLD: Any = None


def mpi() -> Any:
    """The mpi4py.MPI module (imported on the first use of tessera.dist, never by `import tessera`)."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise DistError("tessera.dist needs mpi4py and an MPI library: pip install 'tessera-tsr[dist]' "
                        f"({e})") from None
    return MPI


def mpiexec() -> pathlib.Path | None:
    """The launcher of the MPI that mpi4py uses here: the mpich wheel's `mpiexec`, a script of this
    Python (next to the interpreter in a virtual environment, in its scripts folder, or in the
    user's after `pip install --user`); else the first on PATH; None where there is none."""
    folders: list[str] = [str(pathlib.Path(sys.executable).parent), sysconfig.get_path("scripts"),
                          sysconfig.get_path("scripts", f"{os.name}_user")]
    for folder in folders:
        p = pathlib.Path(folder) / "mpiexec"
        if p.is_file() and os.access(p, os.X_OK):
            return p
    found = shutil.which("mpiexec")
    return pathlib.Path(found) if found else None


def world() -> Any:
    """The job's communicator: every process the launcher started (one without a launcher)."""
    global _WORLD
    if _WORLD is None:
        _WORLD = mpi().COMM_WORLD
    return _WORLD


class Pending:
    """A collective under way: `wait()` completes it (once) and returns its result."""

    def __init__(self, request: Any, finish: Callable[[], Any]) -> None:
        self._request = request
        self._finish = finish
        self._result: Any = None
        self._done = False

    def wait(self) -> Any:
        if not self._done:
            if self._request is not None:
                self._request.Wait()
            self._result = self._finish()
            self._done = True
        return self._result

    def test(self) -> bool:
        """Whether the collective has completed (without waiting)."""
        return self._done or self._request is None or bool(self._request.Test())


def _moved(a: np.ndarray, dim: int) -> np.ndarray:
    """`a` with dimension `dim` first, C-contiguous (the blocks of a split are then contiguous)."""
    return np.ascontiguousarray(np.moveaxis(a, dim, 0)) if dim else np.ascontiguousarray(a)


def _restored(flat: np.ndarray, first: int, rest: tuple[int, ...], dim: int) -> np.ndarray:
    out = flat.reshape((first, *rest))
    return np.ascontiguousarray(np.moveaxis(out, 0, dim)) if dim else out


class MpiEngine:
    """Collectives over one mesh axis's MPI communicator (its rank = the coordinate on the axis)."""

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        self.size = comm.Get_size()
        self.rank = comm.Get_rank()

    def _op(self, op: str) -> Any:
        MPI = mpi()
        return {"sum": MPI.SUM, "avg": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}[op]

    @staticmethod
    def _reducible(a: np.ndarray, what: str) -> tuple[np.ndarray, np.dtype | None]:
        """(array to reduce, dtype to convert the result back to): half precision is reduced in f32
        (MPI has no portable 16-bit float type), bool is refused."""
        if a.dtype == np.bool_:
            raise DistError(f"{what}: a bool tensor cannot be reduced (use u8)")
        if a.dtype.itemsize == 2 and a.dtype.kind not in "iu":  # float16, ml_dtypes' bfloat16
            return a.astype(np.float32), a.dtype
        return a, None

    def _call(self, async_op: bool, blocking: str, *args: Any) -> Any:
        method = getattr(self.comm, ("I" + blocking[0].lower() + blocking[1:]) if async_op else blocking)
        return method(*args)

    def all_reduce(self, a: np.ndarray, op: str, async_op: bool, what: str) -> Pending:
        send, back = self._reducible(np.ascontiguousarray(a), what)
        recv = np.empty_like(send)
        req = self._call(async_op, "Allreduce", send, recv, self._op(op))

        def finish() -> np.ndarray:
            out = recv
            if op == "avg":
                out = out / self.size if out.dtype.kind == "f" else out // self.size
            return out.astype(back) if back is not None else out.astype(a.dtype, copy=False)

        return Pending(req if async_op else None, finish)

    def all_gather(self, a: np.ndarray, dim: int, sizes: list[int], async_op: bool) -> Pending:
        send = _moved(a, dim)
        rest = send.shape[1:]
        row = int(np.prod(rest, dtype=np.int64)) * a.dtype.itemsize
        counts = [s * row for s in sizes]
        displs = [sum(counts[:i]) for i in range(len(counts))]
        recv = np.empty(sum(counts), np.uint8)
        MPI = mpi()
        if len(set(counts)) == 1:  # MPICH's Allgatherv is far slower than Allgather on large buffers
            req = self._call(async_op, "Allgather", [send.view(np.uint8).reshape(-1), MPI.BYTE], [recv, MPI.BYTE])
        else:
            req = self._call(async_op, "Allgatherv", [send.view(np.uint8).reshape(-1), MPI.BYTE],
                             [recv, (counts, displs), MPI.BYTE])
        return Pending(req if async_op else None,
                       lambda: _restored(recv.view(a.dtype), sum(sizes), rest, dim))

    def reduce_scatter(self, a: np.ndarray, dim: int, sizes: list[int], op: str, async_op: bool,
                       what: str) -> Pending:
        send, back = self._reducible(_moved(a, dim), what)
        rest = send.shape[1:]
        row = int(np.prod(rest, dtype=np.int64))
        recv = np.empty(sizes[self.rank] * row, send.dtype)
        req = self._call(async_op, "Reduce_scatter", send, recv, [s * row for s in sizes], self._op(op))

        def finish() -> np.ndarray:
            out = recv
            if op == "avg":
                out = out / self.size if out.dtype.kind == "f" else out // self.size
            out = out.astype(back) if back is not None else out.astype(a.dtype, copy=False)
            return _restored(out, sizes[self.rank], rest, dim)

        return Pending(req if async_op else None, finish)

    def broadcast(self, a: np.ndarray, root: int, async_op: bool, shape: tuple[int, ...]) -> Pending:
        """The root's `a` (of `shape`; another process's own may differ, as uneven blocks do) to every process."""
        buf = np.array(a, copy=True, order="C") if self.rank == root else np.empty(shape, a.dtype)
        req = self._call(async_op, "Bcast", [buf.view(np.uint8).reshape(-1), mpi().BYTE], root)
        return Pending(req if async_op else None, lambda: buf)

    def all_to_all(self, a: np.ndarray, split_dim: int, split_sizes: list[int], concat_dim: int,
                   concat_sizes: list[int], async_op: bool) -> Pending:
        """Block j of `a` along `split_dim` goes to process j; the blocks received are joined
        along `concat_dim` in process order."""
        bounds = np.cumsum([0, *split_sizes])
        parts = [np.ascontiguousarray(np.take(a, np.arange(bounds[j], bounds[j + 1]), axis=split_dim))
                 for j in range(self.size)]
        send = np.concatenate([p.view(np.uint8).reshape(-1) for p in parts]) if parts else np.empty(0, np.uint8)
        scounts = [p.nbytes for p in parts]
        shapes = []
        for j in range(self.size):
            s = list(a.shape)
            s[split_dim] = split_sizes[self.rank]
            s[concat_dim] = concat_sizes[j]
            shapes.append(tuple(s))
        rcounts = [int(np.prod(s, dtype=np.int64)) * a.dtype.itemsize for s in shapes]
        recv = np.empty(sum(rcounts), np.uint8)
        MPI = mpi()
        req = self._call(async_op, "Alltoallv", [send, (scounts, _displs(scounts)), MPI.BYTE],
                         [recv, (rcounts, _displs(rcounts)), MPI.BYTE])

        def finish() -> np.ndarray:
            offs = _displs(rcounts)
            blocks = [recv[offs[j]:offs[j] + rcounts[j]].view(a.dtype).reshape(shapes[j]) for j in range(self.size)]
            return np.ascontiguousarray(np.concatenate(blocks, axis=concat_dim))

        return Pending(req if async_op else None, finish)


def _displs(counts: list[int]) -> list[int]:
    out, acc = [], 0
    for c in counts:
        out.append(acc)
        acc += c
    return out
