"""The arguments of a direct launch (a kernel's repeated launch, `Kernel.__call__`'s first try):
per kernel and number of positional arguments, a checker made once that turns the arguments
straight into the values of the kernel's C parameters, in order, with no `Bound` and no dict.

It checks what `launch_args.bind` checks (dtype, rank, contiguity, writability, the 2**31 element
limit, fixed dimensions, shape symbols against each other, against the grid and against integer
parameters, overlap of a mut array with another, scalar kinds and ranges, broadcasting, the grid)
on arguments of the common kinds only: NumPy arrays (host kernels) or another library's arrays as
`device_arrays` reads them, Python ints, floats and bools, a grid that is None, an int or a tuple.
Anything else, and any check that fails, makes it return None: the caller then launches the usual
way (`Kernel.prepare`), which raises the error it always raised. So this path never reports an
error of its own and accepts nothing the usual one refuses.

The plan is tuples of small ints, made once; a launch runs one closure over them (about two
dozen bytecodes per array), with the shape symbols in a list indexed by number.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np

from tessera.base.errors import LaunchError
from tessera.base.kernel_info import KernelInfo
from tessera.runtime.device_arrays import (
    ADAPTERS,
    DeviceArray,
    ForeignArrayError,
    adapt,
    contiguous_strides,
    reads_cuda_interface,
)
from tessera.runtime.launch_args import (
    INT_RANGES,
    MAX_GRID,
    Shaped,
    _check_scalar,
    broadcast_error,
    map_grid,
    normalize_grid,
    numpy_dtypes,
)

# (C parameter values in order, the grid, the NumPy views of other libraries' host arrays, which
# must outlive the launch)
Checked = tuple[list, tuple[int, int, int], list]
Checker = Callable[[tuple, Any], "Checked | None"]

_LIMIT = 2**31
_FLOAT_INT = 2**53  # an int a float parameter takes as it is (exactly)
_INT, _FLOAT, _BOOL, _OTHER = 0, 1, 2, 3
_FROM_BUFFER = ctypes.c_char.from_buffer
_ADDRESS_OF = ctypes.addressof
_NDARRAY = np.ndarray
_CAI_TYPES: set[type] = set()  # classes `device_arrays` reads by `__cuda_array_interface__`


def _address(value: np.ndarray, writeable: bool) -> int:
    if writeable and value.nbytes:
        try:  # 0.25 us; `__array_interface__` builds a dict (1.2 us)
            return _ADDRESS_OF(_FROM_BUFFER(value))  # type: ignore[arg-type]
        except (TypeError, ValueError, BufferError):
            pass
    return int(value.__array_interface__["data"][0])


def make_checker(info: KernelInfo, nargs: int, device: bool) -> Checker | None:
    """The checker of launches of `info` with `nargs` positional arguments and no keywords, taking
    host arrays (`device` False: NumPy arrays and NumPy views of other libraries' host arrays) or
    device arrays (`device` True: `DeviceArray`s only; NumPy arrays go the usual way, which copies
    them); None where the kernel needs what only the usual way does (shared arrays sized at launch,
    an aligned variant) or `nargs` is not its parameter count."""
    user = [p for p in info.params if p.kind != "shape"]
    if nargs != len(user) or info.smem_sized or info.align_tensors or any(p.name == "grid_groups" for p in user):
        return None
    shape_params = [p.name for p in info.params if p.kind == "shape"]
    names = list(dict.fromkeys([*shape_params, *(d for p in user if p.kind == "tensor" for d in p.dims
                                                  if not isinstance(d, int)), "grid_groups"]))
    symbol = {name: i for i, name in enumerate(names)}  # every shape symbol: the shapes' list indexes
    grid_symbol = symbol["grid_groups"]
    cslot = {p.name: i for i, p in enumerate(info.params)}
    tensors: list[tuple] = []
    scalars = []
    for slot, p in enumerate(user):
        if p.kind == "tensor":
            fixed = tuple((a, d) for a, d in enumerate(p.dims) if isinstance(d, int))
            syms = tuple((a, symbol[d]) for a, d in enumerate(p.dims) if not isinstance(d, int))
            accepted = numpy_dtypes(p.dtype)
            # the `__cuda_array_interface__` typestrs that name an accepted dtype exactly ("<f4")
            typestrs = frozenset(d.str for d in accepted if np.dtype(d.str) == d)
            tensors.append((len(tensors), slot, cslot[p.name], accepted, typestrs, accepted[0].itemsize, len(p.dims),
                            fixed, syms, p.mut))
        else:
            kind = _BOOL if p.dtype == "bool" else _INT if p.dtype in INT_RANGES else \
                _FLOAT if p.dtype in ("f32", "f64") else _OTHER
            lo, hi = INT_RANGES.get(p.dtype, (0, 0))
            scalars.append((slot, cslot[p.name], kind, lo, hi, p))
    tensor_index = {user[t[1]].name: t[0] for t in tensors}
    pairs = tuple((tensor_index[a.name], tensor_index[b.name]) for k, a in enumerate(user) for b in user[k + 1:]
                  if a.kind == "tensor" and b.kind == "tensor" and (a.mut or b.mut)) if info.restrict else ()
    # integer parameters named like a shape symbol must equal it where the arrays or the grid bind it
    tied = tuple((s[1], symbol[user[s[0]].name]) for s in scalars if user[s[0]].name in symbol)
    shape_slots = tuple((cslot[name], symbol[name]) for name in shape_params)
    map_tensor = tensor_index.get(info.map_tensor, -1) if info.map_width else -1
    broadcast = bool(info.map_broadcast)
    nsym, nparams, ntensors = len(names), len(info.params), len(tensors)
    tensors_t, scalars_t = tuple(tensors), tuple(scalars)

    def check(args: tuple, grid: Any) -> Checked | None:
        ext: list[Any] = [None] * nsym
        if type(grid) is int and 0 < grid <= MAX_GRID[0]:
            grid3 = (grid, 1, 1)
        elif grid is None:
            grid3 = None
        else:
            try:
                grid3 = normalize_grid(info.name, grid)
            except LaunchError:
                return None
        if grid3 is not None:
            ext[grid_symbol] = grid3[0] * grid3[1] * grid3[2]
        vals: list[Any] = [None] * nparams
        held: list = []
        starts = [0] * ntensors
        ends = [0] * ntensors
        shape: Any = ()
        map_shape: Any = ()
        for k, slot, c, accepted, typestrs, itemsize, ndim, fixed, syms, mut in tensors_t:
            v = args[slot]
            cls = type(v)
            if cls is _NDARRAY and not device:
                if v.dtype not in accepted or v.ndim != ndim:
                    return None
                flags = v.flags
                writeable = flags.writeable
                if not flags.c_contiguous or (mut and not writeable) or v.size >= _LIMIT:
                    return None
                shape = v.shape
                start = _address(v, writeable)
                nbytes = v.nbytes
            elif device and cls in _CAI_TYPES:  # `device_arrays._from_cai`, inline
                cai = v.__cuda_array_interface__
                start, readonly = cai["data"]
                shape = cai["shape"]
                if cai["typestr"] not in typestrs or type(shape) is not tuple or len(shape) != ndim or \
                        (mut and readonly):
                    return None
                strides = cai.get("strides")
                if strides and not contiguous_strides(shape, tuple(strides), itemsize):
                    return None
                if ndim == 1:
                    count = shape[0]
                else:
                    count = 1
                    for dim in shape:
                        count *= dim
                if count >= _LIMIT:
                    return None
                start = start or 0
                nbytes = count * itemsize
            else:
                try:
                    found = (ADAPTERS.get(cls) or adapt)(v)
                except ForeignArrayError:
                    return None
                if device and reads_cuda_interface(cls):
                    _CAI_TYPES.add(cls)
                if type(found) is _NDARRAY and not device:
                    v = found  # a NumPy view of another library's host memory
                    if v.dtype not in accepted or v.ndim != ndim:
                        return None
                    flags = v.flags
                    writeable = flags.writeable
                    if not flags.c_contiguous or (mut and not writeable) or v.size >= _LIMIT:
                        return None
                    shape = v.shape
                    start = _address(v, writeable)
                    nbytes = v.nbytes
                    held.append(v)
                elif type(found) is DeviceArray and device:
                    start, shape, dtype, contiguous, readonly = found
                    if dtype not in accepted or len(shape) != ndim or not contiguous or (mut and readonly):
                        return None
                    count = 1
                    for dim in shape:
                        count *= dim
                    if count >= _LIMIT:
                        return None
                    nbytes = count * dtype.itemsize
                else:
                    return None
            for axis, want in fixed:
                if shape[axis] != want:
                    return None
            for axis, s in syms:
                got = ext[s]
                if got is None:
                    ext[s] = shape[axis]
                elif got != shape[axis]:
                    return None
            vals[c] = start
            starts[k] = start
            ends[k] = start + nbytes
            if k == map_tensor and grid3 is None:
                map_shape = shape
        for slot, c, kind, lo, hi, p in scalars_t:
            v = args[slot]
            t = type(v)
            if kind == _INT and t is int:
                if not lo <= v <= hi:
                    return None
            elif not ((kind == _FLOAT and (t is float or (t is int and -_FLOAT_INT <= v <= _FLOAT_INT))) or
                      (kind == _BOOL and t is bool)):
                try:
                    v = _check_scalar(info, p, v)
                except LaunchError:
                    return None
            vals[c] = v
        for a, b in pairs:
            a0, a1, b0, b1 = starts[a], ends[a], starts[b], ends[b]
            if a0 < b1 and b0 < a1 and a0 < a1 and b0 < b1:
                return None
        for c, s in tied:
            if ext[s] is not None and vals[c] != ext[s]:
                return None
        for c, s in shape_slots:
            e = ext[s]
            if e is None or e >= _LIMIT:
                return None
            vals[c] = e
        if broadcast and broadcast_error(info, {n: e for n, e in zip(names, ext) if e is not None}) is not None:
            return None
        if grid3 is None:
            if map_tensor >= 0 and ext[grid_symbol] is None:
                grid3 = (map_grid(info, Shaped(map_shape)), 1, 1)
            elif ext[grid_symbol] is not None:
                try:
                    grid3 = normalize_grid(info.name, ext[grid_symbol])
                except LaunchError:
                    return None
            else:
                return None
        return vals, grid3, held

    return check

