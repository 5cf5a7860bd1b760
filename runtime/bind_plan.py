"""A per-kernel fast path for `launch_args.bind`: what a kernel's parameters ask of a launch,
worked out once per argument structure (how many positional arguments, which keywords, whether a
grid was given), so that a repeated launch only reads each array's dtype, rank, flags, shape and
address and checks what can differ between launches (dtype, rank, contiguity, writability, sizes,
shape symbols against each other and against integer parameters, overlap, scalar ranges, the
grid). Another library's array is read through `device_arrays.adapt` (a NumPy view of host
memory, or a device array's description) and checked the same way. Anything unusual (an array
subclass, a NumPy scalar, an array `adapt` refuses, a check that fails) goes to `bind`, which
raises the error it always raised: the fast path never reports an error of its own."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from tessera.base.errors import LaunchError
from tessera.base.kernel_info import KernelInfo
from tessera.runtime.device_arrays import ADAPTERS, DeviceArray, ForeignArrayError, adapt
from tessera.runtime.launch_args import (
    INT_RANGES,
    Bound,
    _check_scalar,
    bind,
    broadcast_error,
    map_grid,
    map_shape,
    normalize_grid,
    numpy_dtypes,
    shared_bytes,
)

_FROM_BUFFER = ctypes.c_char.from_buffer
_ADDRESS_OF = ctypes.addressof
_LIMIT = 2**31
_MAX_PLANS = 4096
# (id of the KernelInfo, argument count, keywords, grid given) -> (the KernelInfo, its plan or
# None where the structure is wrong: `bind` reports it). The KernelInfo is kept so that its id
# cannot be reused while the entry exists.
_PLANS: dict[tuple, tuple[KernelInfo, _Plan | None]] = {}


class _Plan:
    """The checks of one argument structure: per tensor (name, slot, accepted dtypes, rank,
    fixed dims [(axis, extent)], symbol dims [(axis, symbol)], mut); per scalar (name, slot, the
    ParamInfo, integer range or None, plain float); the pairs of tensors that may not overlap."""

    __slots__ = ("slots", "tensors", "scalars", "pairs", "shape_params", "symbols_from_scalars")

    def __init__(self, info: KernelInfo, nargs: int, keywords: tuple[str, ...]) -> None:
        user = [p for p in info.params if p.kind != "shape"]
        self.slots = {p.name: i for i, p in enumerate(user)}
        self.tensors = []
        self.scalars = []
        for i, p in enumerate(user):
            if p.kind == "tensor":
                fixed = tuple((a, d) for a, d in enumerate(p.dims) if isinstance(d, int))
                symbols = tuple((a, d) for a, d in enumerate(p.dims) if not isinstance(d, int))
                self.tensors.append((p.name, i, numpy_dtypes(p.dtype), len(p.dims), fixed, symbols, p.mut))
            else:
                rng = INT_RANGES.get(p.dtype)
                self.scalars.append((p.name, i, p, rng, p.dtype in ("f32", "f64")))
        muts = {p.name for p in user if p.kind == "tensor" and p.mut}
        names = [t[0] for t in self.tensors]
        self.pairs = tuple((a, b) for k, a in enumerate(names) for b in names[k + 1:] if a in muts or b in muts) \
            if info.restrict else ()
        self.shape_params = tuple(p.name for p in info.params if p.kind == "shape")
        bound_by_arrays = {s for t in self.tensors for _, s in t[5]}
        self.symbols_from_scalars = tuple(s[0] for s in self.scalars
                                          if s[0] in bound_by_arrays or s[0] == "grid_groups")


def _plan(info: KernelInfo, nargs: int, keywords: tuple[str, ...], gridded: bool) -> _Plan | None:
    key = (id(info), nargs, keywords, gridded)
    hit = _PLANS.get(key)
    if hit is not None and hit[0] is info:
        return hit[1]
    user = [p.name for p in info.params if p.kind != "shape"]
    given = user[:nargs] + list(keywords)
    ok = nargs <= len(user) and sorted(given) == sorted(user) and len(set(given)) == len(given)
    plan = _Plan(info, nargs, keywords) if ok else None
    if len(_PLANS) >= _MAX_PLANS:
        _PLANS.clear()
    _PLANS[key] = (info, plan)
    return plan


def fast_bind(info: KernelInfo, args: tuple, kwargs: dict[str, Any], grid: Any, device_ok: bool = False) -> Bound:
    """`bind(info, args, kwargs, grid, device_ok)`, by the kernel's plan where the arguments allow."""
    plan = _plan(info, len(args), tuple(kwargs), grid is not None)
    bound = _bind_planned(info, plan, args, kwargs, grid, device_ok) if plan is not None else None
    return bound if bound is not None else bind(info, args, kwargs, grid, device_ok)


def _address(value: np.ndarray, writeable: bool) -> int:
    if writeable and value.nbytes:
        # 0.25 us; `__array_interface__` builds a dict (1.2 us). An ndarray exports the buffer protocol.
        try:
            return _ADDRESS_OF(_FROM_BUFFER(value))  # type: ignore[arg-type]
        except (TypeError, ValueError, BufferError):
            pass
    return int(value.__array_interface__["data"][0])


def _bind_planned(info: KernelInfo, plan: _Plan, args: tuple, kwargs: dict[str, Any], grid: Any,
                  device_ok: bool) -> Bound | None:
    """The checked arguments, or None where any check fails or the arguments are not plain."""
    if kwargs:
        values = list(args) + [None] * (len(plan.slots) - len(args))
        for name, v in kwargs.items():
            values[plan.slots[name]] = v
    else:
        values = args  # type: ignore[assignment]
    shapes: dict[str, int] = {}
    explicit = normalize_grid(info.name, grid) if grid is not None else None  # its errors come first in bind too
    if explicit is not None:
        shapes["grid_groups"] = explicit[0] * explicit[1] * explicit[2]
    arrays: dict[str, Any] = {}
    addresses: dict[str, tuple[Any, int]] = {}
    sizes: dict[str, int] = {}
    for name, slot, accepted, ndim, fixed, symbols, mut in plan.tensors:
        v = values[slot]
        if type(v) is not np.ndarray:  # another library's array: `adapt` once per class, then its reader
            try:
                found = (ADAPTERS.get(type(v)) or adapt)(v)
            except ForeignArrayError:
                return None
            if type(found) is DeviceArray:  # the checks below, on the description
                if not device_ok:
                    return None
                ptr, shape, dtype, contiguous, readonly = found
                if dtype not in accepted or len(shape) != ndim or not contiguous or (mut and readonly):
                    return None
                count = 1
                for dim in shape:
                    count *= dim
                if count >= _LIMIT:
                    return None
                for axis, want in fixed:
                    if shape[axis] != want:
                        return None
                for axis, sym in symbols:
                    got = shapes.get(sym)
                    if got is None:
                        shapes[sym] = shape[axis]
                    elif got != shape[axis]:
                        return None
                arrays[name] = v
                addresses[name] = (v, ptr)
                sizes[name] = count * dtype.itemsize
                continue
            if type(found) is not np.ndarray:
                return None
            v = found  # a NumPy view of another library's host array
        if v.dtype not in accepted or v.ndim != ndim:
            return None
        flags = v.flags
        writeable = flags.writeable
        if not flags.c_contiguous or (mut and not writeable) or v.size >= _LIMIT:
            return None
        shape = v.shape
        for axis, want in fixed:
            if shape[axis] != want:
                return None
        for axis, sym in symbols:
            got = shapes.get(sym)
            if got is None:
                shapes[sym] = shape[axis]
            elif got != shape[axis]:
                return None
        arrays[name] = v
        addresses[name] = (v, _address(v, writeable))
        sizes[name] = v.nbytes
    scalars: dict[str, int | float | bool] = {}
    for name, slot, p, rng, plain_float in plan.scalars:
        v = values[slot]
        if rng is not None and type(v) is int:
            if not rng[0] <= v <= rng[1]:
                return None
        elif plain_float and type(v) is float:
            pass
        else:
            try:
                v = _check_scalar(info, p, v)
            except LaunchError:
                return None
        scalars[name] = v
    for a, b in plan.pairs:
        a0, b0 = addresses[a][1], addresses[b][1]
        a1, b1 = a0 + sizes[a], b0 + sizes[b]
        if a0 < a1 and b0 < b1 and a0 < b1 and b0 < a1:
            return None
    for name in plan.symbols_from_scalars:
        if name in shapes and scalars[name] != shapes[name]:
            return None
    for name in plan.shape_params:
        extent = shapes.get(name)
        if extent is None or extent >= _LIMIT:
            return None
    if info.map_broadcast and broadcast_error(info, shapes) is not None:
        return None
    if explicit is None:
        if info.map_width and "grid_groups" not in shapes:
            explicit = (map_grid(info, map_shape(info, shapes)), 1, 1)
        elif "grid_groups" in shapes:
            try:
                explicit = normalize_grid(info.name, shapes["grid_groups"])
            except LaunchError:
                return None
        else:
            return None
    if info.smem_sized:
        try:
            smem = shared_bytes(info, scalars)
        except LaunchError:
            return None
    else:
        smem = info.dynamic_smem
    return Bound(explicit, arrays, scalars, shapes, smem, addresses)
