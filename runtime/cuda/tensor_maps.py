"""Tensor maps for the bulk tensor copies of sm_90a kernels (spec section 16): what the runtime
builds at launch with `cuTensorMapEncodeTiled` for each `KernelInfo.tensor_maps` entry (a copied
tensor and a box) and passes after the kernel's parameters as a `const __grid_constant__` 128-byte
value, cached per (address, shape, element type, box, swizzle).

The map describes the tensor as the driver wants it, innermost dimension first: its dimensions, the
byte strides of every dimension but the innermost (a Tessera tensor is dense and row-major), the
box, element strides of 1, no interleave, the swizzle the compiler chose (none, 32, 64 or 128
bytes: the mode of a shared array that a warpgroup MMA reads; the driver requires the box's
innermost extent to be at most that many bytes, and the compiler moves one panel of the array per
box, exactly that many), L2 promotion of 128 bytes and out-of-bound fill NONE (elements outside the tensor read as
zero). The kernel variant that takes maps is the aligned one, whose launch checks that the arrays
are 16-byte aligned and their row strides multiples of 16 bytes; `encode_args` checks again and
refuses with a LaunchError naming the tensor.
"""

from __future__ import annotations

import ctypes
from typing import Any

from tessera.base.errors import LaunchError, TesseraError
from tessera.base.kernel_info import KernelInfo

# .tsr element type -> (CUtensorMapDataType member, bytes): bits are copied, so integers and bool
# of 1 and 2 bytes go as unsigned ones.
DATA_TYPES = {"bool": ("UINT8", 1), "i8": ("UINT8", 1), "u8": ("UINT8", 1), "i16": ("UINT16", 2),
              "u16": ("UINT16", 2), "f16": ("FLOAT16", 2), "bf16": ("BFLOAT16", 2), "i32": ("INT32", 4),
              "u32": ("UINT32", 4), "f32": ("FLOAT32", 4), "i64": ("INT64", 8), "u64": ("UINT64", 8),
              "f64": ("FLOAT64", 8)}
SWIZZLES = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}
_MAX_CACHED = 1024
_CACHE: dict[tuple, ctypes.Array] = {}
MapValue = ctypes.c_uint64 * 16  # CUtensorMap: 128 opaque bytes


def encode_args(drv: Any, tensor: str, dtype: str, address: int, shape: tuple[int, ...], box: tuple[int, ...],
                swizzle: int) -> tuple:
    """The arguments of `cuTensorMapEncodeTiled` for a tensor of `shape` (outermost first) at
    `address` and a box of `box` (outermost first)."""
    name, size = DATA_TYPES[dtype]
    rank = len(shape)
    if not 2 <= rank <= 5 or len(box) != rank:
        raise TesseraError(f"a tensor map of {tensor!r} needs 2 to 5 dimensions and a box of as many")
    if swizzle not in SWIZZLES or (swizzle and box[-1] * size > swizzle):
        raise TesseraError(f"a tensor map of {tensor!r} with swizzle {swizzle} needs a mode of {sorted(SWIZZLES)} "
                           f"and a box whose innermost extent is at most that many bytes (box {box})")
    dims = [int(d) for d in reversed(shape)]
    strides = []
    step = size
    for d in dims[:-1]:
        step *= d
        strides.append(step)
    if address % 16 or any(s % 16 for s in strides):
        raise LaunchError(f"the bulk tensor copies of {tensor!r} need a 16-byte aligned array whose strides are "
                          f"multiples of 16 bytes (address {address:#x}, strides {strides} bytes)")
    if any(d >= 1 << 32 for d in dims) or any(s >= 1 << 40 for s in strides):
        raise LaunchError(f"{tensor!r} is too large for a tensor map (dimensions {dims}, strides {strides})")
    return (getattr(drv.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{name}"), rank, address, dims, strides,
            [int(b) for b in reversed(box)], [1] * rank, drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            getattr(drv.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{SWIZZLES[swizzle]}"),
            drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)


def tensor_map(drv: Any, kernel: str, tensor: str, dtype: str, address: int, shape: tuple[int, ...],
               box: tuple[int, ...], swizzle: int) -> ctypes.Array:
    """The encoded map (cached), as the 128 bytes the kernel parameter holds."""
    key = (address, shape, dtype, box, swizzle)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    args = encode_args(drv, tensor, dtype, address, shape, box, swizzle)
    result = drv.cuTensorMapEncodeTiled(*args)
    if int(result[0]) != 0:
        raise LaunchError(f"{kernel}(): cuTensorMapEncodeTiled failed for {tensor!r} ({result[0]!r}); "
                          f"arguments {args[1:]}")
    value = MapValue(*[int(x) for x in result[1].opaque])
    if len(_CACHE) >= _MAX_CACHED:
        _CACHE.clear()
    _CACHE[key] = value
    return value


def map_params(drv: Any, info: KernelInfo, shapes: dict[str, int], pointers: dict[str, int]) -> list[ctypes.Array]:
    """The kernel's tensor-map parameters for a launch: `shapes` gives the shape symbols' values,
    `pointers` each tensor's device address."""
    params = {p.name: p for p in info.params}
    out = []
    for tensor, box, swizzle in info.tensor_maps:
        p = params[tensor]
        shape = tuple(d if isinstance(d, int) else int(shapes[d]) for d in p.dims)
        out.append(tensor_map(drv, info.name, tensor, p.dtype, pointers[tensor], shape, box, swizzle))
    return out


__all__ = ["DATA_TYPES", "MapValue", "encode_args", "map_params", "tensor_map"]
