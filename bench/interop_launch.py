"""Launch overhead on CUDA with device arrays (issue 31), each figure next to a baseline measured in
the same run (5 rounds of N launches each, the launches taking turns; median and best round):

* with a GPU (PyTorch with CUDA, and Triton for the baseline): a vector add launched through the
  Python API on PyTorch tensors (`k(x, y, out)`: argument checks, PyTorch's current stream, no
  synchronization) vs a Triton launch of the same vector add on the same tensors (goal: <= 1.5x);
  both queue their launches, and the queue is drained after each round;
* without one (or with `--mocked`): the Python side of the same launch, with cuda-bindings' driver
  replaced by `FakeDriver` (every call returns success at once) and the tensors by objects with
  `__cuda_array_interface__` (as CuPy's, built at each access), vs the bare fake `cuLaunchKernel`
  call (the floor: the driver call with its arguments already packed), and vs the same launch on
  NumPy arrays on the CPU backend (the API's other launch path, with its kernel's run) (goal: <= 10
  us a launch).

    python bench/interop_launch.py [--mocked] [--launches N] [--dry-run]

`--dry-run` runs the mocked figure with few launches (CI runs the tests that use `FakeDriver`).
`FakeDriver` is also what tests/runtime/cuda/test_streams.py runs the CUDA backend's Python side on.
"""

from __future__ import annotations

import argparse
import enum
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
VADD = ("@kernel tile[(256,)]\ndef vadd(x: f32[n], y: f32[n], out: mut f32[n]):\n    i = global_linear_id()\n"
        "    if i < n:\n        out[i] = x[i] + y[i]\n")


class FakeDriver:
    """The part of cuda-bindings' driver module the CUDA backend calls, with no GPU: each call is
    recorded in `calls` (its name and arguments; a launch's first `peek` parameters as u64) and
    returns success (or failure, for the call named `fail`); memory is fake addresses
    (`cuMemAllocManaged` gives real host memory, so NumPy can use it). `location_api` chooses the
    CUDA 13 signatures of `cuMemPrefetchAsync`/`cuMemAdvise` (a `CUmemLocation`) over CUDA 12's."""

    class CUresult(enum.IntEnum):
        CUDA_SUCCESS = 0
        CUDA_ERROR_LAUNCH_FAILED = 719

    class CUmemAttach_flags(enum.IntEnum):
        CU_MEM_ATTACH_GLOBAL = 1

    class CUmem_advise(enum.IntEnum):
        CU_MEM_ADVISE_SET_READ_MOSTLY = 1
        CU_MEM_ADVISE_SET_PREFERRED_LOCATION = 3

    class CUmemLocationType(enum.IntEnum):
        CU_MEM_LOCATION_TYPE_DEVICE = 1
        CU_MEM_LOCATION_TYPE_HOST = 2

    class CUdevice_attribute(enum.IntEnum):
        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97

    class CUfunction_attribute(enum.IntEnum):
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8

    class CUmemLocation:
        type: Any = None
        id: int = 0

    class CUdevice(int):
        pass

    CU_DEVICE_CPU = -1

    def __init__(self, record: bool = True, location_api: bool = True, fail: str = "", peek: int = 0) -> None:
        self.calls: list[tuple] = []
        self.record = record
        self.peek = peek  # a launch records the first `peek` kernel parameters as u64 (device pointers)
        self.fail = fail  # the name of a call that returns CUDA_ERROR_LAUNCH_FAILED
        self.next_ptr = 0x10000000
        self.managed: dict[int, Any] = {}
        ok = (self.CUresult.CUDA_SUCCESS,)
        self._ok = ok
        if location_api:
            self.cuMemPrefetchAsync = self._log("cuMemPrefetchAsync", lambda devPtr, count, location, flags, hStream: ok)
            self.cuMemAdvise = self._log("cuMemAdvise", lambda devPtr, count, advice, location: ok)
        else:
            self.cuMemPrefetchAsync = self._log("cuMemPrefetchAsync", lambda devPtr, count, dstDevice, hStream: ok)
            self.cuMemAdvise = self._log("cuMemAdvise", lambda devPtr, count, advice, device: ok)

    def _log(self, name: str, fn: Any) -> Any:
        def call(*args: Any) -> Any:
            if self.record:
                self.calls.append((name, *args))
            if name == self.fail:
                return (self.CUresult.CUDA_ERROR_LAUNCH_FAILED,)
            return fn(*args)

        call.__signature__ = __import__("inspect").signature(fn)  # type: ignore[attr-defined]
        return call

    def __getattr__(self, name: str) -> Any:
        ok = self._ok
        results = {"cuMemAlloc": lambda *a: (ok[0], self._alloc()), "cuEventCreate": lambda *a: (ok[0], object()),
                   "cuEventElapsedTime": lambda *a: (ok[0], 0.5), "cuModuleLoadData": lambda *a: (ok[0], object()),
                   "cuModuleGetFunction": lambda *a: (ok[0], a[1].decode()),
                   "cuDeviceGetAttribute": lambda *a: (ok[0], 227 * 1024),
                   "cuGetErrorName": lambda s: (ok[0], s.name.encode()),
                   "cuGetErrorString": lambda s: (ok[0], b"fake error"),
                   "cuMemAllocManaged": lambda n, flags: (ok[0], self._managed(n))}
        if not name.startswith("cu"):
            raise AttributeError(name)
        fn = self._log(name, results.get(name, lambda *a: ok))
        setattr(self, name, fn)
        return fn

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):  # noqa: N802
        if self.record:
            import ctypes

            argv = (ctypes.c_void_p * max(self.peek, 1)).from_address(params)
            values = tuple(ctypes.c_uint64.from_address(argv[i]).value for i in range(self.peek))
            self.calls.append(("cuLaunchKernel", f, (gx, gy, gz), (bx, by, bz), smem, stream, values))
        return (self.CUresult.CUDA_ERROR_LAUNCH_FAILED,) if self.fail == "cuLaunchKernel" else self._ok

    def _alloc(self) -> int:
        self.next_ptr += 1 << 20
        return self.next_ptr

    def _managed(self, n: int) -> int:
        import ctypes

        buf = ctypes.create_string_buffer(n)
        self.managed[ctypes.addressof(buf)] = buf
        return ctypes.addressof(buf)

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]


class FakeCudaArray:
    """A device array as CuPy shows it to other libraries: `__cuda_array_interface__`, a dict built
    at each access (no memory behind the address)."""

    def __init__(self, n: int, ptr: int, dtype: str = "<f4", readonly: bool = False) -> None:
        self.n, self.ptr, self.typestr, self.readonly = n, ptr, dtype, readonly

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": (self.n,), "typestr": self.typestr, "data": (self.ptr, self.readonly), "strides": None,
                "version": 3}


def install(fake: FakeDriver) -> list[tuple[Any, str, Any]]:
    """Put `fake` in place of the driver and pretend there is a device; returns what to restore."""
    from tessera.runtime.cuda import backend as cuda_backend
    from tessera.runtime.cuda import driver

    saved = [(driver, "_DRV", driver._DRV), (driver, "_DEVICE", driver._DEVICE),
             (cuda_backend.CudaBackend, "status", cuda_backend.CudaBackend.status)]
    driver._DRV = fake
    driver._DEVICE = driver.Device(0, FakeDriver.CUdevice(0), object(), "sm_90", "fake device")
    cuda_backend.CudaBackend.status = lambda self: (True, "a fake driver")  # type: ignore[method-assign]
    return saved


def restore(saved: list[tuple[Any, str, Any]]) -> None:
    for owner, name, value in saved:
        setattr(owner, name, value)


def _rounds(fns: dict[str, Any], launches: int, drain: Any = None) -> dict[str, tuple[float, float]]:
    """{name: (median, best)} us per call over 5 rounds of `launches` calls, the functions taking
    turns in each round (so that another process's load falls on all of them alike)."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(5):
        for name, fn in fns.items():
            t = time.perf_counter()
            for _ in range(launches):
                fn()
            if drain is not None:
                drain()
            times[name].append((time.perf_counter() - t) / launches * 1e6)
    return {name: (statistics.median(ts), min(ts)) for name, ts in times.items()}


def mocked(launches: int) -> dict[str, tuple[float, float]]:
    """us per launch through the Python API with device arrays on the fake driver (`tessera`), per
    bare fake cuLaunchKernel call (`floor`), and per launch of the same kernel on NumPy arrays on the
    CPU backend (`cpu`: the API's other launch path, the kernel's run included)."""
    import ctypes

    import tessera

    cpu = tessera.compile(VADD, backend="cpu").vadd
    a, b, c = (np.zeros(256, np.float32) for _ in range(3))
    fake = FakeDriver(record=False)
    saved = install(fake)
    try:
        k = tessera.compile(VADD, backend="cuda", arch="sm_90").vadd
        x, y, out = FakeCudaArray(256, 0x1000000), FakeCudaArray(256, 0x2000000), FakeCudaArray(256, 0x3000000)
        k(x, y, out, grid=1)
        cpu(a, b, c, grid=1)
        argv = (ctypes.c_void_p * 4)()
        return _rounds({"tessera": lambda: k(x, y, out, grid=1),
                        "floor": lambda: fake.cuLaunchKernel("f", 1, 1, 1, 256, 1, 1, 0, 0, ctypes.addressof(argv), 0),
                        "cpu": lambda: cpu(a, b, c, grid=1)}, launches)
    finally:
        restore(saved)


def on_gpu(launches: int) -> dict[str, tuple[float, float]] | None:
    """us per launch through the Python API (`tessera`) and per Triton launch (`triton`) of the same
    vector add on the same PyTorch tensors, or None without a GPU, PyTorch and Triton."""
    try:
        import torch
        import triton
        import triton.language as tl
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    import tessera

    @triton.jit
    def vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):  # noqa: N803
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    n = 1 << 12
    x, y = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
    out, ref = torch.empty_like(x), torch.empty_like(x)
    k = tessera.compile(VADD, backend="cuda").vadd
    grid = n // 256
    k(x, y, out, grid=grid)
    vadd[(grid,)](x, y, ref, n, BLOCK=256)
    torch.cuda.synchronize()
    assert torch.equal(out, ref), "the two vector adds disagree"
    return _rounds({"tessera": lambda: k(x, y, out, grid=grid),
                    "triton": lambda: vadd[(grid,)](x, y, ref, n, BLOCK=256)}, launches, torch.cuda.synchronize)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mocked", action="store_true", help="the Python side only, even with a GPU")
    ap.add_argument("--launches", type=int, default=20000)
    ap.add_argument("--dry-run", action="store_true", help="the mocked figure with few launches")
    args = ap.parse_args(argv)
    launches = 200 if args.dry_run else args.launches
    real = None if args.mocked or args.dry_run else on_gpu(launches)
    if real is not None:
        (ours, ours_best), (theirs, theirs_best) = real["tessera"], real["triton"]
        print(f"launch with PyTorch tensors on a GPU, median (best) of 5 x {launches}: tessera {ours:.2f} us "
              f"({ours_best:.2f}), Triton {theirs:.2f} us ({theirs_best:.2f}), ratio {ours / theirs:.2f}x "
              f"({ours_best / theirs_best:.2f}x) (goal <= 1.5x)")
        return 0
    got = mocked(launches)
    (ours, ours_best), (floor, _), (cpu, cpu_best) = got["tessera"], got["floor"], got["cpu"]
    print(f"launch with device arrays, mocked driver (the Python side), median (best) of 5 x {launches}: "
          f"tessera {ours:.2f} us ({ours_best:.2f}) (goal <= 10 us); the bare fake cuLaunchKernel {floor:.2f} us; "
          f"the same launch on NumPy arrays on the CPU backend {cpu:.2f} us ({cpu_best:.2f}), ratio "
          f"{ours / cpu:.2f}x ({ours_best / cpu_best:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
