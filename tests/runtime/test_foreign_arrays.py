"""Other libraries' CPU arrays on the CPU backend (spec section 17): every argument rule with arrays
that are not NumPy arrays (array-api-strict's, memoryviews, a DLPack producer written here, PyTorch
CPU tensors under the `torch` marker), writes through `mut` seen by the caller's object, bf16 through
DLPack, and a seeded differential generator: the same launch with each kind of array against plain
NumPy arrays and a NumPy model of the kernel."""

from __future__ import annotations

import ctypes
import random

import numpy as np
import pytest

import tessera
from tessera.base.kernel_info import KernelInfo, ParamInfo
from tessera.runtime import bind_plan, dlpack
from tessera.runtime.bind_plan import fast_bind
from tessera.runtime.launch_args import bind

try:
    import array_api_strict as xp  # the test extra has it; the GPU machine's image may not
except ImportError:
    xp = None
needs_xp = pytest.mark.skipif(xp is None, reason="needs array-api-strict (pip install array-api-strict)")

SCALE = """\
@kernel tile[(32,)]
def scale(x: f32[n], w: f32[4], y: mut f32[n], s: f32):
    i = global_linear_id()
    if i < n:
        acc = 0.0
        for j in range(4):
            if w[j] > 0.0:
                acc += w[j] * x[i]
        y[i] = acc + s

@kernel tile[(32,)]
def rows(a: f32[r, c], out: mut f32[r]):
    i = global_linear_id()
    if i < r:
        t = 0.0
        for j in range(c):
            t += a[i, j]
        out[i] = t

@kernel tile[(32,)]
def bump(b: mut u8[n]):
    i = global_linear_id()
    if i < n:
        b[i] = b[i] + 1

@kernel tile[(32,)]
def twice[T](x: T[n], y: mut T[n]):
    i = global_linear_id()
    if i < n:
        y[i] = x[i] + x[i]

@kernel tile[(32,)]
def twice_bf16(x: bf16[n], y: mut bf16[n]):
    i = global_linear_id()
    if i < n:
        y[i] = x[i] + x[i]
"""


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    import os

    old = os.environ.get("TESSERA_CACHE_DIR")
    os.environ["TESSERA_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    try:
        yield tessera.compile(SCALE, backend="cpu")
    finally:
        if old is None:
            os.environ.pop("TESSERA_CACHE_DIR", None)
        else:
            os.environ["TESSERA_CACHE_DIR"] = old


# ---- a DLPack producer: any element type code, device, version and read-only flag -----------------

class _Legacy(ctypes.Structure):
    _fields_ = [("dl_tensor", dlpack.DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_NEW_CAPSULE = ctypes.pythonapi.PyCapsule_New
_NEW_CAPSULE.restype = ctypes.py_object
_NEW_CAPSULE.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_LEGACY_NAME, _VERSIONED_NAME = b"dltensor", b"dltensor_versioned"
_ALIVE: list = []  # what the capsules point to, for as long as the tests run (a consumer may outlive its producer)


class Producer:
    """Exports the memory of a NumPy array through DLPack as told: element type `code`/`bits`
    (DLPack's), `device` type, versioned (DLPack 1.0, with the read-only flag) or legacy, with or
    without `__dlpack_device__`. Capsules have no destructor and no deleter: what they point to is
    kept in `_ALIVE`, the data by the caller."""

    def __init__(self, array: np.ndarray, *, code: int | None = None, bits: int | None = None, device: int = 1,
                 versioned: bool = True, readonly: bool = False, ptr: int | None = None) -> None:
        self.array, self.device, self.versioned, self.readonly, self.ptr = array, device, versioned, readonly, ptr
        self.code = code if code is not None else {"i": 0, "u": 1, "f": 2, "b": 6}[array.dtype.kind]
        self.bits = bits if bits is not None else array.dtype.itemsize * 8

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        a = self.array
        shape = (ctypes.c_int64 * max(1, a.ndim))(*a.shape)
        strides = (ctypes.c_int64 * max(1, a.ndim))(*(s // a.itemsize for s in a.strides))
        t = dlpack.DLTensor()
        t.data = self.ptr if self.ptr is not None else a.__array_interface__["data"][0]
        t.device.device_type, t.device.device_id = self.device, 0
        t.ndim = a.ndim
        t.dtype.code, t.dtype.bits, t.dtype.lanes = self.code, self.bits, 1
        t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
        if self.versioned and max_version is not None and max_version[0] >= 1:
            m = dlpack.DLManagedTensorVersioned(major=1, minor=0, flags=int(self.readonly), dl_tensor=t)
            name = _VERSIONED_NAME
        else:
            m, name = _Legacy(dl_tensor=t), _LEGACY_NAME
        _ALIVE.extend((shape, strides, m))
        return _NEW_CAPSULE(ctypes.addressof(m), name, None)

    def __dlpack_device__(self):
        return (self.device, 0)


class OnlyDLPack:
    """`__dlpack__` without `__dlpack_device__` (the device is read from the capsule)."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()


def _raises(match: str, fn, *args, **kwargs) -> None:
    with pytest.raises(tessera.LaunchError, match=match):
        fn(*args, **kwargs)


# ---- every rule, with arrays that are not NumPy arrays -----------------------------------------


@needs_xp
def test_mut_writes_are_seen_by_the_callers_objects(mod) -> None:
    x = np.arange(70, dtype=np.float32)
    w = np.array([1, -1, 2, 0], np.float32)
    expected = x * 3 + 0.5
    for make in (lambda a: xp.asarray(a), lambda a: memoryview(a), lambda a: Producer(a), lambda a: OnlyDLPack(a)):
        y = np.zeros(70, np.float32)
        out = make(y)
        mod.scale(make(x.copy()), make(w.copy()), out, 0.5, grid=3)
        assert np.array_equal(np.from_dlpack(out) if hasattr(out, "__dlpack__") else np.asarray(out), expected)
    raw = bytearray(5)
    mod.bump(raw, grid=1)  # the buffer protocol: a bytearray is a mut u8[5]
    assert raw == bytearray([1] * 5)


@needs_xp
def test_dtype_rank_fixed_dims_and_shape_symbols_as_for_numpy(mod) -> None:
    f32 = lambda n: xp.zeros(n, dtype=xp.float32)  # noqa: E731
    w = f32(4)
    _raises(r"parameter 'x': expected dtype float32 \(f32\), got float64", mod.scale,
            xp.zeros(8, dtype=xp.float64), w, f32(8), 1.0, grid=1)
    _raises(r"parameter 'x': expected 1 dimension, got an array of shape \(2, 4\)", mod.scale,
            xp.zeros((2, 4), dtype=xp.float32), w, f32(8), 1.0, grid=1)
    _raises(r"parameter 'w': dimension 0 must be 4, got 5", mod.scale, f32(8), f32(5), f32(8), 1.0, grid=1)
    _raises(r"parameter 'y': shape symbol 'n' is 9 here but 8 from 'x' dimension 0", mod.scale,
            f32(8), w, memoryview(np.zeros(9, np.float32)), 1.0, grid=1)
    _raises(r"parameter 'a': expected dtype float32 \(f32\), got int32", mod.rows,
            Producer(np.zeros((3, 2), np.int32)), f32(3), grid=1)
    _raises(r"parameter 'out': shape symbol 'r' is 4 here but 3 from 'a' dimension 0", mod.rows,
            OnlyDLPack(np.zeros((3, 2), np.float32)), f32(4), grid=1)


@needs_xp
def test_contiguity_and_writability_as_for_numpy(mod) -> None:
    a = np.zeros((4, 6), np.float32)
    out = xp.zeros(6, dtype=xp.float32)
    _raises(r"parameter 'a': the array is not C-contiguous", mod.rows, memoryview(a[:, ::2]), xp.zeros(4, dtype=xp.float32),
            grid=1)
    _raises(r"parameter 'a': the array is not C-contiguous", mod.rows, Producer(a.T), out, grid=1)  # dense, F order
    _raises(r"parameter 'b': the array is read-only but the parameter is mut", mod.bump, b"abc", grid=1)
    frozen = np.zeros(3, np.uint8)
    frozen.flags.writeable = False
    _raises(r"parameter 'b': the array is read-only but the parameter is mut", mod.bump, memoryview(frozen), grid=1)
    _raises(r"parameter 'b': the array is read-only but the parameter is mut", mod.bump,
            Producer(np.zeros(3, np.uint8), readonly=True), grid=1)
    mod.rows(memoryview(frozen.view(np.uint8)[:0].astype(np.float32).reshape(0, 1)), out[:0], grid=1)  # empty arrays
    ro = np.ones((2, 3), np.float32)
    ro.flags.writeable = False
    res = np.zeros(2, np.float32)
    mod.rows(Producer(ro, readonly=True), memoryview(res), grid=1)  # read-only is fine where not mut
    assert np.array_equal(res, [3, 3])


def test_what_cannot_be_taken_is_a_launch_error_naming_the_parameter(mod) -> None:
    y, w = np.zeros(4, np.float32), np.zeros(4, np.float32)
    _raises(r"parameter 'x': expected a NumPy array .* of f32, got list", mod.scale, [0.0] * 4, w, y, 1.0, grid=1)
    _raises(r"parameter 'x': expected a NumPy array .* got Producer, which is in CUDA device memory", mod.scale,
            Producer(np.zeros(4, np.float32), device=2, ptr=0x7000), w, y, 1.0, grid=1)
    _raises(r"parameter 'x': cannot take this Producer: it is in memory of DLPack device type 4", mod.scale,
            Producer(np.zeros(4, np.float32), device=4), w, y, 1.0, grid=1)
    _raises(r"parameter 'x': cannot take this Producer: its DLPack element type \(code 2, 8 bits, 1 lanes\) is no "
            r"\.tsr element type", mod.scale, Producer(np.zeros(4, np.uint8), code=2, bits=8), w, y, 1.0, grid=1)
    _raises(r"parameter 'x': expected dtype float32 \(f32\), got complex64", mod.scale,
            Producer(np.zeros(4, np.float32), code=5, bits=64), w, y, 1.0, grid=1)  # NumPy's own reader's dtype

    class Refuses:
        def __dlpack__(self, stream=None, max_version=None):
            raise BufferError("no export today")

        def __dlpack_device__(self):
            return (1, 0)

    _raises(r"parameter 'x': cannot take this Refuses: its __dlpack__\(\) failed: BufferError: no export today",
            mod.scale, Refuses(), w, y, 1.0, grid=1)
    x = np.zeros(8, np.float32)
    _raises(r"parameters 'x' and 'y' overlap in memory", mod.scale, memoryview(x[:4]), w, Producer(x[2:6]), 1.0,
            grid=1)


def test_bf16_through_dlpack(mod) -> None:
    rng = np.random.default_rng(0)
    f = rng.standard_normal(50).astype(np.float32)
    bits = (f.view(np.uint32) >> 16).astype(np.uint16)  # truncated to bf16: exact when doubled
    expected = (((bits.astype(np.uint32) << 16).view(np.float32)) * 2).view(np.uint32) >> 16
    for versioned in (True, False):
        x = Producer(bits, code=4, bits=16, versioned=versioned)
        out = np.zeros(50, np.uint16)
        mod.twice_bf16(x, Producer(out, code=4, bits=16, versioned=versioned), grid=2)
        assert np.array_equal(out, expected)
        out[:] = 0
        mod.twice(x, Producer(out, code=4, bits=16), grid=2)  # binds T = bf16, not u16
        assert np.array_equal(out, expected)
        assert mod.twice.info(T="bf16").name == "twice"
    _raises(r"parameter 'x': expected dtype float32 \(f32\), got bfloat16", mod.scale, Producer(bits, code=4, bits=16),
            np.zeros(4, np.float32), np.zeros(50, np.float32), 1.0, grid=2)
    _raises(r"type parameter 'T' is bf16 from parameter 'x' \(dtype bfloat16\), but parameter 'y' has dtype float32",
            mod.twice, Producer(bits, code=4, bits=16), np.zeros(50, np.float32), grid=2)


@needs_xp
def test_foreign_arrays_take_the_fast_path(monkeypatch) -> None:
    """Host arrays of other libraries are checked by the kernel's plan, not by the slow `bind`."""
    info = KernelInfo("k", "k", (ParamInfo("x", "tensor", "f32", ("n",)), ParamInfo("y", "tensor", "f32", ("n",), True),
                                 ParamInfo("n", "shape", "i32")), (32,), 0, (), 1)
    y = np.zeros(10, np.float32)
    args = (xp.zeros(10, dtype=xp.float32), memoryview(y))
    expected = bind(info, args, {}, 2)
    monkeypatch.setattr(bind_plan, "bind", lambda *a, **k: pytest.fail("the fast path fell back to bind"))
    got = fast_bind(info, args, {}, 2)
    assert got.shapes == expected.shapes == {"grid_groups": 2, "n": 10}
    assert got.address("y") == expected.address("y") == y.__array_interface__["data"][0]
    assert all(type(a) is np.ndarray for a in got.arrays.values())


def test_host_arrays_on_the_cuda_backend_are_numpy_views_to_copy() -> None:
    """On CUDA a host array of another library is a NumPy view (copied in and out like NumPy)."""
    info = KernelInfo("k", "k", (ParamInfo("y", "tensor", "f32", ("n",), True), ParamInfo("n", "shape", "i32")),
                      (32,), 0, (), 1)
    y = np.zeros(6, np.float32)
    for b in (bind(info, (Producer(y),), {}, 1, device_ok=True), fast_bind(info, (Producer(y),), {}, 1, device_ok=True)):
        assert type(b.arrays["y"]) is np.ndarray and np.shares_memory(b.arrays["y"], y)


# ---- PyTorch CPU tensors -----------------------------------------------------------------------


@pytest.mark.torch
def test_torch_cpu_tensors_in_place(mod) -> None:
    import torch

    x = torch.arange(70, dtype=torch.float32)
    w = torch.tensor([1.0, 0.0, 0.0, 0.0])
    y = torch.zeros(80)[5:75]  # a view with a storage offset
    mod.scale(x, w, y, 1.0, grid=3)
    assert torch.equal(y, x + 1)
    xb = torch.linspace(-3, 3, 50).to(torch.bfloat16)
    yb = torch.zeros(50, dtype=torch.bfloat16)
    mod.twice(xb, yb, grid=2)
    assert torch.equal(yb, xb * 2)
    mod.twice_bf16(xb, yb, grid=2)
    assert torch.equal(yb, xb * 2)
    _raises(r"parameter 'x': cannot take this Tensor: .*require", mod.scale, torch.ones(70, requires_grad=True), w, y,
            1.0, grid=3)
    _raises(r"parameter 'a': the array is not C-contiguous", mod.rows, torch.zeros(3, 4).T, torch.zeros(4), grid=1)
    _raises(r"parameter 'y': expected dtype float32 \(f32\), got float64", mod.scale, x, w, torch.zeros(70,
            dtype=torch.float64), 1.0, grid=3)


@pytest.mark.torch
@pytest.mark.parametrize("doc", ["README.md", "docs/language.md"])
def test_the_documented_pytorch_example_runs(doc, shared_cache) -> None:
    from tests.conftest import ROOT

    text = (ROOT / doc).read_text()
    start = text.index("```python\nimport torch, tessera\n") + len("```python\n")
    exec(compile(text[start:text.index("```", start)], doc, "exec"), {})  # its own assert checks the result


# ---- the differential generator ----------------------------------------------------------------

KINDS = ("memoryview", "array_api", "producer", "legacy", "only_dlpack", "torch")
DEFECTS = ("none", "none", "none", "dtype", "rank", "length", "strided", "transposed", "readonly")


def _wrap(kind: str, a: np.ndarray):
    if kind == "memoryview":
        return memoryview(a)
    if kind == "array_api":
        return xp.asarray(a)
    if kind == "producer":
        return Producer(a, readonly=not a.flags.writeable)
    if kind == "legacy":
        return Producer(a, versioned=False)
    if kind == "only_dlpack":
        return OnlyDLPack(a)
    import torch

    return torch.from_numpy(a)


def _can_carry(kind: str, a: np.ndarray) -> bool:
    """Whether this kind of array can show `a` as it is (layout, read-only flag, dtype)."""
    if not a.flags.writeable and kind in ("array_api", "legacy", "only_dlpack", "torch"):
        return False  # no read-only flag there (NumPy refuses a legacy export; torch copies or warns)
    if kind == "array_api" and (not a.flags.c_contiguous or a.dtype == np.float16):
        return False  # array-api-strict may copy, and has no float16
    return not (kind == "torch" and any(s < 0 for s in a.strides))


def _read(obj) -> np.ndarray:
    if isinstance(obj, memoryview):
        return np.asarray(obj)
    if isinstance(obj, (Producer, OnlyDLPack)):
        return obj.array
    return np.from_dlpack(obj)


def _case(rng: random.Random, n: int, defect: str, target: str) -> dict[str, np.ndarray]:
    arrays = {"x": np.arange(n, dtype=np.float32) - n / 3, "w": np.array([rng.choice([-1.0, 0.5, 2.0]) for _ in range(4)],
                                                                        np.float32),
              "y": np.zeros(n, np.float32)}
    a = arrays[target]
    if defect == "dtype":
        a = a.astype(rng.choice([np.float64, np.int32, np.float16]))
    elif defect == "rank":
        a = np.zeros((1, a.size), a.dtype) + a
    elif defect == "length":
        a = np.zeros(a.size + rng.choice([-1, 1]), a.dtype)
    elif defect == "strided":
        a = np.repeat(a, 2)[::2]
    elif defect == "transposed":
        a = np.zeros((1, a.size), a.dtype).T.reshape(a.size, 1)[:, 0] if rng.random() < 0.5 else a[::-1]
    elif defect == "readonly":
        a = a.copy()
        a.flags.writeable = False
    arrays[target] = a
    return arrays


def _outcome(mod, arrays: dict[str, np.ndarray], kinds: dict[str, str] | None, s: float, grid: int):
    """(error message or None, y as the caller sees it after the launch)."""
    given = {k: (v if kinds is None else _wrap(kinds[k], v)) for k, v in arrays.items()}
    try:
        mod.scale(given["x"], given["w"], given["y"], s, grid=grid)
    except tessera.LaunchError as e:
        return str(e), None
    return None, (arrays["y"] if kinds is None else _read(given["y"])).copy()


def run_differential(mod, seed: int, count: int) -> dict[str, int]:
    """`count` random launches of `scale`, each with random kinds of arrays and at most one defect,
    against the same launch with NumPy arrays and against the NumPy model; returns counts."""
    rng = random.Random(seed)
    kinds = [k for k in KINDS if (k != "torch" or _has_torch()) and (k != "array_api" or xp is not None)]
    seen = {"ran": 0, "refused": 0}
    for _ in range(count):
        n, s = rng.randint(1, 90), rng.choice([0.0, 1.5, -2.0])
        defect, target, state = rng.choice(DEFECTS), rng.choice("xwy"), rng.getstate()
        arrays = _case(rng, n, defect, target)
        rng.setstate(state)
        base = _case(rng, n, defect, target)  # the same arrays again, same layouts, for the NumPy launch
        chosen = {k: rng.choice([c for c in kinds if _can_carry(c, v)] or ["memoryview"]) for k, v in arrays.items()}
        grid = rng.randint(1, 4)
        want = _outcome(mod, base, None, s, grid)
        got = _outcome(mod, arrays, chosen, s, grid)
        assert got[0] == want[0], f"{chosen}: {got[0]} != {want[0]}"
        if want[0] is None:
            assert got[1] is not None and want[1] is not None
            covered = min(n, grid * 32)
            w = arrays["w"]
            model = np.zeros(n, np.float32)
            model[:covered] = sum(wj * arrays["x"][:covered] for wj in w if wj > 0) + np.float32(s)
            np.testing.assert_allclose(got[1], want[1], rtol=0, atol=0, err_msg=str(chosen))
            np.testing.assert_allclose(got[1], model, rtol=1e-6, atol=1e-5, err_msg=str(chosen))
            seen["ran"] += 1
        else:
            seen["refused"] += 1
    return seen


def _has_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def test_random_foreign_arrays_behave_as_numpy_arrays(mod) -> None:
    seen = run_differential(mod, seed=31, count=60)
    assert seen["ran"] >= 15 and seen["refused"] >= 10, seen
