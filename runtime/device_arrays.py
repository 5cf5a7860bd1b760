"""Arrays of other libraries (spec sections 11 and 17): what a launch takes besides a NumPy array.

`adapt(obj)` says where an object's elements are and how they are laid out:

- in host memory (a PyTorch CPU tensor, a JAX or array-API CPU array, anything with DLPack on the
  CPU or the buffer protocol): a NumPy view of the same memory, which every check and the CPU
  backend use as they use an ndarray (no copy; writes through it are the caller's);
- in CUDA device memory (`__cuda_array_interface__`, DLPack on a CUDA device; PyTorch and CuPy
  read directly, faster than through either protocol): a `DeviceArray`, used in place on CUDA;
- neither: None.

PyTorch and CuPy are recognised by their classes only when the caller's object is one (their
modules are looked up in `sys.modules`, never imported). An array the protocols describe but a
kernel cannot take (an unsupported element type, a tensor that requires grad) is a
`ForeignArrayError` whose message says why; the caller names the parameter.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, NamedTuple

import numpy as np

from tessera.base.errors import LaunchError
from tessera.runtime import dlpack


class ForeignArrayError(ValueError):
    """An array of another library that a kernel cannot take; the message says why."""


class DeviceArray(NamedTuple):
    """An array in CUDA memory: where it starts, its shape, dtype and layout (a tuple: made at each
    launch, so made cheaply)."""

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


def contiguous_strides(shape: tuple[int, ...], strides: tuple[int, ...] | None, itemsize: int) -> bool:
    if strides is None:
        return True
    acc = itemsize
    for d, s in zip(reversed(shape), reversed(strides)):
        if d != 1 and s != acc:
            return False
        acc *= d
    return True


_TYPESTRS: dict[str, np.dtype] = {}
_new = functools.partial(tuple.__new__, DeviceArray)  # DeviceArray(...) without its Python-level __new__


def _from_cai(cai: dict[str, Any]) -> DeviceArray:
    ptr, readonly = cai["data"]
    shape = cai["shape"]
    if type(shape) is not tuple:
        shape = tuple(shape)
    typestr = cai["typestr"]
    dtype = _TYPESTRS.get(typestr)
    if dtype is None:
        dtype = _TYPESTRS[typestr] = np.dtype(typestr)
    strides = cai.get("strides")
    contiguous = not strides or contiguous_strides(shape, tuple(strides), dtype.itemsize)
    return _new((ptr or 0, shape, dtype, contiguous, bool(readonly)))


def _from_export(e: dlpack.Export) -> np.ndarray | DeviceArray:
    if e.device_type in dlpack.HOST_DEVICES:
        return dlpack.host_array(e)
    if e.device_type in dlpack.CUDA_DEVICES:
        return DeviceArray(e.ptr, e.shape, e.dtype, contiguous_strides(e.shape, e.strides, e.dtype.itemsize), e.readonly)
    raise ForeignArrayError(f"it is in memory of DLPack device type {e.device_type}, neither the host's nor CUDA's")


def _dlpack(obj: Any) -> np.ndarray | DeviceArray:
    where = getattr(obj, "__dlpack_device__", None)
    try:
        if where is not None and where()[0] == dlpack.KDL_CPU:
            try:
                view = np.from_dlpack(obj)  # NumPy's own reader, the fastest; it refuses bf16
            except (BufferError, TypeError, ValueError, RuntimeError):
                view = None
            # NumPy marks the view of a legacy capsule read-only (it cannot tell); `export` reads the
            # flag where the capsule has one, and takes a legacy capsule as writable, as DLPack 0.x did.
            if view is not None and view.flags.writeable:
                return view
        return _from_export(dlpack.export(obj))
    except dlpack.DLPackError as e:
        raise ForeignArrayError(str(e)) from None


def _generic(obj: Any) -> np.ndarray | DeviceArray | None:
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        return _from_cai(cai)
    if hasattr(obj, "__dlpack__"):
        return _dlpack(obj)
    try:
        view = memoryview(obj)
    except TypeError:
        return None  # no array at all
    try:
        return np.asarray(view)
    except (ValueError, TypeError) as e:
        raise ForeignArrayError(f"its buffer (format {view.format!r}) is no NumPy array: {e}"[:300]) from None


_TORCH_DTYPES: dict[Any, np.dtype] = {}


def _torch(t: Any) -> np.ndarray | DeviceArray:
    if t.is_cuda:
        dtype = _TORCH_DTYPES.get(t.dtype) or _torch_dtype(t.dtype)
        return _new((t.data_ptr(), tuple(t.shape), dtype, t.is_contiguous(), False))
    if t.device.type == "cpu":
        try:
            return t.numpy()  # a view of the same memory; refuses bf16 and tensors that require grad
        except (TypeError, RuntimeError):
            pass
    return _dlpack(t)


def _torch_dtype(dtype: Any) -> np.dtype:
    """The NumPy dtype of a PyTorch dtype (the table is made on the first miss)."""
    torch = sys.modules["torch"]
    if dtype not in _TORCH_DTYPES:
        names = {"float16": "f2", "float32": "f4", "float64": "f8", "int8": "i1", "int16": "i2", "int32": "i4",
                 "int64": "i8", "uint8": "u1", "uint16": "u2", "uint32": "u4", "uint64": "u8", "bool": "?"}
        for name, code in names.items():
            if hasattr(torch, name):
                _TORCH_DTYPES[getattr(torch, name)] = np.dtype(code)
        _TORCH_DTYPES[torch.bfloat16] = dlpack.bf16_dtype()
    if dtype not in _TORCH_DTYPES:
        raise ForeignArrayError(f"its element type {dtype} is no .tsr element type")
    return _TORCH_DTYPES[dtype]


def _cupy(a: Any) -> DeviceArray:
    return _new((a.data.ptr, a.shape, a.dtype, a.flags.c_contiguous, False))


# Per class: the function that `adapt` reads its objects with (bind_plan.py's fast path calls it
# directly once it is known).
ADAPTERS: dict[type, Any] = {}


def _kind(cls: type) -> Any:
    torch, cupy = sys.modules.get("torch"), sys.modules.get("cupy")
    kind: Any
    if torch is not None and issubclass(cls, torch.Tensor):
        kind = _torch
    elif cupy is not None and issubclass(cls, cupy.ndarray):
        kind = _cupy
    else:
        kind = _generic
    if len(ADAPTERS) > 256:
        ADAPTERS.clear()
    ADAPTERS[cls] = kind
    return kind


def reads_cuda_interface(cls: type) -> bool:
    """Whether `adapt` reads the objects of `cls` by their `__cuda_array_interface__` (a property of
    the class, as CuPy's and Numba's are): runtime/direct_args.py then reads it itself."""
    return ADAPTERS.get(cls) is _generic and hasattr(cls, "__cuda_array_interface__")


def adapt(obj: Any) -> np.ndarray | DeviceArray | None:
    """A NumPy view of an array in host memory, a DeviceArray for one in CUDA memory, or None for
    an object that is no array. ForeignArrayError for an array a kernel cannot take."""
    if isinstance(obj, np.ndarray):
        return obj
    cls = type(obj)
    kind = ADAPTERS.get(cls) or _kind(cls)
    return kind(obj)


def describe(obj: Any) -> DeviceArray:
    """The DeviceArray of an array in CUDA memory; LaunchError for anything else."""
    try:
        found = adapt(obj)
    except ForeignArrayError as e:
        raise LaunchError(f"cannot pass {type(obj).__name__} to a CUDA kernel: {e}") from None
    if not isinstance(found, DeviceArray):
        what = "an array in host memory" if found is not None else "no array"
        raise LaunchError(f"cannot pass {type(obj).__name__} to a CUDA kernel in place: it is not in CUDA device "
                          f"memory ({what})")
    return found
