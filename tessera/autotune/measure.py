"""Timing one candidate: on the GPU with CUDA events, or on the CPU backend with the wall clock.

Each timing runs on copies of the `mut` arguments, so that nothing a kernel accumulates or
applies atomically happens twice to the caller's arrays: NumPy arrays are copied on the host
(on the CUDA backend a timed launch uploads them to fresh allocations and never copies back),
device arrays (`__cuda_array_interface__`, `__dlpack__`) into fresh device allocations, on the
stream a launch with them runs on (runtime/cuda/streams.py), where the timed launches run too. A
candidate whose launch fails is infinitely slow: the tuner goes on with the others.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tessera.base.errors import TesseraError


class _DeviceCopy:
    """A fresh device allocation holding a copy of a device array (made on `stream`, the stream the
    timed launches use, after the work queued there), freed with the object."""

    def __init__(self, source: Any, stream: int) -> None:
        from tessera.runtime.cuda.driver import _check, _driver
        from tessera.runtime.device_arrays import describe

        d = describe(source)
        nbytes = max(1, d.size * d.dtype.itemsize)
        drv = _driver()
        self._ptr = int(_check(drv.cuMemAlloc(nbytes), "cuMemAlloc"))
        _check(drv.cuMemcpyDtoDAsync(self._ptr, d.ptr, nbytes, stream), "cuMemcpyDtoDAsync")
        self.__cuda_array_interface__ = {"shape": d.shape, "typestr": d.dtype.str, "data": (self._ptr, False),
                                         "version": 3, "strides": None}

    def __del__(self) -> None:
        from tessera.runtime.cuda.driver import _driver

        _driver().cuMemFree(self._ptr)


def _copies(info: Any, bound: Any, on_device: bool, stream: int) -> None:
    for p in info.params:
        if not p.mut or p.name not in bound.arrays:
            continue
        a = bound.arrays[p.name]
        if isinstance(a, np.ndarray):
            if not on_device:  # the CUDA backend's timed launches upload to fresh allocations
                bound.arrays[p.name] = np.array(a, copy=True, order="C")
        else:
            bound.arrays[p.name] = _DeviceCopy(a, stream)


def measure(kernel: Any, consts: dict[str, Any], args: tuple, kwargs: dict[str, Any], grid: Any,
            repeat: int) -> float:
    """Median milliseconds of a launch of `kernel` (a tessera.api.Kernel) with `consts`, on
    copies of its mut arguments; `math.inf` when it fails."""
    cuda = kernel.module.backend == "cuda"
    try:
        lib, info, bound = kernel.prepare(args, {**kwargs, **consts}, grid=grid, tuned=False)
        stream = None
        if cuda:  # the stream a launch with the caller's arrays runs on, before they are replaced by copies
            from tessera.runtime.cuda.streams import current_stream

            stream = current_stream(bound.arrays.values())
        _copies(info, bound, cuda, stream or 0)
        # One warm-up launch: on the CPU, the first touch of the arrays and the library's arenas.
        return float(lib.benchmark(info, bound, repeat=repeat, warmup=1, stream=stream))
    except (TesseraError, OSError, MemoryError, ValueError, RuntimeError):
        return math.inf
