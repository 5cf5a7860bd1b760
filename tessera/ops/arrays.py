"""The arrays an operator of `tessera.ops` takes and returns: NumPy arrays, PyTorch tensors (CPU or
CUDA), CuPy arrays, and other host arrays that export DLPack or the buffer protocol.

`Operand.of(value, name)` reads one argument: its library (its *kind*), its .tsr element type, its
shape and whether it lives in CUDA memory, through the interop layer of the runtime
(`runtime/device_arrays.py`). Results are made of the first array argument's kind
(`Operand.empty`, `Operand.zeros`): a NumPy array for NumPy (and for other host arrays), a tensor
on the same device for PyTorch, a CuPy array for CuPy. Reshaping, contiguous copies, moving an
axis and conversions to f32 are done by the array's own library (`Operand.lib`), so PyTorch and
CuPy data never leave the device.

Misuse raises `OpArgumentError` (a `TesseraError`) naming the argument.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.base.errors import TesseraError
from tessera.runtime.device_arrays import DeviceArray, ForeignArrayError, adapt
from tessera.runtime.dlpack import bf16_dtype
from tessera.runtime.launch_args import tsr_type_of


class OpArgumentError(TesseraError, ValueError):
    """An operator's argument has a type, element type or shape that the operator does not take;
    `argument` names it (`a`, `weight`, ...)."""

    def __init__(self, op: str, argument: str, message: str) -> None:
        super().__init__(f"tessera.ops.{op}(): argument '{argument}': {message}"[:500])
        self.argument = argument


_NUMPY_OF = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "i8": np.int8, "i32": np.int32,
             "u8": np.uint8, "i64": np.int64}


def numpy_dtype(tsr: str) -> np.dtype:
    """The NumPy dtype that holds a .tsr element type (bf16: runtime/dlpack.py `bf16_dtype`)."""
    return bf16_dtype() if tsr == "bf16" else np.dtype(_NUMPY_OF[tsr])


@dataclass(frozen=True)
class Operand:
    """One array argument of an operator, read once."""

    value: Any          # the caller's object, made contiguous (by its own library) where it was not
    kind: str           # "numpy", "torch" or "cupy" (other host arrays are read as NumPy views)
    dtype: str          # the .tsr element type
    shape: tuple[int, ...]
    on_device: bool     # in CUDA memory

    @staticmethod
    def of(op: str, name: str, value: Any) -> Operand:
        kind = _kind(value)
        if kind == "torch" and value.requires_grad:
            value = value.detach()  # the forward operators never record autograd history
        try:
            found = adapt(value)
        except ForeignArrayError as e:
            raise OpArgumentError(op, name, f"cannot take this {type(value).__name__}: {e}") from None
        if found is None:
            raise OpArgumentError(op, name, f"expected an array (NumPy, PyTorch, CuPy), got {type(value).__name__}")
        dtype = tsr_type_of(found.dtype)
        if dtype is None:
            raise OpArgumentError(op, name, f"element type {found.dtype} is not a .tsr element type")
        if kind == "other":  # a host array of another library: its NumPy view
            kind, value = "numpy", found
        on_device = isinstance(found, DeviceArray)
        if not (found.c_contiguous if isinstance(found, DeviceArray) else found.flags.c_contiguous):
            value = _contiguous(kind, value)
        return Operand(value, kind, dtype, tuple(int(d) for d in found.shape), on_device)

    @property
    def lib(self) -> Any:
        """The array's library module: numpy, torch or cupy."""
        return np if self.kind == "numpy" else sys.modules[self.kind]

    def empty(self, shape: tuple[int, ...], dtype: str) -> Any:
        """A new array of this operand's kind and device, of .tsr element type `dtype`."""
        return self._new(shape, dtype, zeros=False)

    def zeros(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self._new(shape, dtype, zeros=True)

    def _new(self, shape: tuple[int, ...], dtype: str, zeros: bool) -> Any:
        if self.kind == "torch":
            torch = self.lib
            make = torch.zeros if zeros else torch.empty
            return make(shape, dtype=_torch_dtype(torch, dtype), device=self.value.device)
        make = self.lib.zeros if zeros else self.lib.empty
        return make(shape, numpy_dtype(dtype))

    def reshaped(self, shape: tuple[int, ...]) -> Any:
        """The (contiguous) array viewed with another shape of the same size."""
        return self.value.reshape(shape)

    def as_f32(self) -> Any:
        """The array's values as f32 (itself when it is f32), of the same kind."""
        if self.dtype == "bf16" and self.kind == "numpy" and self.value.dtype.name != "bfloat16":
            return (self.value.view(np.uint16).astype(np.uint32) << 16).view(np.float32)  # bf16 bits
        return self.as_type("f32")

    def as_type(self, dtype: str) -> Any:
        """The array's values converted to a .tsr element type (itself when it has it), of the same kind."""
        if self.dtype == dtype:
            return self.value
        if self.kind == "torch":
            return self.value.to(_torch_dtype(self.lib, dtype))
        return self.value.astype(numpy_dtype(dtype))

    def moved(self, axis: int, to: int) -> Any:
        """A contiguous copy with axis `axis` moved to position `to`."""
        if self.kind == "torch":
            return self.value.movedim(axis, to).contiguous()
        return self.lib.ascontiguousarray(self.lib.moveaxis(self.value, axis, to))

    def swapped_last(self) -> Any:
        """A contiguous copy with the last two axes exchanged."""
        if self.kind == "torch":
            return self.value.transpose(-1, -2).contiguous()
        return self.lib.ascontiguousarray(self.lib.swapaxes(self.value, -1, -2))


def _kind(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return "numpy"
    torch, cupy = sys.modules.get("torch"), sys.modules.get("cupy")
    if torch is not None and isinstance(value, torch.Tensor):
        return "torch"
    if cupy is not None and isinstance(value, cupy.ndarray):
        return "cupy"
    return "other"


def _contiguous(kind: str, value: Any) -> Any:
    if kind == "torch":
        return value.contiguous()
    if kind == "cupy":
        return sys.modules["cupy"].ascontiguousarray(value)
    return np.ascontiguousarray(value)


def _torch_dtype(torch: Any, dtype: str) -> Any:
    return {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "f64": torch.float64,
            "i8": torch.int8, "i32": torch.int32, "u8": torch.uint8, "i64": torch.int64}[dtype]


def same_place(op: str, first: Operand, others: dict[str, Operand]) -> None:
    """Every array argument of one call lives where the first does (host or CUDA memory)."""
    for name, o in others.items():
        if o.on_device != first.on_device:
            where = "CUDA" if o.on_device else "host"
            raise OpArgumentError(op, name, f"is in {where} memory but the first array argument is not; "
                                            "pass every array from the same place")
