"""The CUDA backend. Without a GPU: NVRTC images for every sample, their cache (hits,
concurrency), and argument packing checked against the kernels' PTX parameter lists. With a
GPU (`@pytest.mark.gpu`): every sample on the device against NumPy, and CUDA Array Interface /
DLPack arguments used in place."""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import tessera
from samples.runner import CASES, check_kernel
from tessera.base.options import CompileOptions
from tessera.runtime.cuda import driver as cuda_backend
from tessera.runtime.launch_args import Bound
from tessera.transpile.driver import compile_source, load_source
from tests.conftest import ROOT, SAMPLES, sample_of

_PTX_SIZES = {"u64": 8, "s64": 8, "b64": 8, "f64": 8, "u32": 4, "s32": 4, "b32": 4, "f32": 4,
              "u16": 2, "s16": 2, "b16": 2, "u8": 1, "s8": 1, "b8": 1}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "cache"))


def _ptx_params(ptx: str, kernel: str) -> list[int]:
    m = re.search(r"\.entry\s+" + re.escape(kernel) + r"\s*\((.*?)\)", ptx, re.S)
    assert m, f"no .entry {kernel} in the PTX"
    return [_PTX_SIZES[t] for t in re.findall(r"\.param\s+\.(\w+)", m.group(1))]


def _dummy_bound(info) -> Bound:
    scalars = {p.name: (True if p.dtype == "bool" else 1) for p in info.params if p.kind == "scalar"}
    shapes = {p.name: 7 for p in info.params if p.kind == "shape"}
    return Bound((1, 1, 1), {}, scalars, shapes)


@pytest.mark.parametrize("path", SAMPLES + [ROOT / "tests" / "programs" / "features.tsr"], ids=lambda p: p.stem)
def test_argument_packing_matches_the_ptx_parameter_list(path) -> None:
    from tessera.runtime.cuda.nvrtc import compile_cuda

    result = compile_source(load_source(str(path)), options=CompileOptions(arch="sm_80"))
    ptx = compile_cuda(result.cuda, arch="sm_80", cubin=False).ptx
    for info in result.kernels:
        pointers = {p.name: 0x1000 for p in info.params if p.kind == "tensor"}
        packed = cuda_backend.pack_params(info, _dummy_bound(info), pointers)
        assert [ctypes.sizeof(v) for v in packed] == _ptx_params(ptx, info.c_name)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_sample_has_a_cached_device_image(arch, monkeypatch) -> None:
    for path in SAMPLES:
        cuda = compile_source(load_source(str(path)), options=CompileOptions(arch=arch)).cuda
        key, image = cuda_backend.compile_for_device(cuda, arch)
        assert image[:4] == b"\x7fELF"
        assert cuda_backend.load_image(key) == image

    def no_nvrtc(*a, **k):
        raise AssertionError("NVRTC called on a cache hit")

    monkeypatch.setattr("tessera.runtime.cuda.nvrtc.compile_cuda", no_nvrtc)
    for path in SAMPLES:
        cuda = compile_source(load_source(str(path)), options=CompileOptions(arch=arch)).cuda
        assert cuda_backend.compile_for_device(cuda, arch)[1][:4] == b"\x7fELF"


def test_newer_architecture_than_nvrtc_falls_back_to_ptx() -> None:
    from tessera.runtime.cuda.nvrtc import supported_archs

    newest = max(supported_archs())
    cuda = compile_source(load_source(str(ROOT / "samples" / "sum_reduce.tsr"))).cuda
    _, image = cuda_backend.compile_for_device(cuda, f"sm_{newest + 10}")
    assert image.startswith(b"//") and image.endswith(b"\x00")  # PTX text for the JIT in the driver


def test_eight_processes_compile_the_same_kernels_with_a_cold_cache(tmp_path, monkeypatch) -> None:
    code = ("import sys\n"
            "from tessera.base.options import CompileOptions\n"
            "from tessera.transpile.driver import compile_source, load_source\n"
            "from tessera.runtime.cuda.driver import compile_for_device\n"
            "for p in sys.argv[1:]:\n"
            "    key, image = compile_for_device(compile_source(load_source(p), CompileOptions(arch='sm_80')).cuda, 'sm_80')\n"
            "    assert image[:4] == b'\\x7fELF'\n")
    env = dict(os.environ, TESSERA_CACHE_DIR=str(tmp_path / "shared"), PYTHONWARNINGS="error")
    procs = [subprocess.Popen([sys.executable, "-c", code, *map(str, SAMPLES)], env=env, cwd=ROOT,
                              stderr=subprocess.PIPE, text=True) for _ in range(8)]
    errors = [p.communicate()[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, errors
    from tessera.runtime.cache.disk import DiskCache

    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "shared"))
    cache = DiskCache("cuda")
    assert cache.info()["entries"] == len(SAMPLES)
    for path in SAMPLES:
        cuda = compile_source(load_source(str(path)), options=CompileOptions(arch="sm_80")).cuda
        key, _ = cuda_backend.compile_for_device(cuda, "sm_80")
        assert cache.get_bytes(key) is not None


def test_auto_explains_why_it_chose_the_cpu() -> None:
    from tessera.runtime.devices import cuda_status

    ok, why = cuda_status()
    if ok:
        pytest.skip("a GPU is present")
    mod = tessera.compile("@kernel tile[(32,)]\ndef k(y: mut f32[n]):\n    y[0] = 1.0\n")
    assert mod.backend == "cpu" and mod.backend_reason == f"{why}; using the CPU backend"


# ---- on a GPU --------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CASES))
def test_samples_on_the_device_match_numpy(name: str) -> None:
    mod = tessera.load(sample_of(name), backend="cuda")
    ok, message = check_kernel(mod, name, seed=2)
    assert ok, message


@pytest.mark.gpu
def test_benchmark_returns_a_median_time() -> None:
    mod = tessera.load(ROOT / "samples" / "sum_reduce.tsr", backend="cuda")
    ms = mod.sum_reduce.benchmark(np.ones(1 << 20, np.float32), np.zeros(8, np.float32), repeat=5)
    assert 0 < ms < 1000


@pytest.mark.gpu
def test_cuda_array_interface_and_dlpack_are_used_in_place() -> None:
    mod = tessera.compile("@kernel tile[(256,)]\ndef k(x: f32[n], y: mut f32[n]):\n"
                          "    i = global_linear_id()\n    if i < n:\n        y[i] = x[i] * 2.0\n", backend="cuda")
    libs = []
    for name in ("cupy", "torch"):
        try:
            libs.append(__import__(name))
        except ImportError:
            continue
    if not libs:
        pytest.skip("neither CuPy nor PyTorch is installed")
    for lib in libs:
        if lib.__name__ == "cupy":
            x = lib.arange(1000, dtype=lib.float32)
            y = lib.zeros(1000, dtype=lib.float32)
            mod.k(x, y, grid=4)  # __cuda_array_interface__
            assert np.array_equal(lib.asnumpy(y), np.arange(1000, dtype=np.float32) * 2)
        else:
            x = lib.arange(1000, dtype=lib.float32, device="cuda")
            y = lib.zeros(1000, dtype=lib.float32, device="cuda")

            class OnlyDLPack:
                def __init__(self, t):
                    self.t = t

                def __dlpack__(self, stream=None):
                    return self.t.__dlpack__()

            mod.k(x, OnlyDLPack(y), grid=4)
            assert np.array_equal(y.cpu().numpy(), np.arange(1000, dtype=np.float32) * 2)


@pytest.mark.gpu
def test_map_kernels_on_misaligned_device_arrays() -> None:
    """A CuPy slice offset by one element is not 16-byte aligned: the generic variant runs, right."""
    cupy = pytest.importorskip("cupy")
    mod = tessera.load(ROOT / "samples" / "elementwise.tsr", backend="cuda")
    n = 1_000_003
    for dtype, name in ((np.float32, "vadd_f32"), (np.float16, "vadd_f16")):
        x = cupy.asarray(np.random.default_rng(1).standard_normal(n + 1).astype(dtype))
        y = cupy.asarray(np.random.default_rng(2).standard_normal(n + 1).astype(dtype))
        z = cupy.zeros(n + 1, dtype)
        mod[name](x[1:], y[1:], z[1:])
        assert np.array_equal(cupy.asnumpy(z[1:]), cupy.asnumpy(x[1:]) + cupy.asnumpy(y[1:]))
        mod[name](x, y, z, grid=3)  # aligned, grid-stride over many steps
        assert np.array_equal(cupy.asnumpy(z), cupy.asnumpy(x) + cupy.asnumpy(y))


@pytest.mark.gpu
def test_copies_from_misaligned_device_views_match_numpy() -> None:
    """The pipelined SGEMM's copies on CuPy views that start one element into their allocation (not
    16-byte aligned: the generic variant, chunks tested at run time) and on aligned ones (the aligned
    variant where K and N allow), with K and N multiples of 16 and not."""
    cupy = pytest.importorskip("cupy")
    mod = tessera.load(ROOT / "samples" / "sgemm_pipelined.tsr", backend="cuda")
    rng = np.random.default_rng(3)

    def on_device(a: np.ndarray, offset: int):
        flat = cupy.zeros(a.size + offset, a.dtype)
        flat[offset:] = cupy.asarray(a.ravel())
        return flat[offset:].reshape(a.shape)

    for (m, n, k), offset in (((200, 136, 72), 1), ((256, 256, 128), 0), ((256, 256, 128), 1), ((130, 40, 17), 0)):
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        c = on_device(np.zeros((m, n), np.float32), offset)
        mod.sgemm(on_device(a, offset), on_device(b, offset), c, BM=64, BN=64, BK=16, stages=3,
                  grid=((n + 63) // 64, (m + 63) // 64))
        np.testing.assert_allclose(cupy.asnumpy(c), a @ b, rtol=1e-4, atol=1e-3, err_msg=f"{m}x{n}x{k} +{offset}")


@pytest.mark.gpu
def test_halo_views_before_the_tensor_read_zero_on_the_device() -> None:
    """A stencil's window starts before the tensor's first row and column (view_edges on the GPU)."""
    mod = tessera.compile("""
@kernel tile[(16, 16)]
def blur(x: f32[M, N], y: mut f32[M, N]):
    win = tshared.alloc(f32[18, 18])
    r0 = group_id(1) * 16
    c0 = group_id(0) * 16
    tcopy(win, x[r0 - 1:r0 - 1 + 18, c0 - 1:c0 - 1 + 18])
    tbarrier()
    r = r0 + tile_id(1)
    c = c0 + tile_id(0)
    if r < M and c < N:
        y[r, c] = (win[tile_id(1), tile_id(0) + 1] + win[tile_id(1) + 2, tile_id(0) + 1]
                   + win[tile_id(1) + 1, tile_id(0)] + win[tile_id(1) + 1, tile_id(0) + 2])
""", backend="cuda")
    x = np.random.default_rng(4).standard_normal((45, 37)).astype(np.float32)
    y = np.zeros_like(x)
    mod.blur(x, y, grid=(3, 3))
    p = np.pad(x, 1)
    np.testing.assert_allclose(y, p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:], rtol=1e-6)


class FakeCudaArray:
    """Just enough of __cuda_array_interface__ to test the checks (no memory behind it)."""

    def __init__(self, shape, typestr="<f4", strides=None, readonly=False, ptr=0x7000):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, readonly),
                                         "strides": strides, "version": 3}


def test_device_arrays_get_the_same_checks_as_numpy_arrays() -> None:
    from tessera.base.kernel_info import KernelInfo, ParamInfo
    from tessera.runtime.launch_args import bind

    info = KernelInfo("k", "k", (ParamInfo("x", "tensor", "f32", ("n",)), ParamInfo("y", "tensor", "f32", ("n",), True),
                                 ParamInfo("n", "shape", "i32")), (32,), 0, (), 1)
    b = bind(info, (FakeCudaArray((10,)), FakeCudaArray((10,), ptr=0x8000)), {}, 1, device_ok=True)
    assert b.shapes == {"grid_groups": 1, "n": 10}
    assert cuda_backend.device_pointer(b.arrays["x"]) == 0x7000
    with pytest.raises(tessera.LaunchError, match="parameters 'x' and 'y' overlap in memory"):
        bind(info, (FakeCudaArray((10,)), FakeCudaArray((10,), ptr=0x7000 + 36)), {}, 1, device_ok=True)
    with pytest.raises(tessera.LaunchError, match="parameter 'x': expected dtype float32"):
        bind(info, (FakeCudaArray((10,), "<f8"), FakeCudaArray((10,))), {}, 1, device_ok=True)
    with pytest.raises(tessera.LaunchError, match="parameter 'y': shape symbol 'n' is 9"):
        bind(info, (FakeCudaArray((10,)), FakeCudaArray((9,))), {}, 1, device_ok=True)
    with pytest.raises(tessera.LaunchError, match="parameter 'y': .*not C-contiguous"):
        bind(info, (FakeCudaArray((10,)), FakeCudaArray((10,), strides=(8,))), {}, 1, device_ok=True)
    with pytest.raises(tessera.LaunchError, match="parameter 'y': the array is read-only"):
        bind(info, (FakeCudaArray((10,)), FakeCudaArray((10,), readonly=True)), {}, 1, device_ok=True)
    with pytest.raises(tessera.LaunchError, match="expected a NumPy array"):
        bind(info, (FakeCudaArray((10,)), FakeCudaArray((10,))), {}, 1, device_ok=False)


def test_a_dlpack_array_in_host_memory_is_refused() -> None:
    from tessera.runtime.device_arrays import describe

    class HostDLPack:
        def __init__(self):
            self.a = np.zeros(4, np.float32)

        def __dlpack__(self, stream=None):
            return self.a.__dlpack__()

    with pytest.raises(tessera.LaunchError, match="not in CUDA device memory"):
        describe(HostDLPack())


def test_a_module_is_loaded_once_per_process(monkeypatch) -> None:
    loads = []

    class FakeLibrary:
        def __init__(self, image, kernels):
            loads.append(image)

    monkeypatch.setattr(cuda_backend, "CudaLibrary", FakeLibrary)
    monkeypatch.setattr(cuda_backend, "_LOADED", {})
    cuda = compile_source(load_source(str(ROOT / "samples" / "sum_reduce.tsr")), options=CompileOptions(arch="sm_80")).cuda
    key, image = cuda_backend.compile_for_device(cuda, "sm_80")
    first = cuda_backend.loaded_library(key, ())
    assert cuda_backend.loaded_library(key, ()) is first and loads == [image]


def test_a_warm_cuda_variant_hands_over_the_image_without_its_cache_tag(monkeypatch) -> None:
    from tessera import api

    monkeypatch.setattr(api, "select_backend", lambda requested: ("cuda", "test"))
    seen = []
    monkeypatch.setattr(cuda_backend, "loaded_library", lambda key, kernels, image=None: seen.append(image) or seen)
    text = (ROOT / "samples" / "sum_reduce.tsr").read_text()
    for _ in range(2):  # cold, then warm from the cache
        mod = api.Module(text.encode(), "s.tsr", "cuda", "sm_80", CompileOptions())
        mod.variant(None, {}).library()
    assert len(seen) == 2 and all(img[:4] == b"\x7fELF" for img in seen)
