"""What `tessera.ops.backward` needs of an array library, for NumPy arrays and PyTorch tensors alike:
the kind and dtype of an array, a contiguous copy in the type the kernels compute in, new arrays of
the same kind (and device), casts and axis moves.

PyTorch is never imported here: a tensor's own methods and its module (`sys.modules["torch"]`,
present because the caller made the tensor) are used.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from tessera.base.errors import TesseraError

# The element types the backward passes take (f16 and bf16 are computed in f32).
FLOATS = ("float16", "bfloat16", "float32", "float64")


def kind(x: Any) -> str:
    """"torch" for a PyTorch tensor, "numpy" for a NumPy array, else the type's name."""
    if isinstance(x, np.ndarray):
        return "numpy"
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return "torch"
    return type(x).__name__


def dtype_name(op: str, name: str, x: Any) -> str:
    """The element type of `x` as NumPy names it ("float32"); a TesseraError naming the argument
    when `x` is neither a NumPy array nor a PyTorch tensor."""
    k = kind(x)
    if k == "numpy":
        return str(x.dtype.name)
    if k == "torch":
        return str(x.dtype).removeprefix("torch.")
    raise TesseraError(f"{op}: argument '{name}' is a {k}; it must be a NumPy array or a PyTorch tensor")


def prod(shape: tuple[int, ...]) -> int:
    return math.prod(int(d) for d in shape)


def _torch_dtype(name: str) -> Any:
    return getattr(sys.modules["torch"], name)


def compute_type(*dtypes: str) -> str:
    """The type the kernels compute in for arguments of these dtypes: f64 if one is, else f32."""
    return "float64" if "float64" in dtypes else "float32"


def compute(x: Any, ctype: str) -> Any:
    """`x` as the kernels read it: contiguous, detached from autograd, of element type `ctype`
    (a copy only where one of these needs it)."""
    if kind(x) == "torch":
        return x.detach().to(_torch_dtype(ctype)).contiguous()
    return np.ascontiguousarray(x, dtype=ctype)


def empty_like_shape(like: Any, shape: tuple[int, ...]) -> Any:
    """A new uninitialized array of `like`'s kind, dtype and device."""
    if kind(like) == "torch":
        return sys.modules["torch"].empty(shape, dtype=like.dtype, device=like.device)
    return np.empty(shape, like.dtype)


def zeros_like_shape(like: Any, shape: tuple[int, ...]) -> Any:
    """A new array of zeros of `like`'s kind, dtype and device."""
    if kind(like) == "torch":
        return sys.modules["torch"].zeros(shape, dtype=like.dtype, device=like.device)
    return np.zeros(shape, like.dtype)


def cast(x: Any, dtype: str) -> Any:
    """`x` with element type `dtype` (a NumPy name); `x` itself when it has it."""
    if kind(x) == "torch":
        return x if str(x.dtype).removeprefix("torch.") == dtype else x.to(_torch_dtype(dtype))
    if x.dtype.name == dtype:
        return x
    from tessera.runtime.dlpack import bf16_dtype

    return x.astype(bf16_dtype() if dtype == "bfloat16" else np.dtype(dtype))


def moveaxis(x: Any, source: int, dest: int) -> Any:
    """`x` with axis `source` moved to `dest` (a view)."""
    if kind(x) == "torch":
        return x.movedim(source, dest)
    return np.moveaxis(x, source, dest)


def expand(x: Any, shape: tuple[int, ...]) -> Any:
    """A contiguous copy of `x` broadcast to `shape`."""
    if kind(x) == "torch":
        return x.expand(shape).contiguous()
    return np.ascontiguousarray(np.broadcast_to(x, shape))


def sum_to(x: Any, shape: tuple[int, ...]) -> Any:
    """`x` summed over the axes that broadcasting `shape` to x's shape added or stretched."""
    lead = len(x.shape) - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape) if d == 1 and x.shape[lead + i] != 1)
    if not axes:
        return x
    total = x.sum(dim=axes) if kind(x) == "torch" else x.sum(axis=axes)
    return total.reshape(shape)
