"""CUDA managed memory (spec section 17): `cuMemAllocManaged` seen by NumPy as an ndarray, and the
driver's prefetch and advice calls on it.

CUDA 13 changed two signatures: `cuMemPrefetchAsync(ptr, count, location, flags, stream)` and
`cuMemAdvise(ptr, count, advice, location)` take a `CUmemLocation` where CUDA 12 took a device
(`CU_DEVICE_CPU` for the host). cuda-bindings mirrors the toolkit it was built for, so the form is
chosen by what the installed bindings' function accepts (its parameter names), once per function.
"""

from __future__ import annotations

import ctypes
import functools
import inspect
from typing import Any

import numpy as np

from tessera.runtime import managed
from tessera.runtime.cuda.driver import _check, _driver, device


def managed_buffer(nbytes: int) -> np.ndarray:
    """`nbytes` of managed memory (attached globally: any stream may use it) as a uint8 array that
    owns it; freed when the last view of it goes."""
    drv = _driver()
    device()
    ptr = int(_check(drv.cuMemAllocManaged(max(nbytes, 1), drv.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL.value),
                     "cuMemAllocManaged"))
    raw = (ctypes.c_char * max(nbytes, 1)).from_address(ptr)
    managed.record(raw, ptr, nbytes, "cuda", drv.cuMemFree)  # freed by the driver that allocated it
    return np.frombuffer(memoryview(raw).cast("B"), np.uint8, nbytes)


@functools.cache
def takes_location(fn: Any) -> bool:
    """Whether a driver function takes a `CUmemLocation` (CUDA 13), not a device (CUDA 12)."""
    try:
        return "location" in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # no signature to read: the bindings' major version decides
        import cuda.bindings

        return int(str(cuda.bindings.__version__).split(".")[0]) >= 13


def _location(to_gpu: bool) -> Any:
    drv = _driver()
    loc = drv.CUmemLocation()
    if to_gpu:
        loc.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        loc.id = device().ordinal
    else:
        loc.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_HOST
        loc.id = 0
    return loc


def _device(to_gpu: bool) -> Any:
    return device().handle if to_gpu else _driver().CUdevice(_driver().CU_DEVICE_CPU)


def prefetch(ptr: int, nbytes: int, to_gpu: bool, stream: int) -> None:
    """Migrate the pages of [ptr, ptr + nbytes) to the device or the host, queued on `stream`."""
    drv = _driver()
    fn = drv.cuMemPrefetchAsync
    if takes_location(fn):
        _check(fn(ptr, nbytes, _location(to_gpu), 0, stream), "cuMemPrefetchAsync")
    else:
        _check(fn(ptr, nbytes, _device(to_gpu), stream), "cuMemPrefetchAsync")


def advise(ptr: int, nbytes: int, hint: str) -> None:
    """"device"/"host": the preferred location of the pages; "read_mostly": read-mostly (each
    processor that reads them gets a copy)."""
    drv = _driver()
    advice = drv.CUmem_advise
    if hint == "read_mostly":
        what, to_gpu = advice.CU_MEM_ADVISE_SET_READ_MOSTLY, True  # the location is not used
    else:
        what, to_gpu = advice.CU_MEM_ADVISE_SET_PREFERRED_LOCATION, hint == "device"
    fn = drv.cuMemAdvise
    where = _location(to_gpu) if takes_location(fn) else _device(to_gpu)
    _check(fn(ptr, nbytes, what, where), f"cuMemAdvise({what.name})")
