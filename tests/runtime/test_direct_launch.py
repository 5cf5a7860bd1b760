"""Direct launches (`Kernel.__call__`'s first try; runtime/direct_args.py, the backends' `direct`):
a repeated launch with positional arguments skips `Kernel.prepare`, passes every value as the
usual launch does (C types of every size, packed at their alignment), and declines to the usual
way for anything else, which reports errors as before. The Python calls a launch makes are
counted (an upper bound, against the 45 and 64 calls of the launch before direct launches)."""

from __future__ import annotations

import gc
import sys

import numpy as np
import pytest

import tessera
from tessera.api import Kernel
from tessera.runtime.cuda import backend as cuda_backend
from tessera.runtime.cuda import driver
from tests.conftest import load_script

il = load_script("bench/interop_launch.py", "interop_launch")

ECHO = """@kernel tile[(1,)]
def echo(a: f32, b: i8, fo: mut f64[4], c: f64, d: u16, e: bool, io: mut i64[n], f: i64, g: f16):
    fo[0] = f64(a)
    fo[1] = c
    fo[2] = f64(g)
    io[0] = i64(b)
    io[1] = i64(d)
    io[2] = f
    if e:
        io[3] = 1
    else:
        io[3] = 0
"""
TINY = "@kernel tile[(32,)]\ndef tiny(x: mut f32[n]):\n    i = tile_linear_id()\n    if i < n:\n        x[i] = x[i] + 1.0\n"
MAP = "@kernel tile[(64,)]\ndef twice(x: f32[n], y: mut f32[n]):\n    y[:] = 2.0 * x\n"


@pytest.fixture
def counted(monkeypatch) -> list:
    """The launches that went the usual way (`Kernel.prepare`)."""
    calls: list = []
    usual = Kernel.prepare

    def prepare(self, *a, **k):
        calls.append(self.name)
        return usual(self, *a, **k)

    monkeypatch.setattr(Kernel, "prepare", prepare)
    return calls


@pytest.fixture
def fake(monkeypatch, tmp_path_factory):
    drv = il.FakeDriver(peek=3)
    monkeypatch.setattr(driver, "_DRV", drv)
    monkeypatch.setattr(driver, "_DEVICE", driver.Device(0, il.FakeDriver.CUdevice(0), object(), "sm_90", "fake"))
    monkeypatch.setattr(driver, "_LOADED", {})
    monkeypatch.setattr(cuda_backend.CudaBackend, "status", lambda self: (True, "a fake driver"))
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "direct-cache"))
    monkeypatch.delenv("TESSERA_BACKEND", raising=False)
    return drv


def python_calls(fn, tries: int = 3) -> int:
    """The Python and builtin function calls `fn()` makes: the fewest of `tries` calls, with the
    garbage collector off (a collection inside the call runs finalizers of objects other tests
    left behind, and their calls were counted: a full CI run once saw 25 where a launch makes 18)."""
    counts: list[int] = []
    seen = [0]

    def profile(frame, event, arg):
        if event in ("call", "c_call"):
            seen[0] += 1

    for _ in range(tries):
        seen[0] = 0
        gc.collect()
        gc.disable()
        sys.setprofile(profile)
        try:
            fn()
        finally:
            sys.setprofile(None)
            gc.enable()
        counts.append(seen[0])
    return min(counts)


@pytest.mark.usefixtures("shared_cache")
def test_random_scalars_reach_the_kernel_as_the_usual_launch_passes_them(counted) -> None:
    m = tessera.compile(ECHO, backend="cpu")
    rng = np.random.default_rng(32)
    floats = [0.0, -1.5, 3.4e38, 1e300, -1e300, 1e-45, 6e4, 7e4, 2.0**53 + 1, 5, -(2**60)]
    fo, io = np.zeros(4), np.zeros(4, np.int64)
    for i in range(40):
        args = (rng.choice(floats), int(rng.integers(-128, 128)), fo, rng.choice(floats), int(rng.integers(0, 65536)),
                bool(rng.integers(2)), io, int(rng.integers(-(2**63), 2**63 - 1, dtype=np.int64)), rng.choice(floats))
        args = tuple(a.item() if isinstance(a, np.generic) else a for a in args)
        m.echo(*args, grid=1)
        direct = fo.copy(), io.copy()
        lib, info, bound = m.echo.prepare(args, {}, grid=1)  # the usual launch
        fo[:], io[:] = 0, 0
        lib.launch(info, bound)
        assert np.array_equal(direct[0], fo, equal_nan=True) and np.array_equal(direct[1], io), (i, args)
    assert counted.count("echo") == 1 + 40  # the first launch and the usual ones above


@pytest.mark.usefixtures("shared_cache")
def test_repeated_launches_skip_prepare_and_unusual_ones_take_it(counted) -> None:
    m = tessera.compile(TINY + "\n" + MAP, backend="cpu")
    x = np.zeros(64, np.float32)
    for _ in range(3):
        m.tiny(x, grid=2)
        m.tiny[2](x)
    assert counted == ["tiny"] and np.all(x[:32] == 12) and np.all(x[32:] == 0)  # each group adds to x[:32]
    m.tiny(x=x, grid=2)  # by keyword: the usual way
    with pytest.raises(tessera.LaunchError, match="parameter 'x': expected dtype float32"):
        m.tiny(x.astype(np.float64), grid=2)
    with pytest.raises(tessera.LaunchError, match="parameter 'x': the array is read-only"):
        ro = x.copy()
        ro.flags.writeable = False
        m.tiny(ro, grid=2)
    assert counted == ["tiny"] * 4 and np.all(x[:32] == 14)
    y = np.zeros(1000, np.float32)
    src = np.arange(1000, dtype=np.float32)
    for _ in range(2):  # a map kernel without a grid
        m.twice(src, y)
    assert np.array_equal(y, 2 * src) and counted.count("twice") == 1
    mv = np.zeros(1000, np.float32)
    m.twice(src, memoryview(mv))  # another library's host array, written in place
    assert np.array_equal(mv, 2 * src) and counted.count("twice") == 1


@pytest.mark.usefixtures("shared_cache")
def test_a_cpu_launch_makes_few_python_calls(monkeypatch) -> None:
    monkeypatch.setenv("TESSERA_CPU_THREADS", "1")
    k = tessera.compile(TINY, backend="cpu").tiny
    x = np.zeros(32, np.float32)
    for _ in range(2):
        k[1](x)
    assert python_calls(lambda: k(x, grid=1)) <= 30  # 45 before direct launches
    assert np.all(x == 5)  # two warm-up launches, three counted


def test_a_mocked_cuda_launch_makes_few_python_calls(fake, monkeypatch) -> None:
    k = tessera.compile(il.VADD, backend="cuda", arch="sm_90").vadd
    args = tuple(il.FakeCudaArray(256, 0x1000000 * i) for i in (1, 2, 3))
    for _ in range(2):  # the usual launch, then the first direct one (which learns the arrays' class)
        k(*args, grid=1)
    fake.record = False  # the fake driver's own record of the call, with its ctypes reads, aside
    # Where torch or CuPy is imported (by another test in this worker), a launch with no stream=
    # also asks which library owns the arrays (streams.current_stream): 24-25 calls. Counted here
    # as in a process without them.
    with monkeypatch.context() as hidden:
        for name in ("torch", "cupy"):
            hidden.delitem(sys.modules, name, raising=False)
        assert python_calls(lambda: k(*args, grid=1)) <= 24  # 64 before direct launches
    fake.record = True
    fake.calls.clear()
    k(*args, grid=1)
    assert fake.calls == [("cuLaunchKernel", "vadd", (1, 1, 1), (256, 1, 1), 0, 0, (0x1000000, 0x2000000, 0x3000000))]


def test_direct_cuda_launches_take_streams_and_decline_numpy(fake, counted) -> None:
    m = tessera.compile(il.VADD + "\n" + MAP, backend="cuda", arch="sm_90")
    args = tuple(il.FakeCudaArray(512, 0x1000000 * i) for i in (1, 2, 3))
    for stream in (None, 7, None):
        m.vadd(*args, grid=2, stream=stream)
    assert [c[5] for c in fake.calls if c[0] == "cuLaunchKernel"] == [0, 7, 0] and counted == ["vadd"]
    with pytest.raises(tessera.LaunchError, match="stream= must be"):  # the stream is read after the arguments
        m.vadd(*args, grid=2, stream="fast")
    fake.calls.clear()
    m.vadd(np.ones(512, np.float32), *args[1:], grid=2)  # NumPy: copied, and waited for, the usual way
    assert "cuStreamSynchronize" in fake.names() and counted == ["vadd"] * 2
    with pytest.raises(tessera.LaunchError, match="parameter 'out': the array is read-only"):
        m.vadd(*args[:2], il.FakeCudaArray(512, 0x3000000, readonly=True), grid=2)


def test_a_map_kernel_on_device_arrays_without_a_grid(fake) -> None:
    """The grid comes from the map tensor's described shape (a device array may have no `.shape`)."""
    m = tessera.compile(MAP, backend="cuda", arch="sm_90")
    for _ in range(2):
        m.twice(il.FakeCudaArray(1000, 0x1000000), il.FakeCudaArray(1000, 0x2000000))
    grids = [c[2] for c in fake.calls if c[0] == "cuLaunchKernel"]
    assert len(grids) == 2 and grids[0] == grids[1] and grids[0][0] >= 1


@pytest.mark.torch
@pytest.mark.usefixtures("shared_cache")
def test_repeated_launches_on_torch_cpu_tensors(counted) -> None:
    import torch

    m = tessera.compile(MAP, backend="cpu")
    x = torch.arange(300, dtype=torch.float32)
    y = torch.zeros(300)
    for k in range(3):
        m.twice(x + k, y)
        assert torch.equal(y, 2 * (x + k))
    assert counted == ["twice"]
    with pytest.raises(tessera.LaunchError, match="parameter 'y'"):
        m.twice(x, torch.zeros(300, dtype=torch.float64))


def test_distributed_tensors_go_the_usual_way_and_plain_arrays_stay_direct(counted) -> None:
    """A dist tensor is no array to the direct launcher: it declines, and the usual launch runs the
    kernel on the process's shard (`local_shards`). Importing the distributed layer leaves the
    direct launches of plain arrays on (it once turned them off for the whole process)."""
    from tessera import dist

    mesh = dist.Mesh(axes=["tp"], devices=range(1))
    k = tessera.compile(TINY, backend="cpu").tiny
    x = np.zeros(32, np.float32)
    t = dist.from_numpy(np.zeros(32, np.float32), None, mesh, name="T", backend="cpu")
    for _ in range(3):
        k(x, grid=1)
    assert counted == ["tiny"]  # the first launch went the usual way, the next two directly
    k(t, grid=1)
    assert counted == ["tiny"] * 2 and np.all(t.local == 1) and np.all(x == 3)
    k(x, grid=1)
    assert counted == ["tiny"] * 2 and np.all(x == 4)
