"""Unified memory (spec section 17): allocations that the host and the kernels share, made by
`tessera.managed_empty` on either backend, and what may be asked of them.

An allocation is a NumPy array that owns its memory: CUDA managed memory on the CUDA backend
(runtime/cuda/managed.py), ordinary host memory on the CPU backend, where the host is the device.
Each is recorded here, by its address range and backend, for as long as its memory lives, so that
a launch on CUDA uses a NumPy array inside one in place (`is_managed`), and `prefetch` and
`advise` refuse an array that is not inside one. On the CPU backend both do nothing else.
"""

from __future__ import annotations

import bisect
import contextlib
import weakref
from typing import Any

import numpy as np

from tessera.base.errors import TesseraError
from tessera.base.forksafe import ForkSafeLock

PLACES = ("gpu", "cpu")
HINTS = ("device", "host", "read_mostly")

# Sorted starts, and start -> (end, backend); replaced, never changed in place, under the lock, so
# that a reader sees one consistent pair without taking it.
_STARTS: tuple[int, ...] = ()
_RANGES: dict[int, tuple[int, str]] = {}
_LOCK = ForkSafeLock()


class _Owner:
    """Kept by the array's buffer: when the last view goes, its finalizer frees the memory."""

    __slots__ = ("__weakref__",)


def record(buffer: Any, start: int, nbytes: int, backend: str, free: Any = None) -> None:
    """Record an allocation of `nbytes` at `start` on `backend`, for as long as `buffer` lives
    (it must accept attributes: a ctypes array); `free(start)` then gives the memory back."""
    global _STARTS, _RANGES
    owner = _Owner()
    buffer._tessera_owner = owner
    with _LOCK:
        _RANGES = {**_RANGES, start: (start + max(nbytes, 1), backend)}
        _STARTS = tuple(sorted(_RANGES))
    weakref.finalize(owner, _forget, start, free)


def _forget(start: int, free: Any) -> None:
    global _STARTS, _RANGES
    with _LOCK:
        ranges = dict(_RANGES)
        ranges.pop(start, None)
        _RANGES, _STARTS = ranges, tuple(sorted(ranges))
    if free is not None:
        with contextlib.suppress(Exception):  # a finalizer may not raise (at exit, the driver may be gone)
            free(start)


def extent(array: np.ndarray) -> tuple[int, int]:
    """[first, last + 1) byte of an array's elements (any strides)."""
    start = int(array.__array_interface__["data"][0])
    if array.size == 0:
        return start, start
    low = sum(s * (d - 1) for s, d in zip(array.strides, array.shape) if s < 0)
    high = sum(s * (d - 1) for s, d in zip(array.strides, array.shape) if s > 0)
    return start + low, start + high + array.itemsize


def find(array: Any) -> str | None:
    """The backend of the allocation holding all of `array`'s elements, or None."""
    starts, ranges = _STARTS, _RANGES
    if not starts or not isinstance(array, np.ndarray):
        return None
    first, end = extent(array)
    i = bisect.bisect_right(starts, first) - 1
    if i < 0:
        return None
    stop, backend = ranges[starts[i]]
    return backend if end <= stop and first < stop else None


def is_managed(array: np.ndarray) -> bool:
    """Whether a NumPy array lies inside an allocation of this module (0.1 us when there are none)."""
    return bool(_STARTS) and find(array) is not None


def host_buffer(nbytes: int) -> np.ndarray:
    """The CPU backend's allocation: `nbytes` of ordinary host memory, 64-byte aligned, as a uint8
    array that owns it."""
    import ctypes

    raw = (ctypes.c_char * (nbytes + 64))()
    start = (ctypes.addressof(raw) + 63) // 64 * 64
    record(raw, start, nbytes, "cpu")
    return np.frombuffer(memoryview(raw).cast("B"), np.uint8, nbytes, start - ctypes.addressof(raw))


def checked_array(array: Any, what: str) -> tuple[str, int, int]:
    """(backend, start, byte count) of an array inside an allocation; TesseraError naming `what`."""
    if not isinstance(array, np.ndarray):
        raise TesseraError(f"{what}: expected a NumPy array from tessera.managed_empty or managed_zeros, "
                           f"not {type(array).__name__}")
    backend = find(array)
    if backend is None:
        raise TesseraError(f"{what}: the array is not in memory allocated by tessera.managed_empty or "
                           "managed_zeros (only managed memory can be prefetched or advised)")
    first, end = extent(array)
    return backend, first, end - first


def checked_choice(value: Any, choices: tuple[str, ...], what: str) -> str:
    if not isinstance(value, str) or value not in choices:
        raise TesseraError(f"{what} must be one of {', '.join(repr(c) for c in choices)}, not {value!r}"[:300])
    return value


__all__ = ["HINTS", "PLACES", "checked_array", "checked_choice", "extent", "find", "host_buffer", "is_managed",
           "record"]
