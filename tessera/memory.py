"""Unified memory in the Python API (spec section 17): `managed_empty`, `managed_zeros`,
`prefetch` and `advise`, exported lazily by tessera/__init__.py.

An allocation is a NumPy array in memory that the host and the kernels share: CUDA managed memory
on the CUDA backend (a launch uses it in place, without copies), ordinary host memory on the CPU
backend, where `prefetch` and `advise` check their arguments and do nothing else. The backend is
chosen as `tessera.load` chooses it (`backend="auto"`, `TESSERA_BACKEND`); the runtime keeps the
record of each allocation (runtime/managed.py) and the backends do the work (runtime/backends.py).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tessera.base.errors import TesseraError
from tessera.runtime import managed
from tessera.runtime.backends import backend as find_backend


def _shape(shape: Any, fn: str) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool) else shape
    if not isinstance(dims, (tuple, list)) or not all(
            isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in dims):
        raise TesseraError(f"{fn}(): shape must be a non-negative int or a tuple of them, not {shape!r}"[:300])
    return tuple(int(d) for d in dims)


def _dtype(dtype: Any, fn: str) -> np.dtype:
    from tessera.base.dtypes import SCALARS
    from tessera.runtime.launch_args import numpy_dtypes, tsr_type_of

    if isinstance(dtype, str) and dtype in SCALARS:
        return numpy_dtypes(dtype)[0]  # bf16: ml_dtypes' bfloat16 where installed, else uint16 bits
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or tsr_type_of(dt) is None:
        raise TesseraError(f"{fn}(): dtype must be a .tsr element type ({', '.join(SCALARS)}) or a NumPy dtype of one, "
                           f"not {dtype!r}"[:300])
    return dt


def managed_empty(shape: Any, dtype: Any, *, backend: str = "auto") -> np.ndarray:
    """An uninitialized array in unified memory (see the module docstring); `dtype` is a NumPy
    dtype or a .tsr type name ("f32", "bf16", ...)."""
    from tessera.api import select_backend

    dims, dt = _shape(shape, "managed_empty"), _dtype(dtype, "managed_empty")
    nbytes = math.prod(dims) * dt.itemsize
    name, _ = select_backend(backend)
    return find_backend(name).managed_buffer(nbytes).view(dt).reshape(dims)


def managed_zeros(shape: Any, dtype: Any, *, backend: str = "auto") -> np.ndarray:
    """`managed_empty`, filled with zeros (written by the host)."""
    out = managed_empty(shape, dtype, backend=backend)
    out.view(np.uint8).fill(0)
    return out


def prefetch(array: Any, device: str = "gpu", stream: Any = None) -> None:
    """Migrate a managed array's pages to the GPU (`device="gpu"`) or the host (`"cpu"`),
    asynchronously on `stream` (as a launch's `stream=`; default: the default stream). A launch on
    that stream runs after it."""
    where = managed.checked_choice(device, managed.PLACES, "prefetch(): device")
    owner, start, nbytes = managed.checked_array(array, "prefetch(): array")
    if nbytes:
        find_backend(owner).prefetch_memory(start, nbytes, where == "gpu", stream)


def advise(array: Any, hint: str) -> None:
    """Advise the driver where a managed array should live: "device" or "host" (its preferred
    location), or "read_mostly" (read-only copies for each processor that reads it)."""
    chosen = managed.checked_choice(hint, managed.HINTS, "advise(): hint")
    owner, start, nbytes = managed.checked_array(array, "advise(): array")
    if nbytes:
        find_backend(owner).advise_memory(start, nbytes, chosen)


__all__ = ["advise", "managed_empty", "managed_zeros", "prefetch"]
