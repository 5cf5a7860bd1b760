"""CUDA launches on other libraries' streams, and unified memory (spec section 17).

Without a GPU, the CUDA backend's Python side runs on `FakeDriver` (bench/interop_launch.py), with
stand-ins for PyTorch and CuPy put in `sys.modules`: which stream each launch, copy, timing and
prefetch goes to, that a launch with device arrays only does not wait, that NumPy arguments are
copied on the launch stream and waited for, and that managed arrays are used in place, with the
driver calls of CUDA 12 and of CUDA 13. With a GPU (`gpu` marker): PyTorch and CuPy arrays on their
current streams and on side streams, the absence of a synchronization (an event recorded right
after a long kernel is not complete), and managed memory.
"""

from __future__ import annotations

import gc
import sys
import types

import numpy as np
import pytest

import tessera
from tessera.runtime import device_arrays, managed
from tessera.runtime.cuda import backend as cuda_backend
from tessera.runtime.cuda import driver
from tessera.runtime.cuda.streams import current_stream, handle_of
from tests.conftest import load_script

il = load_script("bench/interop_launch.py", "interop_launch")
VADD = il.VADD
SPIN = """\
@kernel tile[(32,)]
def spin(x: mut f32[n], iters: i32):
    i = global_linear_id()
    if i < n:
        acc = x[i]
        for k in range(iters):
            acc = acc * 0.9999 + 1.0
        x[i] = acc
"""


@pytest.fixture
def fake(monkeypatch, tmp_path_factory):
    """FakeDriver in place of the driver, a fake device, and CUDA available."""
    drv = il.FakeDriver(peek=3)
    monkeypatch.setattr(driver, "_DRV", drv)
    monkeypatch.setattr(driver, "_DEVICE", driver.Device(0, il.FakeDriver.CUdevice(0), object(), "sm_90", "fake"))
    monkeypatch.setattr(driver, "_LOADED", {})
    monkeypatch.setattr(cuda_backend.CudaBackend, "status", lambda self: (True, "a fake driver"))
    monkeypatch.setattr(device_arrays, "_TORCH_DTYPES", {})
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "streams-cache"))
    monkeypatch.delenv("TESSERA_BACKEND", raising=False)
    return drv


def fake_torch(monkeypatch, raw_stream: bool = True) -> types.ModuleType:
    """A stand-in for PyTorch: CUDA tensors over fake addresses, its current stream 0xA0 + device."""
    torch = types.ModuleType("torch")

    class Tensor:
        is_cuda = True
        dtype = "float32"

        def __init__(self, n: int, ptr: int, device: int = 0) -> None:
            self.shape, self.ptr, self.device_index = (n,), ptr, device

        def data_ptr(self) -> int:
            return self.ptr

        def is_contiguous(self) -> bool:
            return True

        def get_device(self) -> int:
            return self.device_index

    class Stream:
        def __init__(self, handle: int) -> None:
            self.cuda_stream = handle

    torch.Tensor, torch.float32, torch.bfloat16 = Tensor, "float32", "bfloat16"
    torch.cuda = types.SimpleNamespace(Stream=Stream, current_stream=lambda device: Stream(0xB0 + device))
    torch._C = types.SimpleNamespace(**({"_cuda_getCurrentRawStream": lambda device: 0xA0 + device} if raw_stream else {}))
    monkeypatch.setitem(sys.modules, "torch", torch)
    return torch


def fake_cupy(monkeypatch) -> types.ModuleType:
    cupy = types.ModuleType("cupy")

    class ndarray:  # noqa: N801 - CuPy's name
        def __init__(self, n: int, ptr: int) -> None:
            self.shape, self.dtype = (n,), np.dtype(np.float32)
            self.data = types.SimpleNamespace(ptr=ptr)
            self.flags = types.SimpleNamespace(c_contiguous=True)

    class Stream:
        __module__ = "cupy.cuda.stream"

        def __init__(self, ptr: int) -> None:
            self.ptr = ptr

    cupy.ndarray = ndarray
    cupy.cuda = types.SimpleNamespace(Stream=Stream, get_current_stream=lambda: Stream(0xC0))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    return cupy


def launches(drv) -> list[tuple]:
    return [c for c in drv.calls if c[0] == "cuLaunchKernel"]


def work(drv) -> list[str]:
    """The calls made, but those of loading a library at its first launch."""
    return [n for n in drv.names() if n not in ("cuCtxSetCurrent", "cuModuleLoadData", "cuModuleGetFunction")]


# ---- stream= ------------------------------------------------------------------------------------


class ProtocolStream:
    def __init__(self, result) -> None:
        self.result = result

    def __cuda_stream__(self):
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


def test_every_form_of_stream_gives_its_handle(monkeypatch) -> None:
    from cuda.bindings import driver as real

    torch, cupy = fake_torch(monkeypatch), fake_cupy(monkeypatch)
    assert handle_of(0) == 0 and handle_of(2**63) == 2**63
    assert handle_of(real.CUstream(7)) == 7
    assert handle_of(ProtocolStream((0, 9))) == 9
    assert handle_of(torch.cuda.Stream(11)) == 11
    assert handle_of(cupy.cuda.Stream(13)) == 13
    for bad, message in ((-1, "not int"), (True, "not bool"), ("0", "not str"), (1.0, "not float"),
                         (ProtocolStream("x"), "must return \\(version, handle\\)"),
                         (ProtocolStream((0, -5)), "gave -5"), (ProtocolStream(RuntimeError("gone")), "failed: gone"),
                         (torch.cuda.Stream(None), "gave None")):
        with pytest.raises(tessera.LaunchError, match=f"stream=.*{message}" if "not" not in message else "stream="):
            handle_of(bad)


def test_the_current_stream_is_the_owning_librarys(monkeypatch) -> None:
    assert current_stream([il.FakeCudaArray(4, 0x1000)]) == 0  # no owner: the default stream
    torch = fake_torch(monkeypatch)
    assert current_stream([il.FakeCudaArray(4, 0x1000), torch.Tensor(4, 0x2000, device=2)]) == 0xA2
    cupy = fake_cupy(monkeypatch)
    assert current_stream([cupy.ndarray(4, 0x3000), torch.Tensor(4, 0x2000)]) == 0xC0  # the first owned array
    fake_torch(monkeypatch, raw_stream=False)
    assert current_stream([sys.modules["torch"].Tensor(4, 0x2000, device=1)]) == 0xB1  # torch.cuda.current_stream


# ---- launches on the fake driver ----------------------------------------------------------------


def test_device_arrays_launch_on_the_default_stream_without_waiting(fake) -> None:
    mod = tessera.compile(VADD, backend="cuda", arch="sm_90")
    x, y, out = il.FakeCudaArray(1000, 0x1000000), il.FakeCudaArray(1000, 0x2000000), il.FakeCudaArray(1000, 0x3000000)
    for _ in range(2):  # the first launch, then the fast path with reused parameter holders
        mod.vadd(x, y, out, grid=4)
    assert fake.names() == ["cuCtxSetCurrent", "cuModuleLoadData", "cuModuleGetFunction", "cuLaunchKernel",
                            "cuLaunchKernel"]
    for call in launches(fake):
        assert call[2:6] == ((4, 1, 1), (256, 1, 1), 0, 0) and call[-1] == (0x1000000, 0x2000000, 0x3000000)
    mod.vadd(x, y, out, grid=4, stream=ProtocolStream((0, 0x55)))
    assert launches(fake)[-1][5] == 0x55 and "cuStreamSynchronize" not in fake.names()
    with pytest.raises(tessera.LaunchError, match="stream= must be"):
        mod.vadd(x, y, out, grid=4, stream="fast")
    with pytest.raises(tessera.LaunchError, match="timeout= is supported on the CPU backend only"):
        mod.vadd(x, y, out, grid=4, timeout=1.0)


def test_torch_and_cupy_arrays_launch_on_their_current_streams(fake, monkeypatch) -> None:
    torch, cupy = fake_torch(monkeypatch), fake_cupy(monkeypatch)
    mod = tessera.compile(VADD, backend="cuda", arch="sm_90")
    a, b, c = (torch.Tensor(512, 0x1000000 * k, device=1) for k in (1, 2, 3))
    mod.vadd(a, b, c, grid=2)
    assert launches(fake)[-1][5] == 0xA1 and launches(fake)[-1][-1] == (0x1000000, 0x2000000, 0x3000000)
    mod.vadd(*(cupy.ndarray(512, 0x1000000 * k) for k in (4, 5, 6)), grid=2)
    assert launches(fake)[-1][5] == 0xC0
    mod.vadd(a, b, c, grid=2, stream=torch.cuda.Stream(0x77))  # stream= wins
    assert launches(fake)[-1][5] == 0x77
    assert "cuStreamSynchronize" not in fake.names()


def test_numpy_arguments_are_copied_on_the_launch_stream_and_waited_for(fake, monkeypatch) -> None:
    torch = fake_torch(monkeypatch)
    mod = tessera.compile(VADD, backend="cuda", arch="sm_90")
    x, out = np.ones(300, np.float32), np.zeros(300, np.float32)
    y = torch.Tensor(300, 0x5000000)
    fake.calls.clear()
    mod.vadd(x, y, out, grid=2)
    assert work(fake) == ["cuMemAlloc", "cuMemcpyHtoDAsync", "cuMemAlloc", "cuMemcpyHtoDAsync", "cuLaunchKernel",
                     "cuStreamSynchronize", "cuMemcpyDtoH", "cuMemFree", "cuMemFree"]
    stream = 0xA0  # torch's current stream: y is a torch tensor
    assert all(c[-1] == stream for c in fake.calls if c[0] in ("cuMemcpyHtoDAsync", "cuStreamSynchronize"))
    assert launches(fake)[0][5] == stream
    allocated = [c for c in fake.calls if c[0] == "cuMemcpyHtoDAsync"]
    assert launches(fake)[0][-1] == (allocated[0][1], 0x5000000, allocated[1][1])
    fake.calls.clear()
    mod.vadd(x, x, out, grid=2, stream=ProtocolStream((0, 0x99)))  # with stream= too: NumPy waits
    assert [c[-1] for c in fake.calls if c[0] == "cuStreamSynchronize"] == [0x99]


def test_a_failed_launch_names_the_kernel_and_frees_its_copies_after_the_stream(fake) -> None:
    mod = tessera.compile(VADD, backend="cuda", arch="sm_90")
    fake.fail = "cuLaunchKernel"
    x = np.ones(64, np.float32)
    with pytest.raises(tessera.LaunchError, match="vadd: cuLaunchKernel failed: CUDA_ERROR_LAUNCH_FAILED"):
        mod.vadd(x, x, np.zeros(64, np.float32), grid=1)
    names = work(fake)
    assert names.index("cuStreamSynchronize") < names.index("cuMemFree") and names.count("cuMemFree") == 3
    with pytest.raises(tessera.LaunchError, match="vadd: cuLaunchKernel failed"):
        mod.vadd(*(il.FakeCudaArray(64, 0x1000000 * k) for k in (1, 2, 3)), grid=1)


def test_benchmark_and_the_autotuner_time_on_the_launch_stream(fake, monkeypatch) -> None:
    from tessera.autotune import measure

    torch = fake_torch(monkeypatch)
    mod = tessera.compile(VADD, backend="cuda", arch="sm_90")
    args = tuple(torch.Tensor(512, 0x1000000 * k) for k in (1, 2, 3))
    assert mod.vadd.benchmark(*args, grid=2, repeat=3) == 0.5
    assert {c[-1] for c in fake.calls if c[0] == "cuEventRecord"} == {0xA0}
    fake.calls.clear()
    assert measure.measure(mod.vadd, {}, args, {}, 2, 2) == 0.5
    copies = [c for c in fake.calls if c[0] == "cuMemcpyDtoDAsync"]
    assert len(copies) == 1 and copies[0][2] == 0x3000000 and copies[0][-1] == 0xA0  # `out`, on torch's stream
    assert {c[-1] for c in fake.calls if c[0] == "cuEventRecord"} == {0xA0}
    assert launches(fake)[-1][-1][2] == copies[0][1]  # timed on the copy


# ---- unified memory on the fake driver ------------------------------------------------------------


@pytest.mark.parametrize("cuda13", [True, False], ids=["cuda13", "cuda12"])
def test_managed_arrays_are_used_in_place_prefetched_and_advised(monkeypatch, tmp_path_factory, cuda13) -> None:
    drv = il.FakeDriver(peek=3, location_api=cuda13)
    monkeypatch.setattr(driver, "_DRV", drv)
    monkeypatch.setattr(driver, "_DEVICE", driver.Device(0, il.FakeDriver.CUdevice(0), object(), "sm_90", "fake"))
    monkeypatch.setattr(driver, "_LOADED", {})
    monkeypatch.setattr(cuda_backend.CudaBackend, "status", lambda self: (True, "a fake driver"))
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "streams-cache"))
    mod = tessera.compile(VADD, backend="cuda", arch="sm_90")
    x, y = tessera.managed_empty(100, np.float32, backend="cuda"), tessera.managed_zeros((100,), "f32", backend="cuda")
    out = tessera.managed_empty(100, "f32", backend="cuda")
    x[:] = 2.0
    address = lambda a: a.__array_interface__["data"][0]  # noqa: E731
    assert [c[1] for c in drv.calls if c[0] == "cuMemAllocManaged"] == [400, 400, 400] and (y == 0).all()
    drv.calls.clear()
    mod.vadd(x, y, out, grid=1)
    assert work(drv) == ["cuLaunchKernel", "cuStreamSynchronize"]  # no copies, and the host may read: it waits
    assert launches(drv)[0][-1] == (address(x), address(y), address(out))
    drv.calls.clear()
    tessera.prefetch(x)
    tessera.prefetch(out[10:20], "cpu", stream=ProtocolStream((0, 0x42)))
    for hint in ("device", "host", "read_mostly"):
        tessera.advise(y, hint)
    (p1, p2), advice = [c for c in drv.calls if c[0] == "cuMemPrefetchAsync"], [c for c in drv.calls if c[0] == "cuMemAdvise"]
    assert p1[1:3] == (address(x), 400) and p2[1:3] == (address(out) + 40, 40) and (p1[-1], p2[-1]) == (0, 0x42)
    assert [a[3] for a in advice] == [drv.CUmem_advise.CU_MEM_ADVISE_SET_PREFERRED_LOCATION] * 2 + \
        [drv.CUmem_advise.CU_MEM_ADVISE_SET_READ_MOSTLY]
    if cuda13:
        where = [(c[3].type, c[3].id) for c in (p1, p2)] + [(a[4].type, a[4].id) for a in advice[:2]]
        kind = drv.CUmemLocationType
        assert where == [(kind.CU_MEM_LOCATION_TYPE_DEVICE, 0), (kind.CU_MEM_LOCATION_TYPE_HOST, 0),
                         (kind.CU_MEM_LOCATION_TYPE_DEVICE, 0), (kind.CU_MEM_LOCATION_TYPE_HOST, 0)]
        assert p1[4] == 0  # flags
    else:
        assert [int(p1[3]), int(p2[3]), int(advice[0][4]), int(advice[1][4])] == [0, -1, 0, -1]
    start = address(x)
    drv.calls.clear()
    del x
    gc.collect()
    assert ("cuMemFree", start) in drv.calls and managed.find(y) == "cuda"


def test_a_misaligned_managed_view_gets_the_generic_variant(fake) -> None:
    """Managed arrays are used in place on CUDA, so their own alignment picks the variant (NumPy
    arrays are copied to fresh, aligned allocations)."""
    from tests.conftest import ROOT

    mod = tessera.load(ROOT / "samples" / "elementwise.tsr", backend="cuda", arch="sm_90")
    x = tessera.managed_zeros(1025, np.float32, backend="cuda")
    assert mod.vadd_f32.prepare((x[:1024], x[:1024], np.zeros(1024, np.float32)), {}).info.aligned
    assert not mod.vadd_f32.prepare((x[1:], x[1:], np.zeros(1024, np.float32)), {}).info.aligned
    assert mod.vadd_f32.prepare((np.zeros(1025, np.float32)[1:],) * 2 + (np.zeros(1024, np.float32),), {}).info.aligned


def test_the_driver_signature_is_read_from_the_installed_bindings() -> None:
    import cuda.bindings
    from cuda.bindings import driver as real

    from tessera.runtime.cuda.managed import takes_location

    cuda13 = int(cuda.bindings.__version__.split(".")[0]) >= 13
    assert takes_location(real.cuMemPrefetchAsync) is cuda13 and takes_location(real.cuMemAdvise) is cuda13


# ---- on a GPU ---------------------------------------------------------------------------------------

ITERS = 1 << 22  # the spin kernel's loop: tens of milliseconds on one thread of any GPU


def _torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    return torch


@pytest.mark.gpu
def test_torch_tensors_run_on_the_current_stream_without_waiting(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    torch = _torch_cuda()
    mod = tessera.compile(SPIN + VADD, backend="cuda")
    z = torch.zeros(32, device="cuda")
    torch.cuda.synchronize()
    mod.spin(z, ITERS, grid=1)
    done = torch.cuda.Event()
    done.record()  # on torch's current stream, behind the kernel
    assert not done.query(), "the launch waited for the kernel"
    torch.cuda.synchronize()
    assert done.query() and bool((z > 1000).all())
    side = torch.cuda.Stream()
    y, out = torch.zeros(4096, device="cuda"), torch.zeros(4096, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        mod.spin(z, ITERS, grid=1)
        y.fill_(3.0)             # queued behind the spin on the side stream
        mod.vadd(y, y, out, grid=16)  # must run after the fill: on the side stream too
        assert not side.query()
    side.synchronize()
    assert bool((out == 6.0).all())
    mod.spin(z, ITERS, grid=1, stream=side)
    assert not side.query()
    side.synchronize()
    mod.vadd(y, y, out, grid=16, stream=side.cuda_stream)  # a raw handle
    side.synchronize()
    assert bool((out == 6.0).all())
    assert mod.vadd.benchmark(y, y, out, grid=16, repeat=3) > 0


@pytest.mark.gpu
def test_cupy_arrays_run_on_cupys_current_stream(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    cupy = pytest.importorskip("cupy")
    mod = tessera.compile(SPIN + VADD, backend="cuda")
    z, y, out = cupy.zeros(32, cupy.float32), cupy.zeros(4096, cupy.float32), cupy.zeros(4096, cupy.float32)
    cupy.cuda.Device().synchronize()
    side = cupy.cuda.Stream(non_blocking=True)
    with side:
        mod.spin(z, ITERS, grid=1)
        y.fill(3.0)
        mod.vadd(y, y, out, grid=16)
        assert not side.done
    side.synchronize()
    assert bool((out == 6.0).all())
    mod.spin(z, ITERS, grid=1, stream=side)
    assert not side.done
    side.synchronize()


@pytest.mark.gpu
def test_numpy_arguments_still_wait_and_managed_memory_is_used_in_place(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    mod = tessera.compile(SPIN + VADD, backend="cuda")
    z = np.zeros(32, np.float32)
    mod.spin(z, 1000, grid=1)
    assert (z > 100).all()  # copied back: the call waited
    x = tessera.managed_empty((4096,), np.float32, backend="cuda")
    y = tessera.managed_zeros(4096, "f32", backend="cuda")
    out = tessera.managed_empty(4096, np.float32, backend="cuda")
    x[:] = np.arange(4096, dtype=np.float32)
    tessera.advise(x, "read_mostly")
    tessera.advise(y, "device")
    tessera.advise(out, "host")
    tessera.prefetch(x, "gpu")
    tessera.prefetch(y)
    mod.vadd(x, y, out, grid=16)
    assert np.array_equal(out, x)
    tessera.prefetch(out, "cpu")
    with pytest.raises(tessera.TesseraError, match="advise\\(\\): array: the array is not in memory allocated"):
        tessera.advise(np.zeros(4, np.float32), "host")
