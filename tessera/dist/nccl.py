"""The NCCL engine: device-array collectives over one mesh axis, through NVIDIA's nccl4py bindings
(`nccl.bindings.nccl`, which load the nvidia-nccl-cu12 library).

One communicator per mesh axis, bootstrapped once: the axis's first process draws the NCCL unique
id and broadcasts its 128 bytes over the axis's MPI communicator; every process then joins with
`comm_init_rank`. Collectives run on the engine's own stream, after the work queued so far on the
default stream (the kernels that produced the inputs), and the default stream waits for them when
the result is taken (`wait()`), so independent compute overlaps the communication. Blocks of an
uneven split (numpy.array_split) are moved with grouped broadcasts, reduces or send/recv; a split of
a dimension other than the first is packed with 2-D copies first.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from tessera.base.errors import DistError
from tessera.dist.engines import MpiEngine, Pending

UID_BYTES = 128
_TYPES = {"int8": "Int8", "uint8": "Uint8", "int32": "Int32", "uint32": "Uint32", "int64": "Int64",
          "uint64": "Uint64", "float16": "Float16", "float32": "Float32", "float64": "Float64", "bfloat16": "Bfloat16"}
_OPS = {"sum": "Sum", "prod": "Prod", "max": "Max", "min": "Min", "avg": "Avg"}


def bindings() -> Any:
    try:
        from nccl.bindings import nccl
    except ImportError as e:
        raise DistError(f"device collectives need NCCL: pip install 'tessera-tsr[dist]' ({e})") from None
    return nccl


def _view(shape: tuple[int, ...], dim: int) -> tuple[int, int, int]:
    """A C-contiguous shape seen as (A, N, C) around dimension `dim`."""
    return int(np.prod(shape[:dim], dtype=np.int64)), shape[dim], int(np.prod(shape[dim + 1:], dtype=np.int64))


class NcclEngine:
    """Collectives over one mesh axis's NCCL communicator (rank = coordinate on the axis)."""

    def __init__(self, lib: Any, comm: Any, size: int, rank: int, ops: Any) -> None:
        self.lib, self.comm, self.size, self.rank = lib, comm, size, rank
        self._ops = ops

    @classmethod
    def bootstrap(cls, mpi: MpiEngine, lib: Any = None, ops: Any = None) -> NcclEngine:
        """Join the axis's NCCL communicator: the unique id goes from coordinate 0 to the others
        over MPI. `lib` and `ops` replace the NCCL bindings and the device operations (tests)."""
        lib = lib if lib is not None else bindings()
        buf = np.zeros(UID_BYTES, np.uint8)
        if mpi.rank == 0:
            uid = lib.get_unique_id()
            buf[:] = np.frombuffer(ctypes.string_at(uid.ptr, UID_BYTES), np.uint8)
        mpi.comm.Bcast(buf, 0)
        uid = lib.UniqueId.from_buffer(bytearray(buf.tobytes()))
        comm = lib.comm_init_rank(mpi.size, uid, mpi.rank)
        if ops is None:
            from tessera.dist.device import CudaOps

            ops = CudaOps()
        return cls(lib, comm, mpi.size, mpi.rank, ops)

    def _type(self, dtype: np.dtype, reduce: bool, what: str) -> int:
        name = _TYPES.get(np.dtype(dtype).name)
        if name is None:
            raise DistError(f"{what}: NCCL cannot {'reduce' if reduce else 'move'} {np.dtype(dtype)} arrays"
                            + (" (use u8)" if dtype == np.bool_ else ""))
        return int(getattr(self.lib.DataType, name))

    def _op(self, op: str) -> int:
        return int(getattr(self.lib.RedOp, _OPS[op]))

    def _started(self, result: Any, keep: list[Any]) -> Pending:
        """The work is queued on the engine's stream; `wait()` orders the default stream after it."""
        def finish() -> Any:
            self._ops.before_default()
            keep.clear()  # inputs and staging buffers stay alive until the collective is ordered
            return result

        return Pending(None, finish)

    def all_reduce(self, a: Any, op: str, async_op: bool, what: str) -> Pending:
        from tessera.dist.device import address

        dt = self._type(a.dtype, True, what)
        out = self._ops.alloc(a.shape, a.dtype)
        self._ops.after_default()
        n = int(np.prod(a.shape, dtype=np.int64))
        self.lib.all_reduce(address(a), out.ptr, n, dt, self._op(op), self.comm, self._ops.handle())
        return self._started(out, [a])

    def broadcast(self, a: Any, root: int, async_op: bool, shape: tuple[int, ...]) -> Pending:
        """The root's `a` (of `shape`) to every process; NCCL reads the send buffer on the root only."""
        from tessera.dist.device import address

        out = self._ops.alloc(shape, a.dtype)
        self._ops.after_default()
        self.lib.broadcast(address(a), out.ptr, out.nbytes, self._bytes(), root,
                           self.comm, self._ops.handle())
        return self._started(out, [a])

    def _bytes(self) -> int:
        return int(self.lib.DataType.Uint8)

    def _pack(self, src: int, shape: tuple[int, ...], dim: int, sizes: list[int], item: int, dst: int) -> list[int]:
        """Copy the blocks of `src` along `dim` to `dst`, each contiguous, in block order; their
        byte offsets there. Nothing to copy when `dim` is outermost (A == 1) and dst is src."""
        a, n, c = _view(shape, dim)
        offs, start, at = [], 0, 0
        for s in sizes:
            offs.append(at)
            if dst != src or a != 1:
                self._ops.copy2d(dst + at, s * c * item, src + start * c * item, n * c * item, s * c * item, a)
            start += s
            at += a * s * c * item
        return offs

    def _unpack(self, src: int, offs: list[int], shape: tuple[int, ...], dim: int, sizes: list[int], item: int,
                dst: int) -> None:
        a, n, c = _view(shape, dim)
        start = 0
        for s, off in zip(sizes, offs):
            if dst != src or a != 1:
                self._ops.copy2d(dst + start * c * item, n * c * item, src + off, s * c * item, s * c * item, a)
            start += s

    def all_gather(self, a: Any, dim: int, sizes: list[int], async_op: bool) -> Pending:
        from tessera.dist.device import address

        item = np.dtype(a.dtype).itemsize
        shape = list(a.shape)
        shape[dim] = sum(sizes)
        out = self._ops.alloc(tuple(shape), a.dtype)
        outer = _view(tuple(shape), dim)[0] == 1
        stage = out if outer else self._ops.alloc(tuple(shape), a.dtype)
        self._ops.after_default()
        a_, _, c = _view(tuple(shape), dim)
        counts = [a_ * s * c * item for s in sizes]
        offs = [sum(counts[:j]) for j in range(self.size)]
        stream = self._ops.handle()
        if len(set(sizes)) == 1:
            self.lib.all_gather(address(a), stage.ptr, counts[0], self._bytes(), self.comm, stream)
        else:  # all_gatherv: each process broadcasts its block
            self.lib.group_start()
            for j in range(self.size):
                self.lib.broadcast(address(a), stage.ptr + offs[j], counts[j], self._bytes(), j, self.comm, stream)
            self.lib.group_end()
        if not outer:
            self._unpack(stage.ptr, offs, tuple(shape), dim, sizes, item, out.ptr)
        return self._started(out, [a, stage])

    def reduce_scatter(self, a: Any, dim: int, sizes: list[int], op: str, async_op: bool, what: str) -> Pending:
        from tessera.dist.device import address

        dt = self._type(a.dtype, True, what)
        item = np.dtype(a.dtype).itemsize
        shape = tuple(a.shape)
        mine = list(shape)
        mine[dim] = sizes[self.rank]
        out = self._ops.alloc(tuple(mine), a.dtype)
        outer = _view(shape, dim)[0] == 1
        stage = a if outer else self._ops.alloc(shape, a.dtype)
        self._ops.after_default()
        src = address(a)
        offs = self._pack(src, shape, dim, sizes, item, address(stage))
        a_, _, c = _view(shape, dim)
        counts = [a_ * s * c for s in sizes]  # elements
        stream = self._ops.handle()
        if len(set(sizes)) == 1:
            self.lib.reduce_scatter(address(stage), out.ptr, counts[0], dt, self._op(op), self.comm, stream)
        else:  # reduce_scatterv: a reduce to each block's owner
            self.lib.group_start()
            for j in range(self.size):
                self.lib.reduce(address(stage) + offs[j], out.ptr if j == self.rank else address(stage) + offs[j],
                                counts[j], dt, self._op(op), j, self.comm, stream)
            self.lib.group_end()
        return self._started(out, [a, stage])

    def all_to_all(self, a: Any, split_dim: int, split_sizes: list[int], concat_dim: int, concat_sizes: list[int],
                   async_op: bool) -> Pending:
        from tessera.dist.device import address

        item = np.dtype(a.dtype).itemsize
        shape = tuple(a.shape)
        send = self._ops.alloc(shape, a.dtype)
        result = list(shape)
        result[split_dim] = split_sizes[self.rank]
        result[concat_dim] = sum(concat_sizes)
        out = self._ops.alloc(tuple(result), a.dtype)
        recv = self._ops.alloc(tuple(result), a.dtype)
        self._ops.after_default()
        soffs = self._pack(address(a), shape, split_dim, split_sizes, item, send.ptr)
        scounts = [int(np.prod(shape, dtype=np.int64)) // max(1, shape[split_dim]) * s * item for s in split_sizes]
        piece = list(result)
        rcounts = []
        for s in concat_sizes:
            piece[concat_dim] = s
            rcounts.append(int(np.prod(piece, dtype=np.int64)) * item)
        roffs = [sum(rcounts[:j]) for j in range(self.size)]
        stream = self._ops.handle()
        self.lib.group_start()
        for j in range(self.size):
            self.lib.send(send.ptr + soffs[j], scounts[j], self._bytes(), j, self.comm, stream)
            self.lib.recv(recv.ptr + roffs[j], rcounts[j], self._bytes(), j, self.comm, stream)
        self.lib.group_end()
        self._unpack(recv.ptr, roffs, tuple(result), concat_dim, concat_sizes, item, out.ptr)
        return self._started(out, [a, send, recv])
