"""Arrays that already live on the GPU: objects with `__cuda_array_interface__` (CuPy, Numba,
PyTorch) or `__dlpack__`. They are described (pointer, shape, dtype, layout) so that the same
checks as for NumPy arrays apply, and then used in place, without a copy."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.base.errors import LaunchError


@dataclass(frozen=True)
class DeviceArray:
    ptr: int
    shape: tuple[int, ...]
    dtype: np.dtype
    c_contiguous: bool
    readonly: bool

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def is_device_array(obj: Any) -> bool:
    return not isinstance(obj, np.ndarray) and (hasattr(obj, "__cuda_array_interface__") or hasattr(obj, "__dlpack__"))


def _contiguous(shape: tuple[int, ...], strides: tuple[int, ...] | None, itemsize: int) -> bool:
    if strides is None:
        return True
    acc = itemsize
    for d, s in zip(reversed(shape), reversed(strides)):
        if d != 1 and s != acc:
            return False
        acc *= d
    return True


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_KDL_CUDA, _KDL_CUDA_MANAGED = 2, 13
_DL_CODES = {0: "i", 1: "u", 2: "f", 6: "b"}  # kDLInt, kDLUInt, kDLFloat, kDLBool


def _from_dlpack(obj: Any) -> DeviceArray:
    """Read a DLPack capsule (without consuming it: the object keeps owning the memory)."""
    capsule = obj.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    addr = get(capsule, b"dltensor")
    if not addr:
        raise LaunchError("a DLPack argument could not be read")
    t = _DLTensor.from_address(addr)  # a DLManagedTensor starts with its DLTensor
    if t.device.device_type not in (_KDL_CUDA, _KDL_CUDA_MANAGED):
        raise LaunchError("a DLPack argument is not in CUDA device memory")
    shape = tuple(int(t.shape[i]) for i in range(t.ndim))
    kind = _DL_CODES.get(t.dtype.code)
    if kind is None or t.dtype.lanes != 1:
        raise LaunchError("a DLPack argument has an unsupported element type")
    dtype = np.dtype(bool) if kind == "b" else np.dtype(f"{kind}{t.dtype.bits // 8}")
    strides = tuple(int(t.strides[i]) * dtype.itemsize for i in range(t.ndim)) if t.strides else None
    return DeviceArray(int(t.data or 0) + int(t.byte_offset), shape, dtype,
                       _contiguous(shape, strides, dtype.itemsize), False)


def describe(obj: Any) -> DeviceArray:
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        ptr, readonly = cai["data"]
        shape = tuple(int(d) for d in cai["shape"])
        dtype = np.dtype(cai["typestr"])
        strides = tuple(cai["strides"]) if cai.get("strides") else None
        return DeviceArray(int(ptr or 0), shape, dtype, _contiguous(shape, strides, dtype.itemsize), bool(readonly))
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj)
    raise LaunchError(f"cannot pass {type(obj).__name__} to a CUDA kernel")
