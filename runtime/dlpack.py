"""Reading a DLPack export (`obj.__dlpack__()`) without consuming it: where the data is (host or
CUDA memory), its address, shape, strides, element type (bf16 included, which NumPy's own
`np.from_dlpack` refuses) and whether the producer marked it read-only.

A versioned capsule (DLPack 1.x, "dltensor_versioned") is asked for first, since only it can say
read-only; a producer that does not know `max_version` gives the legacy capsule ("dltensor"). The
capsule is never renamed (consumed): whoever keeps it keeps the producer's memory alive, and its
destructor gives the memory back (`Export.capsule`).
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
HOST_DEVICES = (KDL_CPU, KDL_CUDA_HOST)   # memory the host reads and writes directly
CUDA_DEVICES = (KDL_CUDA, KDL_CUDA_MANAGED)
_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY
_BFLOAT = 4     # kDLBfloat


class DLPackError(ValueError):
    """A DLPack export that cannot be used; the message says why (the caller names the parameter)."""


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


@functools.cache
def bf16_dtype() -> np.dtype:
    """The NumPy dtype of bf16 data: ml_dtypes' bfloat16 where it is installed, else uint16 bits
    marked as bf16 (`tsr_type_of` reads the mark; the dtype compares equal to uint16)."""
    try:
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    except ImportError:
        return np.dtype(np.uint16, metadata={"tsr": "bf16"})


def numpy_dtype(code: int, bits: int, lanes: int) -> np.dtype:
    """The NumPy dtype of a DLPack element type; DLPackError for one a kernel cannot take."""
    if lanes == 1:
        if code == _BFLOAT and bits == 16:
            return bf16_dtype()
        kind = {0: "i", 1: "u", 2: "f", 6: "b"}.get(code)  # kDLInt, kDLUInt, kDLFloat, kDLBool
        if kind == "b" and bits == 8:
            return np.dtype(bool)
        if kind is not None and kind != "b" and bits in (8, 16, 32, 64) and not (kind == "f" and bits == 8):
            return np.dtype(f"{kind}{bits // 8}")
    raise DLPackError(f"its DLPack element type (code {code}, {bits} bits, {lanes} lanes) is no .tsr element type")


@dataclass(frozen=True)
class Export:
    """What a DLPack capsule describes; `capsule` keeps the producer's memory alive."""

    device_type: int
    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None   # in bytes; None: C-contiguous
    dtype: np.dtype
    readonly: bool
    capsule: Any


_GET_POINTER = ctypes.pythonapi.PyCapsule_GetPointer
_GET_POINTER.restype = ctypes.c_void_p
_GET_POINTER.argtypes = [ctypes.py_object, ctypes.c_char_p]
_IS_VALID = ctypes.pythonapi.PyCapsule_IsValid
_IS_VALID.restype = ctypes.c_int
_IS_VALID.argtypes = [ctypes.py_object, ctypes.c_char_p]


def export(obj: Any) -> Export:
    """Read `obj.__dlpack__()`; DLPackError when the producer refuses or the capsule is unusable."""
    try:
        try:
            capsule = obj.__dlpack__(max_version=(1, 0))
        except TypeError:  # a producer older than DLPack 1.0: no keywords
            capsule = obj.__dlpack__()
    except Exception as e:  # the producer's own refusal (a tensor that requires grad, ...)
        raise DLPackError(f"its __dlpack__() failed: {type(e).__name__}: {e}"[:300]) from None
    readonly = False
    if _IS_VALID(capsule, b"dltensor_versioned"):
        managed = DLManagedTensorVersioned.from_address(_GET_POINTER(capsule, b"dltensor_versioned"))
        if managed.major != 1:
            raise DLPackError(f"its DLPack version {managed.major}.{managed.minor} is not supported (1.x is)")
        t = managed.dl_tensor
        readonly = bool(managed.flags & _READ_ONLY)
    elif _IS_VALID(capsule, b"dltensor"):
        t = DLTensor.from_address(_GET_POINTER(capsule, b"dltensor"))  # a DLManagedTensor starts with it
    else:
        raise DLPackError("its __dlpack__() returned no DLPack capsule (or one already used)")
    dtype = numpy_dtype(t.dtype.code, t.dtype.bits, t.dtype.lanes)
    shape = tuple(int(t.shape[i]) for i in range(t.ndim))
    strides = tuple(int(t.strides[i]) * dtype.itemsize for i in range(t.ndim)) if t.strides else None
    return Export(int(t.device.device_type), int(t.data or 0) + int(t.byte_offset), shape, strides, dtype, readonly,
                  capsule)


def host_array(e: Export) -> np.ndarray:
    """A NumPy view of an export in host memory; the view keeps the capsule (the producer's memory)."""
    itemsize = e.dtype.itemsize
    strides = e.strides if e.strides is not None else c_strides(e.shape, itemsize)
    if 0 in e.shape:
        out = np.empty(e.shape, e.dtype)
    else:
        low = sum(s * (d - 1) for s, d in zip(strides, e.shape) if s < 0)
        high = sum(s * (d - 1) for s, d in zip(strides, e.shape) if s > 0) + itemsize
        raw = (ctypes.c_char * (high - low)).from_address(e.ptr + low)
        raw._keep = e.capsule  # type: ignore[attr-defined]  # the memory lives as long as the view
        out = np.ndarray(e.shape, e.dtype, buffer=memoryview(raw).cast("B"), offset=-low, strides=strides)
    if e.readonly:
        out.flags.writeable = False
    return out


def c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    out = []
    acc = itemsize
    for d in reversed(shape):
        out.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(out))


__all__ = ["CUDA_DEVICES", "HOST_DEVICES", "DLPackError", "Export", "bf16_dtype", "export", "host_array", "numpy_dtype"]
