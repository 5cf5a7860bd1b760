"""Device memory for distributed tensors on the CUDA backend: `DeviceBuffer` (an owned allocation
with `__cuda_array_interface__`, so a kernel launch uses it in place), the choice of one device per
process (by its rank among the processes on its node), and the stream, event and 2-D copy
operations the NCCL engine orders its work with."""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.base.errors import DistError

_BOUND = False


def bind_device() -> None:
    """Give this process its own device: its rank among the job's processes on this node, modulo
    the node's device count (once; before the first allocation)."""
    global _BOUND
    if _BOUND:
        return
    from tessera.dist.engines import mpi, world
    from tessera.runtime.cuda import driver as cuda

    local = world().Split_type(mpi().COMM_TYPE_SHARED)
    drv = cuda._driver()
    cuda._check(drv.cuInit(0), "cuInit")
    count = cuda._check(drv.cuDeviceGetCount(), "cuDeviceGetCount")
    cuda.use_ordinal(local.Get_rank() % max(1, int(count)))
    local.Free()
    _BOUND = True


class DeviceBuffer:
    """A C-contiguous array in device memory, owned (freed when the last reference goes)."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype) -> None:
        from tessera.runtime.cuda import driver as cuda

        bind_device()
        cuda.device()
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self._drv = cuda._driver()
        self.ptr = int(cuda._check(self._drv.cuMemAlloc(max(1, self.nbytes)), "cuMemAlloc"))

    @classmethod
    def zeros(cls, shape: tuple[int, ...], dtype: np.dtype) -> DeviceBuffer:
        from tessera.runtime.cuda.driver import _check

        buf = cls(shape, dtype)
        if buf.nbytes:
            _check(buf._drv.cuMemsetD8(buf.ptr, 0, buf.nbytes), "cuMemsetD8")
        return buf

    @classmethod
    def from_host(cls, array: np.ndarray) -> DeviceBuffer:
        from tessera.runtime.cuda.driver import _check

        host = np.ascontiguousarray(array)
        buf = cls(host.shape, host.dtype)
        if buf.nbytes:
            _check(buf._drv.cuMemcpyHtoD(buf.ptr, host.ctypes.data, buf.nbytes), "cuMemcpyHtoD")
        return buf

    def to_host(self) -> np.ndarray:
        """A NumPy copy, after all work queued on the device so far (collectives included)."""
        from tessera.runtime.cuda.driver import _check

        out = np.empty(self.shape, self.dtype)
        _check(self._drv.cuCtxSynchronize(), "cuCtxSynchronize")
        if self.nbytes:
            _check(self._drv.cuMemcpyDtoH(out.ctypes.data, self.ptr, self.nbytes), "cuMemcpyDtoH")
        return out

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "version": 3,
                "strides": None}

    def __repr__(self) -> str:
        return f"<DeviceBuffer {self.shape} {self.dtype} at 0x{self.ptr:x}>"

    def __del__(self) -> None:
        ptr = getattr(self, "ptr", 0)
        if ptr:
            self._drv.cuMemFree(ptr)
            self.ptr = 0


class CudaOps:
    """What the NCCL engine needs from the driver: a stream of its own, events, 2-D copies."""

    def __init__(self) -> None:
        from tessera.runtime.cuda import driver as cuda

        self._cuda = cuda
        self._drv = cuda._driver()
        cuda.device()
        self.stream = cuda._check(self._drv.cuStreamCreate(self._drv.CUstream_flags.CU_STREAM_NON_BLOCKING),
                                  "cuStreamCreate")

    def handle(self) -> int:
        return int(self.stream)

    def alloc(self, shape: tuple[int, ...], dtype: np.dtype) -> DeviceBuffer:
        return DeviceBuffer(shape, dtype)

    def after_default(self) -> None:
        """The collective stream waits for the work queued so far on the default stream (the kernels
        that produced its inputs)."""
        self._order(0, self.stream)

    def before_default(self) -> None:
        """Work queued on the default stream from now on waits for the collective stream."""
        self._order(self.stream, 0)

    def _order(self, first: Any, then: Any) -> None:
        drv, check = self._drv, self._cuda._check
        ev = check(drv.cuEventCreate(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING), "cuEventCreate")
        check(drv.cuEventRecord(ev, first), "cuEventRecord")
        check(drv.cuStreamWaitEvent(then, ev, 0), "cuStreamWaitEvent")
        check(drv.cuEventDestroy(ev), "cuEventDestroy")  # released once the wait is done

    def copy2d(self, dst: int, dst_pitch: int, src: int, src_pitch: int, width: int, rows: int) -> None:
        """`rows` rows of `width` bytes, on the collective stream."""
        if not width or not rows:
            return
        drv = self._drv
        p = drv.CUDA_MEMCPY2D()
        p.srcMemoryType = p.dstMemoryType = drv.CUmemorytype.CU_MEMORYTYPE_DEVICE
        p.srcDevice, p.srcPitch, p.dstDevice, p.dstPitch = src, src_pitch, dst, dst_pitch
        p.WidthInBytes, p.Height = width, rows
        self._cuda._check(drv.cuMemcpy2DAsync(p, self.stream), "cuMemcpy2DAsync")


def address(buf: Any) -> int:
    """The device address of a DeviceBuffer (or any array with __cuda_array_interface__)."""
    if isinstance(buf, DeviceBuffer):
        return buf.ptr
    iface = getattr(buf, "__cuda_array_interface__", None)
    if iface is None:
        raise DistError(f"expected a device array, not {type(buf).__name__}")
    return int(iface["data"][0])

