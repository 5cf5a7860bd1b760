"""The direct launch's argument checker (runtime/direct_args.py) against the usual one
(runtime/launch_args.py `bind`, the contract's checks), on random kernel signatures and random
arguments, good and bad: wherever `bind` refuses, the checker declines (returns None); wherever
`bind` accepts, the checker gives the same C parameter values and grid, and declines only the
unusual kinds it leaves to the usual way (an ndarray subclass, NumPy arrays on CUDA, a device
array described in an uncommon form)."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.base.errors import LaunchError
from tessera.base.kernel_info import KernelInfo, ParamInfo
from tessera.runtime.direct_args import make_checker
from tessera.runtime.launch_args import bind, numpy_dtypes

TENSOR_TYPES = ("f32", "f64", "i32", "u8", "f16", "i64")
SCALAR_TYPES = ("f32", "f64", "i32", "u8", "i8", "u16", "i64", "u64", "bool", "f16")
SYMBOLS = ("n", "m", "grid_groups")


class Sub(np.ndarray):
    pass


class CudaArray:
    """A device array as CuPy shows it (`__cuda_array_interface__`, a property of the class)."""

    def __init__(self, cai: dict) -> None:
        self.cai = cai

    @property
    def __cuda_array_interface__(self) -> dict:
        return self.cai


def random_info(rng: np.random.Generator) -> KernelInfo:
    user = []
    for k in range(int(rng.integers(1, 4))):
        dims = tuple(rng.choice(SYMBOLS) if rng.random() < 0.7 else int(rng.integers(1, 4))
                     for _ in range(int(rng.integers(1, 3))))
        user.append(ParamInfo(f"t{k}", "tensor", str(rng.choice(TENSOR_TYPES)), tuple(map(_plain, dims)),
                              bool(rng.random() < 0.5)))
    for k in range(int(rng.integers(0, 3))):
        name = str(rng.choice(["n", "m"])) if rng.random() < 0.3 else f"s{k}"
        if any(p.name == name for p in user):
            continue
        user.append(ParamInfo(name, "scalar", "i32" if name in "nm" else str(rng.choice(SCALAR_TYPES)), (), False))
    rng.shuffle(user)
    used = {d for p in user for d in p.dims if isinstance(d, str)} - {"grid_groups"} - {p.name for p in user}
    shapes = [ParamInfo(s, "shape", "i32", (), False) for s in sorted(used)]
    tensors = [p for p in user if p.kind == "tensor"]
    map_tensor = str(rng.choice([p.name for p in tensors])) if rng.random() < 0.3 else ""
    broadcast = tuple(p.name for p in tensors if map_tensor and p.name != map_tensor and rng.random() < 0.5)
    return KernelInfo("k", "k", (*user, *shapes), (32,), 0, (), 1, restrict=bool(rng.random() < 0.8),
                      map_width=4 if map_tensor else 0, map_tensor=map_tensor, map_broadcast=broadcast)


def _plain(d):
    return d if isinstance(d, int) else str(d)


def _scalar(rng: np.random.Generator, p: ParamInfo, binding: dict, bad: bool) -> object:
    r = rng.random()
    if p.name in binding and r < 0.6:
        return binding[p.name] + (1 if bad and rng.random() < 0.2 else 0)
    if not bad:
        return {"bool": True, "f32": 1.5, "f64": -2.0, "f16": 0.25}.get(p.dtype, int(rng.integers(0, 100)))
    choices = [1, 0, -1, 3, 255, 256, 2**31, -(2**31) - 1, 2**63, 2**64, 2**70, 1.5, -2.0, 1e300, True, False,
               np.int32(4), np.uint8(7), np.float32(0.5), "2", None, 2**53 + 1]
    return choices[int(rng.integers(len(choices)))]


def _array(rng: np.random.Generator, p: ParamInfo, shape: tuple, base: np.ndarray, unusual: list,
           bad: bool) -> object:
    dtype = numpy_dtypes(p.dtype)[0]
    nbytes = int(np.prod(shape)) * dtype.itemsize
    if rng.random() < 0.3 and nbytes <= 64:  # a view of a shared buffer: arrays may overlap
        off = 8 * int(rng.integers(0, 8))
        a = base[off:off + nbytes].view(dtype).reshape(shape)
    else:
        a = np.zeros(shape, dtype)
    r = rng.random() if bad else 0.2 + 0.8 * rng.random()
    if r < 0.04:
        return a.astype(np.float64 if dtype != np.float64 else np.float32)
    if r < 0.08:
        return a.reshape(-1) if a.ndim > 1 else a.reshape(1, -1)
    if r < 0.12:
        return np.zeros(tuple(s + 1 for s in shape), dtype)
    if r < 0.16:
        return np.zeros(tuple(s * 2 for s in shape), dtype)[tuple(slice(None, None, 2) for _ in shape)]
    if r < 0.20:
        a.flags.writeable = False
        return a
    if r < 0.23:
        unusual.append("subclass")
        return a.view(Sub)
    if r < 0.26:
        return a.tolist()
    if r < 0.30:
        return memoryview(a) if a.size else a  # another library's host array (the buffer protocol)
    if r < 0.32:
        return 3.0
    return a


def _device(rng: np.random.Generator, p: ParamInfo, shape: tuple, unusual: list, bad: bool) -> object:
    dtype = numpy_dtypes(p.dtype)[0]
    if bad and rng.random() < 0.1:
        unusual.append("numpy on CUDA")
        return np.zeros(shape, dtype)
    typestr = dtype.str
    r = rng.random() if bad else 1.0
    if r < 0.05:
        typestr = ">f4" if typestr != ">f4" else "<f8"
    elif r < 0.1:
        typestr = "=" + typestr[1:]
        unusual.append("typestr")
    elif r < 0.15:
        typestr = "<f8" if typestr != "<f8" else "<f4"
    size = dtype.itemsize
    strides = None
    r = rng.random()
    if r < 0.1:
        strides = tuple(int(np.prod(shape[k + 1:])) * size for k in range(len(shape)))
    elif r < 0.15:
        strides = tuple(2 * int(np.prod(shape[k + 1:])) * size for k in range(len(shape)))
    got_shape: object = tuple(shape)
    r = rng.random() if bad else 1.0
    if r < 0.05:
        got_shape = list(shape)
        unusual.append("list shape")
    elif r < 0.1:
        got_shape = (*shape, 1)
    ptr = int(rng.choice([0x1000, 0x1010, 0x2000, 0x1000 + 4 * int(rng.integers(0, 8))]))
    return CudaArray({"shape": got_shape, "typestr": typestr, "data": (ptr, bad and bool(rng.random() < 0.1)),
                      "strides": strides, "version": 3})


def random_case(rng: np.random.Generator, info: KernelInfo, device: bool) -> tuple[tuple, object, list]:
    binding = {"n": int(rng.choice([0, 1, 2, 5])), "m": int(rng.integers(1, 4)), "grid_groups": int(rng.integers(1, 4))}
    base = np.zeros(128, np.uint8)
    unusual: list = []
    bad = bool(rng.random() < 0.5)
    args = []
    for p in info.params:
        if p.kind == "shape":
            continue
        if p.kind == "tensor":
            shape = tuple(d if isinstance(d, int) else binding[d] for d in p.dims)
            args.append(_device(rng, p, shape, unusual, bad) if device else _array(rng, p, shape, base, unusual, bad))
        else:
            args.append(_scalar(rng, p, binding, bad))
    g = binding["grid_groups"]
    grids = [g, g, None, None, (g, 1, 1), [g], np.int64(g), (g, 2), g + 1, 0, -1, 2**31, "2", (1, 2, 3, 4), (1, 70000)]
    return tuple(args), grids[int(rng.integers(len(grids) if bad else 7))], unusual


def expected(info: KernelInfo, args: tuple, grid: object, device: bool) -> tuple[list, tuple] | None:
    try:
        b = bind(info, args, {}, grid, device_ok=device)
    except LaunchError:
        return None
    vals = [b.address(p.name) if p.kind == "tensor" else b.shapes[p.name] if p.kind == "shape" else b.scalars[p.name]
            for p in info.params]
    return vals, b.grid


def run_cases(seed: int, count: int) -> dict[str, int]:
    rng = np.random.default_rng(seed)
    seen = {"refused": 0, "accepted": 0, "declined": 0}
    for _ in range(count):
        info = random_info(rng)
        device = bool(rng.random() < 0.4)
        check = make_checker(info, sum(p.kind != "shape" for p in info.params), device)
        assert check is not None, info
        for _ in range(4):
            args, grid, unusual = random_case(rng, info, device)
            want = expected(info, args, grid, device)
            got = check(args, grid)
            if want is None:
                assert got is None, (info, args, grid)
                seen["refused"] += 1
            elif got is None:
                assert unusual, ("declined a plain launch", info, args, grid)
                seen["declined"] += 1
            else:
                assert list(got[0]) == want[0] and got[1] == want[1], (info, args, grid, got, want)
                seen["accepted"] += 1
    return seen


def test_random_arguments_checked_as_bind_checks_them() -> None:
    seen = run_cases(seed=31, count=300)
    assert seen["refused"] > 200 and seen["accepted"] > 200 and seen["declined"] > 10, seen


@pytest.mark.parametrize("nargs", [1, 3])
def test_no_checker_where_the_usual_way_is_needed(nargs: int) -> None:
    t = ParamInfo("x", "tensor", "f32", ("n",), True)
    plain = KernelInfo("k", "k", (t, ParamInfo("n", "shape", "i32", (), False)), (32,), 0, (), 1)
    assert (make_checker(plain, nargs, False) is None) == (nargs != 1)
    sized = KernelInfo("k", "k", (t,), (32,), 0, (), 1, smem_sized=(("s", 4, ("n",), 0),))
    aligned = KernelInfo("k", "k", (t,), (32,), 0, (), 1, align_tensors=("x",))
    assert make_checker(sized, 1, False) is None and make_checker(aligned, 1, True) is None
