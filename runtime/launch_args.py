"""Launch arguments: checking what the user passed against a kernel's parameters and binding
shape symbols and the grid. One implementation for every backend: nothing is launched and
nothing is written unless every check passes; each error names the parameter."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from tessera.base.errors import LaunchError
from tessera.base.kernel_info import KernelInfo, ParamInfo

INT_RANGES = {"i8": (-(2**7), 2**7 - 1), "i16": (-(2**15), 2**15 - 1), "i32": (-(2**31), 2**31 - 1),
              "i64": (-(2**63), 2**63 - 1), "u8": (0, 2**8 - 1), "u16": (0, 2**16 - 1), "u32": (0, 2**32 - 1),
              "u64": (0, 2**64 - 1)}
MAX_GRID = (2**31 - 1, 65535, 65535)


@functools.cache
def numpy_dtypes(tsr_type: str) -> tuple[np.dtype, ...]:
    """NumPy dtypes accepted for a .tsr element type (bf16: ml_dtypes' bfloat16, or raw uint16 bits)."""
    if tsr_type == "bf16":
        out = [np.dtype(np.uint16)]
        try:
            import ml_dtypes

            out.insert(0, np.dtype(ml_dtypes.bfloat16))
        except ImportError:
            pass
        return tuple(out)
    from tessera.base.dtypes import SCALARS

    return (np.dtype(SCALARS[tsr_type].numpy),)


def tsr_type_of(dtype: Any) -> str | None:
    """The .tsr element type of a NumPy dtype (uint16 is u16: bf16 bits bind a type parameter only
    by name, `T="bf16"`, unless the dtype is marked bf16: runtime/dlpack.py `bf16_dtype`), or None."""
    from tessera.base.dtypes import SCALARS

    dt = np.dtype(dtype)
    if dt.name == "bfloat16" or (dt.metadata is not None and dt.metadata.get("tsr") == "bf16"):
        return "bf16"
    return next((t for t, s in SCALARS.items() if t != "bf16" and np.dtype(s.numpy) == dt), None)


def _type_argument(kernel: str, name: str, value: Any) -> str:
    """`T="f16"`, `T=np.float16` or `T=np.dtype("float16")` given at a launch: a .tsr type name."""
    from tessera.base.dtypes import SCALARS

    if isinstance(value, str) and value in SCALARS:
        return value
    try:
        found = None if isinstance(value, str) and not value.strip() else tsr_type_of(value)
    except TypeError:
        found = None
    if found is None:
        raise LaunchError(f"{kernel}(): type parameter '{name}' must be a .tsr scalar type ({', '.join(SCALARS)}) "
                          f"or a NumPy dtype of one, not {value!r}"[:400])
    return found


def dtype_name(dt: np.dtype) -> str:
    """A dtype as messages name it (bf16 data marked on uint16 is "bfloat16")."""
    return "bfloat16" if tsr_type_of(dt) == "bf16" else str(dt)


def _array_dtype(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.dtype
    from tessera.runtime.device_arrays import ForeignArrayError, adapt

    try:
        found = adapt(value)
    except ForeignArrayError:
        return None  # bind() reports it
    return None if found is None else found.dtype


def bind_types(kernel: str, generic: dict[str, Any], args: tuple, kwargs: dict[str, Any]) -> dict[str, str]:
    """The binding of a generic kernel's type parameters for a launch (popping `T=` keywords from
    `kwargs`): each type parameter takes the element type of the first array argument whose parameter
    has it (or the `T=` keyword), and every other array with it must agree. A scalar argument never
    binds a type parameter (a Python float has no element type). `generic`: {"params": [[name,
    allowed or None], ...], "uses": [[parameter, type parameter or "", is a tensor], ...]} in order."""
    params = [(str(n), tuple(a) if a is not None else None) for n, a in generic["params"]]
    uses = [(str(p), str(t), bool(tensor)) for p, t, tensor in generic["uses"]]
    out: dict[str, str] = {}
    origin: dict[str, str] = {}
    for name, _ in params:
        if name in kwargs:
            out[name] = _type_argument(kernel, name, kwargs.pop(name))
            origin[name] = f"{name}={out[name]!r}"
    values = dict(zip((p for p, _, _ in uses), args))
    values.update({k: v for k, v in kwargs.items() if k not in values})
    for pname, tname, tensor in uses:
        if not tname or not tensor or pname not in values:
            continue
        dt = _array_dtype(values[pname])
        if dt is None:
            continue  # not an array: bind() reports it
        if tname in out:
            if dt not in numpy_dtypes(out[tname]):
                raise LaunchError(f"{kernel}(): type parameter '{tname}' is {out[tname]} from {origin[tname]}, but "
                                  f"parameter '{pname}' has dtype {dtype_name(dt)}; every argument of type {tname} "
                                  "must agree")
            continue
        found = tsr_type_of(dt)
        if found is None:
            raise _fail(kernel, pname, f"dtype {dt} is no .tsr element type, so it cannot bind '{tname}'")
        out[tname] = found
        origin[tname] = f"parameter '{pname}' (dtype {dtype_name(dt)})"
    for name, allowed in params:
        if name not in out:
            raise LaunchError(f"{kernel}(): type parameter '{name}' is not bound: no array argument has it as its "
                              f"element type (a Python scalar has none); pass it by keyword: {name}='f32'")
        if allowed is not None and out[name] not in allowed:
            raise LaunchError(f"{kernel}(): type parameter '{name}' is {out[name]} from {origin[name]}, which is not "
                              f"one of its allowed types ({', '.join(allowed)})")
    return out


@dataclass
class Bound:
    """Checked arguments in the kernel's C parameter order."""

    grid: tuple[int, int, int]
    arrays: dict[str, Any]        # tensor parameter -> the user's array (or device object)
    scalars: dict[str, int | float | bool]
    shapes: dict[str, int]
    smem: int = 0                 # dynamic shared memory bytes: constant arrays, then launch-sized ones
    # Where each array's data starts (host or device address), read once (`__array_interface__`
    # builds a dict: 3 us) for the overlap check, the alignment check and the launch: (the array,
    # its address), so that a user of the address can tell whether `arrays` still holds that array
    # (see `address`).
    addresses: dict[str, tuple[Any, int]] = field(default_factory=dict)

    def address(self, name: str) -> int:
        """Where the array of tensor parameter `name` now in `arrays` starts."""
        a = self.arrays[name]
        known = self.addresses.get(name)
        if known is not None and known[0] is a:
            return known[1]
        if isinstance(a, np.ndarray):
            return int(a.__array_interface__["data"][0])
        from tessera.runtime.device_arrays import describe

        return describe(a).ptr


def broadcast_error(info: KernelInfo, shapes: dict[str, int]) -> str | None:
    """Why a map kernel's tensors do not broadcast to its map tensor's shape (NumPy's rule: aligned
    from the last, each dimension the same or 1), or None. Only dimensions that are shape symbols
    other than the map's can fail here; the compiler decided the rest."""
    if not info.map_broadcast:
        return None
    params = {p.name: p for p in info.params}

    def shape(name: str) -> tuple[int, ...]:
        return tuple(d if isinstance(d, int) else shapes[d] for d in params[name].dims)

    out = shape(info.map_tensor)
    for t in info.map_broadcast:
        got = shape(t)
        if len(got) > len(out) or any(g not in (1, o) for g, o in zip(reversed(got), reversed(out))):
            return (f"{info.name}(): parameter '{t}' has shape {got}, which does not broadcast to the shape {out} of "
                    f"'{info.map_tensor}' (aligned from the last, each dimension must be the same or 1)")
    return None


def _fail(kernel: str, param: str, message: str) -> LaunchError:
    return LaunchError(f"{kernel}(): parameter '{param}': {message}")


def normalize_grid(kernel: str, grid: Any) -> tuple[int, int, int]:
    if type(grid) is int and 1 <= grid <= MAX_GRID[0]:  # the common launch, without the checks' 1.5 us
        return grid, 1, 1
    dims = (grid,) if isinstance(grid, (int, np.integer)) else tuple(grid) if isinstance(grid, (tuple, list)) else None
    if dims is None or not 1 <= len(dims) <= 3 or not all(isinstance(d, (int, np.integer)) for d in dims):
        raise LaunchError(f"{kernel}(): grid must be an int or a tuple of 1 to 3 ints, not {grid!r}")
    full = [int(d) for d in dims] + [1] * (3 - len(dims))
    for d, limit in zip(full, MAX_GRID):
        if not 1 <= d <= limit:
            raise LaunchError(f"{kernel}(): grid dimension {d} is out of range (1..{limit})")
    return full[0], full[1], full[2]


def _check_array(info: KernelInfo, p: ParamInfo, value: Any, shapes: dict[str, int], origin: dict[str, str],
                 device_ok: bool) -> tuple[Any, int, int]:
    """(what the launch keeps, where its data starts, its size in bytes): a NumPy array as it is,
    another library's host array as a NumPy view of it, a device array as it is (on CUDA)."""
    if isinstance(value, np.ndarray):
        _check_layout(info, p, value, shapes, origin)
        return value, int(value.__array_interface__["data"][0]), value.nbytes
    from tessera.runtime.device_arrays import ForeignArrayError, adapt

    try:
        found = adapt(value)
    except ForeignArrayError as e:
        raise _fail(info.name, p.name, f"cannot take this {type(value).__name__}: {e}") from None
    if isinstance(found, np.ndarray):
        _check_layout(info, p, found, shapes, origin)
        return found, int(found.__array_interface__["data"][0]), found.nbytes  # the caller's memory, in place
    if found is None or not device_ok:
        what = "a NumPy or CUDA array" if device_ok else \
            "a NumPy array (or another array in host memory, with DLPack or the buffer protocol)"
        where = ", which is in CUDA device memory (the CPU backend takes host arrays)" if found is not None else ""
        raise _fail(info.name, p.name, f"expected {what} of {p.dtype}, got {type(value).__name__}{where}")
    _check_layout(info, p, found, shapes, origin)
    return value, found.ptr, found.size * found.dtype.itemsize


def _check_layout(info: KernelInfo, p: ParamInfo, value: Any, shapes: dict[str, int], origin: dict[str, str]) -> None:
    """dtype, rank, contiguity, writability and shape symbols of a NumPy array or a DeviceArray."""
    accepted = numpy_dtypes(p.dtype)
    if value.dtype not in accepted:
        names = " or ".join(str(d) for d in accepted)
        raise _fail(info.name, p.name, f"expected dtype {names} ({p.dtype}), got {dtype_name(value.dtype)}")
    if len(value.shape) != len(p.dims):
        raise _fail(info.name, p.name, f"expected {len(p.dims)} dimension{'s' if len(p.dims) != 1 else ''}, "
                    f"got an array of shape {value.shape}")
    contiguous = value.flags.c_contiguous if isinstance(value, np.ndarray) else value.c_contiguous
    writeable = value.flags.writeable if isinstance(value, np.ndarray) else not value.readonly
    if not contiguous:
        raise _fail(info.name, p.name, "the array is not C-contiguous; pass np.ascontiguousarray(...)")
    if p.mut and not writeable:
        raise _fail(info.name, p.name, "the array is read-only but the parameter is mut")
    if value.size >= 2**31:
        raise _fail(info.name, p.name, f"arrays are limited to 2**31 - 1 elements, this one has {value.size}")
    for axis, (want, got) in enumerate(zip(p.dims, value.shape)):
        if isinstance(want, int):
            if got != want:
                raise _fail(info.name, p.name, f"dimension {axis} must be {want}, got {got}")
            continue
        if want in shapes and shapes[want] != got:
            raise _fail(info.name, p.name, f"shape symbol '{want}' is {got} here but {shapes[want]} from "
                        f"{origin[want]}")
        shapes[want] = got
        origin.setdefault(want, f"'{p.name}' dimension {axis}")


def _check_scalar(info: KernelInfo, p: ParamInfo, value: Any) -> int | float | bool:
    if isinstance(value, np.generic):
        value = value.item()
    if p.dtype == "bool":
        if not isinstance(value, bool):
            raise _fail(info.name, p.name, f"expected a bool, got {type(value).__name__}")
        return value
    if p.dtype in INT_RANGES:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _fail(info.name, p.name, f"expected an integer ({p.dtype}), got {type(value).__name__}")
        lo, hi = INT_RANGES[p.dtype]
        if not lo <= value <= hi:
            raise _fail(info.name, p.name, f"{value} is out of range for {p.dtype} ({lo}..{hi})")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(info.name, p.name, f"expected a number ({p.dtype}), got {type(value).__name__}")
    if p.dtype in ("f16", "bf16"):
        from tessera.base.dtypes import SCALARS, round_to

        return round_to(float(value), SCALARS[p.dtype])  # passed as a float holding an f16/bf16 value
    return float(value)


def _check_overlap(info: KernelInfo, params: list[ParamInfo], ranges: dict[str, tuple[int, int]]) -> None:
    """The kernel declares its tensor parameters __restrict__: a mut array may not share memory
    with any other array argument (the results would depend on the compiler's optimizations).
    `ranges`: [start, end) of each tensor argument's elements (host or device addresses)."""
    tensors = [p for p in params if p.kind == "tensor"]
    for i, a in enumerate(tensors):
        for b in tensors[i + 1:]:
            if not (a.mut or b.mut):
                continue
            (a0, a1), (b0, b1) = ranges[a.name], ranges[b.name]
            if a0 < a1 and b0 < b1 and a0 < b1 and b0 < a1:
                mut = a.name if a.mut else b.name
                raise LaunchError(f"{info.name}(): parameters '{a.name}' and '{b.name}' overlap in memory and "
                                  f"'{mut}' is mut; the kernel assumes its arrays do not alias (__restrict__): "
                                  f"pass separate arrays, or compile with restrict=False")


class Shaped(NamedTuple):
    """What `map_grid` reads of an array: its shape (a device array may have no `.shape`)."""

    shape: tuple[int, ...]


def map_shape(info: KernelInfo, shapes: dict[str, int]) -> Shaped:
    """The shape of a map kernel's map tensor, from its dimensions and the bound shape symbols."""
    dims = next(p.dims for p in info.params if p.name == info.map_tensor)
    return Shaped(tuple(d if isinstance(d, int) else shapes[d] for d in dims))


def map_grid(info: KernelInfo, array: Any) -> int:
    """The grid of a map kernel launched without one: enough groups for every element (`map_width`
    per tile), at least one, at most the grid's limit (the kernel strides over the rest)."""
    count = math.prod(int(d) for d in array.shape)
    per_group = math.prod(info.tile) * info.map_width
    return max(1, min(-(-count // per_group), MAX_GRID[0]))


def bind(info: KernelInfo, args: tuple, kwargs: dict[str, Any], grid: Any, device_ok: bool = False) -> Bound:
    """Check `args`/`kwargs` against `info`; raises LaunchError naming the parameter."""
    user = [p for p in info.params if p.kind != "shape"]
    if len(args) > len(user):
        raise LaunchError(f"{info.name}() takes {len(user)} arguments ({', '.join(p.name for p in user)}), "
                          f"got {len(args)}")
    values: dict[str, Any] = {p.name: a for p, a in zip(user, args)}
    for name, v in kwargs.items():
        if not any(p.name == name for p in user):
            raise LaunchError(f"{info.name}() got an unexpected keyword argument '{name}'")
        if name in values:
            raise LaunchError(f"{info.name}() got two values for parameter '{name}'")
        values[name] = v
    missing = [p.name for p in user if p.name not in values]
    if missing:
        raise LaunchError(f"{info.name}() is missing argument{'s' if len(missing) > 1 else ''}: {', '.join(missing)}")
    shapes: dict[str, int] = {}
    origin: dict[str, str] = {}
    explicit = normalize_grid(info.name, grid) if grid is not None else None
    if explicit is not None:
        shapes["grid_groups"] = explicit[0] * explicit[1] * explicit[2]
        origin["grid_groups"] = "the grid"
    arrays: dict[str, Any] = {}
    scalars: dict[str, int | float | bool] = {}
    addresses: dict[str, tuple[Any, int]] = {}
    ranges: dict[str, tuple[int, int]] = {}
    for p in user:
        if p.kind == "tensor":
            kept, start, nbytes = _check_array(info, p, values[p.name], shapes, origin, device_ok)
            arrays[p.name] = kept
            addresses[p.name] = (kept, start)
            ranges[p.name] = (start, start + nbytes)
        else:
            scalars[p.name] = _check_scalar(info, p, values[p.name])
    if info.restrict:
        _check_overlap(info, user, ranges)
    for name, extent in shapes.items():
        if name in scalars and scalars[name] != extent:
            raise LaunchError(f"{info.name}(): parameter '{name}' is {scalars[name]} but {origin[name]} is {extent}")
    for p in info.params:
        if p.kind == "shape" and p.name not in shapes:
            raise LaunchError(f"{info.name}(): shape symbol '{p.name}' is not bound by any argument")
        if p.kind == "shape" and shapes[p.name] >= 2**31:
            raise LaunchError(f"{info.name}(): shape symbol '{p.name}' = {shapes[p.name]} does not fit in i32")
    why = broadcast_error(info, shapes)
    if why is not None:
        raise LaunchError(why)
    if explicit is None and info.map_width and "grid_groups" not in shapes:
        explicit = (map_grid(info, map_shape(info, shapes)), 1, 1)
    if explicit is None:
        if "grid_groups" not in shapes:
            raise LaunchError(f"{info.name}(): no grid given and no parameter's shape uses grid_groups; "
                              f"pass grid=N or launch as {info.name}[N](...)")
        explicit = normalize_grid(info.name, shapes["grid_groups"])
    return Bound(explicit, arrays, scalars, shapes, shared_bytes(info, scalars), addresses)


def shared_bytes(info: KernelInfo, scalars: dict[str, int | float | bool]) -> int:
    """The dynamic shared memory of a launch: the constant part, then each launch-sized array
    (16-byte aligned), its dimensions from the integer parameters."""
    total = info.dynamic_smem
    for name, size, dims, pad in info.smem_sized:
        count = 1
        for k, d in enumerate(dims):
            n = int(scalars[d]) if isinstance(d, str) else d
            if n < 1:
                raise LaunchError(f"{info.name}(): parameter '{d}' = {n} sizes the shared array '{name}'; "
                                  "it must be at least 1")
            count *= n + (pad if k == len(dims) - 1 else 0)
        total += -(-count * size // 16) * 16
    return total


def check_shared(info: KernelInfo, bound: Bound, limit: int, device: str) -> None:
    """A launch whose shared memory is over `limit` is refused, naming the launch-sized arrays."""
    if bound.smem <= limit:
        return
    sized = ", ".join(f"'{n}' [{', '.join(f'{d} = {bound.scalars[d]}' if isinstance(d, str) else str(d) for d in dims)}]"
                      for n, _, dims, _ in info.smem_sized)
    raise LaunchError(f"{info.name}(): the group needs {bound.smem} bytes of shared memory ({info.dynamic_smem} for "
                      f"the constant arrays, the rest for {sized}), over the {limit} bytes {device} allows")
