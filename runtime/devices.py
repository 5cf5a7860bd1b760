"""Is there a CUDA driver and device? Answered cheaply (no cuda-python import) with a reason."""

from __future__ import annotations

import ctypes
import functools
import sys


@functools.lru_cache(maxsize=1)
def cuda_status() -> tuple[bool, str]:
    """(available, reason); the reason says why not, or which device was found."""
    names = ("nvcuda.dll",) if sys.platform == "win32" else ("libcuda.so.1", "libcuda.so")
    lib = None
    for name in names:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        return False, "no NVIDIA driver (libcuda not found)"
    if lib.cuInit(0) != 0:
        return False, "the NVIDIA driver did not initialize (cuInit failed)"
    count = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return False, "no CUDA device found"
    return True, f"{count.value} CUDA device(s) found"
