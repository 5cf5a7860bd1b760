"""GPU benchmark: vector add, tiled matmul, the pipelined SGEMM at 4096³ (against cuBLAS), the
tensor-core f16 GEMM (samples/tc_gemm_f16.tsr) at 4096³ (against cuBLAS's f16 GEMM), row softmax and
reduction on the CUDA backend; then the map kernels of samples/elementwise.tsr (vector add and
SAXPY in f32 and f16) at 2^28 elements against the goal of 0.9 of the device's memory bandwidth;
then the per-tile vector access and broadcasting rows (llm.c-style GELU and layer norm with 16-byte
loads of 8 bf16, samples/llmc_bf16.tsr; a bias row and an activation over a matrix,
samples/bias_act.tsr) against the same goal; then FlashAttention (samples/flash_attention.tsr) at
B=4, H=16, N=4096, D=128 against PyTorch's flash SDPA (bench/attention_bench.py); on a Hopper GPU, the
sm_90a rows of bench/hopper_bench.py (the f16 GEMM with warpgroup MMA at 8192^3 against cuBLAS, and
the attention row compiled for sm_90a against PyTorch's flash SDPA).

For each kernel it prints the median time (CUDA events), the achieved bandwidth (GB/s) or
FLOP/s as a fraction of the device's peak (from its clock, memory bus and SM count), and the
same operation in CuPy or PyTorch when one is installed, measured in the same run, as a ratio.
Skips (exit 0) without an NVIDIA GPU; `--dry-run` checks the map rows, the f16 GEMM row and the
attention rows without one (their launch configuration at full size, the attention kernel's NVRTC
compile, and each kernel on the CPU backend at a small size against NumPy).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.base.options import CompileOptions

ROOT = pathlib.Path(__file__).resolve().parent.parent
ELEMENTWISE = ROOT / "samples" / "elementwise.tsr"

# Hand-written vector add: one f32 per thread, scalar loads and stores, an explicit grid. Kept as
# the "vector_add_scalar" rows, for comparison with the map kernel vadd_f32 (16-byte loads).
VECTOR_ADD = """
@kernel tile[(256,)]
def vector_add(a: f32[n], b: f32[n], c: mut f32[n]):
    i = global_linear_id()
    if i < n:
        c[i] = a[i] + b[i]
"""


def sibling(name: str) -> Any:
    """bench/<name>.py (the attention or sm_90a rows), beside this file (bench/ is not a package): loaded once."""
    import importlib.util

    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, pathlib.Path(__file__).with_name(f"{name}.py"))
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def vector_add_grid(n: int) -> int:
    return (n + 255) // 256


def peaks() -> tuple[float, float, str]:
    """(bytes/s, FP32 FLOP/s, name) of device 0, from its attributes."""
    from cuda.bindings import driver as drv

    from tessera.runtime.cuda.driver import device

    d = device()
    attr = drv.CUdevice_attribute

    def get(a):
        return drv.cuDeviceGetAttribute(a, d.handle)[1]

    mem_khz = get(attr.CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)
    bus_bits = get(attr.CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)
    sms = get(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
    clock_khz = get(attr.CU_DEVICE_ATTRIBUTE_CLOCK_RATE)
    bandwidth = 2.0 * mem_khz * 1e3 * bus_bits / 8
    flops = 2.0 * 128 * sms * clock_khz * 1e3  # 128 FP32 FMA lanes per SM on sm_80..sm_90
    return bandwidth, flops, d.name


def reference_time(fn, repeat: int) -> float | None:
    """Median ms of a CuPy/PyTorch callable, synchronizing around each run."""
    sync = None
    try:
        import cupy

        sync = cupy.cuda.Device().synchronize
    except ImportError:
        try:
            import torch

            sync = torch.cuda.synchronize
        except ImportError:
            return None
    fn()
    sync()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


SGEMM_SIZE = 4096  # the pipelined SGEMM's M = N = K, against cuBLAS (CuPy's or PyTorch's A @ A)
HGEMM_SIZE = 4096  # the tensor-core f16 GEMM's M = N = K (f32 accumulation), against cuBLAS's f16 A @ A
HGEMM_GOAL = 0.7   # of cuBLAS, with mma.sync (cuBLAS uses wgmma on sm_90a)
HGEMM_TILE = 128   # tc_gemm_f16's default BM = BN
# The GEMM rows fix their tiles (the samples' defaults): both samples have @autotune, and a launch
# that leaves BM, BN to the tuner needs a grid function of them; these rows measure the defaults.
HGEMM_CONSTS = {"BM": HGEMM_TILE, "BN": HGEMM_TILE, "BK": 32, "stages": 3}
SGEMM_CONSTS = {"BM": 128, "BN": 128, "BK": 8, "stages": 3}


def references(n: int, m: int, rows: int, cols: int):
    try:
        import cupy as xp
    except ImportError:
        try:
            import torch
        except ImportError:
            return {}
        a = torch.rand(n, device="cuda")
        A = torch.rand(m, m, device="cuda")
        s = torch.rand(rows, cols, device="cuda", dtype=torch.float16)
        S = torch.rand(SGEMM_SIZE, SGEMM_SIZE, device="cuda")
        H = torch.rand(HGEMM_SIZE, HGEMM_SIZE, device="cuda", dtype=torch.float16)
        torch.backends.cuda.matmul.allow_tf32 = False  # FP32 SIMT against FP32, not TF32 tensor cores
        return {"vector_add_scalar": lambda: a + a, "matmul": lambda: A @ A, "sgemm_4096": lambda: S @ S,
                "hgemm_4096": lambda: H @ H,
                "softmax": lambda: torch.softmax(s.float(), 1).half(), "reduce": lambda: a.sum()}
    a = xp.random.rand(n, dtype=xp.float32)
    A = xp.random.rand(m, m, dtype=xp.float32)
    s = xp.random.rand(rows, cols).astype(xp.float16)
    S = xp.random.rand(SGEMM_SIZE, SGEMM_SIZE, dtype=xp.float32)
    H = xp.random.rand(HGEMM_SIZE, HGEMM_SIZE).astype(xp.float16)

    def softmax():
        x = s.astype(xp.float32)
        e = xp.exp(x - x.max(1, keepdims=True))
        return (e / e.sum(1, keepdims=True)).astype(xp.float16)
    return {"vector_add_scalar": lambda: a + a, "matmul": lambda: A @ A, "sgemm_4096": lambda: S @ S, "softmax": softmax,
            "reduce": lambda: a.sum(), "hgemm_4096": lambda: H @ H}


# Every row measured, for --json: name, milliseconds, the fraction of the peak and which peak, the
# reference's milliseconds and name, and the row's goal (what a fraction or ratio must reach) if any.
RESULTS: list[dict[str, Any]] = []
DEVICE: dict[str, Any] = {}  # the device measured on and its peaks (empty when skipped)


def record(name: str, ms: float, fraction: float, of: str, ref_ms: float | None, reference: str | None,
           goal: str = "") -> None:
    RESULTS.append({"row": name, "ms": round(ms, 4), "fraction_of_peak": round(fraction, 4), "peak": of,
                    "reference_ms": round(ref_ms, 4) if ref_ms else None, "reference": reference if ref_ms else None,
                    "tessera_over_reference": round(ms / ref_ms, 3) if ref_ms else None, "goal": goal})


MAP_N = 1 << 28    # elements of the map rows: 1 GiB a f32 array, 3 GiB a row (2 GiB for saxpy)
MAP_GOAL = 0.9     # of the device's peak memory bandwidth
ALPHA = 1.5        # SAXPY's alpha (exact in f16)


@dataclass(frozen=True)
class MapRow:
    """A map kernel of samples/elementwise.tsr: vector add `Z[:] = X + Y`, or SAXPY
    `Y[:] = alpha * X + Y`, on 1-D arrays of `dtype`."""

    kernel: str
    dtype: type
    saxpy: bool

    @property
    def out(self) -> str:
        return "Y" if self.saxpy else "Z"

    def bytes_moved(self, n: int) -> int:
        """Memory traffic of one launch: vector add reads X and Y and writes Z; SAXPY reads X and Y
        and writes Y. Three arrays of n elements either way."""
        return 3 * n * np.dtype(self.dtype).itemsize

    def host_arrays(self, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        x = rng.random(n, dtype=np.float32).astype(self.dtype, copy=False)
        y = rng.random(n, dtype=np.float32).astype(self.dtype, copy=False)
        return {"X": x, "Y": y} if self.saxpy else {"X": x, "Y": y, "Z": np.empty_like(x)}

    def args(self, arrays: dict[str, Any]) -> tuple:
        """The kernel's arguments (no grid: a map kernel derives it from the element count)."""
        return (ALPHA, arrays["X"], arrays["Y"]) if self.saxpy else (arrays["X"], arrays["Y"], arrays["Z"])

    def expected(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        """What the launch writes to `out`, as NumPy computes it in `dtype`."""
        if self.saxpy:
            return self.dtype(ALPHA) * arrays["X"] + arrays["Y"]
        return arrays["X"] + arrays["Y"]

    def reference(self, x: Any, y: Any) -> Callable[[], Any]:
        """The same operation on CuPy arrays or PyTorch tensors: `x + y`, `alpha * x + y`."""
        if self.saxpy:
            return lambda: ALPHA * x + y
        return lambda: x + y


MAP_ROWS = (MapRow("vadd_f32", np.float32, False), MapRow("saxpy_f32", np.float32, True),
            MapRow("vadd_f16", np.float16, False), MapRow("saxpy_f16", np.float16, True))


def reference_library() -> str | None:
    """"CuPy" or "PyTorch" (the one `reference_time` synchronizes), or None without either (a
    PyTorch built without CUDA counts as none)."""
    for module, name in (("cupy", "CuPy"), ("torch", "PyTorch")):
        try:
            imported = __import__(module)
        except ImportError:
            continue
        if module == "torch" and not imported.cuda.is_available():
            continue
        return name
    return None


def reference_arrays(n: int, dtype: type) -> tuple[Any, Any] | None:
    """Two random device arrays of n elements in CuPy or PyTorch, or None without either."""
    library = reference_library()
    if library == "CuPy":
        import cupy

        x, y = (cupy.random.random(n, dtype=cupy.float32).astype(dtype) for _ in range(2))
        return x, y
    if library == "PyTorch":
        import torch

        tdtype = getattr(torch, np.dtype(dtype).name)
        x, y = (torch.rand(n, device="cuda", dtype=tdtype) for _ in range(2))
        return x, y
    return None


def free_reference_memory() -> None:
    """Give the memory CuPy's or PyTorch's allocator keeps cached back to the device."""
    library = reference_library()
    if library == "CuPy":
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()
    elif library == "PyTorch":
        import torch

        torch.cuda.empty_cache()


def format_map_row(name: str, ms: float, nbytes: int, peak: float, ref_ms: float | None, goal: bool = True) -> str:
    """One line of the map table: time, GB/s, fraction of peak, the goal, the reference and the
    ratio (tessera / reference; '-' without a reference)."""
    frac = nbytes / (ms / 1e3) / peak
    verdict = ("met" if frac >= MAP_GOAL else "MISSED") if goal else "(compare)"
    ref = f"{ref_ms:.3f}" if ref_ms else "-"
    ratio = f"{ms / ref_ms:.2f}x" if ref_ms else "-"
    return (f"{name:<18} {ms:>9.3f} {nbytes / (ms / 1e3) / 1e9:>9.1f} {frac:>8.1%} {verdict:>9} "
            f"{ref:>12} {ratio:>8}")


def map_header(library: str | None) -> str:
    ref = library or "reference"
    return (f"{'kernel':<18} {'ms':>9} {'GB/s':>9} {'of peak':>8} {f'>= {MAP_GOAL}':>9} "
            f"{ref + ' ms':>12} {'ratio':>8}")


def bench_map(tessera: Any, bw: float, repeat: int, n: int = MAP_N) -> None:
    """The map rows at n elements, one at a time (each row's arrays are freed before the next),
    each next to its CuPy/PyTorch reference measured right after it; then the hand-written scalar
    vector add on vadd_f32's arrays."""
    library = reference_library()
    ew = tessera.load(ELEMENTWISE, backend="cuda")
    vec = tessera.compile(VECTOR_ADD, backend="cuda")
    rng = np.random.default_rng(0)
    print(f"\nmap kernels (samples/elementwise.tsr) at 2^{n.bit_length() - 1} elements, no grid given, "
          f"16-byte loads and stores; goal >= {MAP_GOAL} of peak; ratio: tessera / {library or 'reference'}")
    print(map_header(library))
    for row in MAP_ROWS:
        arrays = row.host_arrays(n, rng)
        t = ew[row.kernel].benchmark(*row.args(arrays), repeat=repeat)
        scalar = None
        if row.kernel == "vadd_f32":  # the hand-written kernel on the same arrays, for comparison
            scalar = vec.vector_add.benchmark(arrays["X"], arrays["Y"], arrays["Z"], grid=vector_add_grid(n),
                                              repeat=repeat)
        del arrays
        ref_ms = None
        ref_arrays = reference_arrays(n, row.dtype)
        if ref_arrays is not None:
            ref_ms = reference_time(row.reference(*ref_arrays), repeat)
            del ref_arrays
            free_reference_memory()
        print(format_map_row(row.kernel, t, row.bytes_moved(n), bw, ref_ms))
        record(row.kernel, t, row.bytes_moved(n) / (t / 1e3) / bw, "bandwidth", ref_ms, library,
               f">= {MAP_GOAL} of peak bandwidth")
        if scalar is not None:
            print(format_map_row("vector_add_scalar", scalar, row.bytes_moved(n), bw, ref_ms, goal=False))
            record("vector_add_scalar_map", scalar, row.bytes_moved(n) / (scalar / 1e3) / bw, "bandwidth", ref_ms,
                   library)


# ---- per-tile vector access and broadcasting (issue 26): llm.c-style bf16 kernels with 16-byte
# loads of 8 bf16 (samples/llmc_bf16.tsr) and a bias row over a matrix (samples/bias_act.tsr)
VEC_ROWS_N, VEC_ROWS_C = 1 << 16, 4096  # rows x channels: 2^28 elements, 512 MiB of bf16 a matrix


@dataclass(frozen=True)
class VecRow:
    """A row of the vector-access table: `kernel` of `sample`, its arguments' shapes (in "N", "C"
    and "NC" = N * C) and dtypes, the grid (None: derived by the map kernel) and the bytes a launch
    must move at least."""

    kernel: str
    sample: str
    args: tuple[tuple[tuple[str, ...], type], ...]
    nbytes: Callable[[int, int], int]
    grid: Callable[[int, int], Any]

    def shapes(self, n: int, c: int) -> list[tuple[tuple[int, ...], np.dtype]]:
        size = {"N": n, "C": c, "NC": n * c}
        return [(tuple(size[d] for d in dims), np.dtype(dtype)) for dims, dtype in self.args]

    def arrays(self, n: int, c: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        """Random inputs in [0, 1) (bf16 as uint16 bits)."""
        out = []
        for shape, dtype in self.shapes(n, c):
            x = rng.random(shape, dtype=np.float32)
            out.append((x.view(np.uint32) >> 16).astype(np.uint16) if dtype == np.uint16 else x.astype(dtype))
        return tuple(out)


BF16 = np.uint16  # bf16 arrays are their uint16 bits
VEC_ROWS = (
    VecRow("gelu_bf16", "llmc_bf16.tsr", ((("NC",), BF16), (("NC",), BF16)), lambda n, c: 2 * 2 * n * c,
           lambda n, c: -(-n * c // 2048)),
    VecRow("layernorm_bf16", "llmc_bf16.tsr",
           ((("N", "C"), BF16), (("C",), BF16), (("C",), BF16), (("N", "C"), np.float32), (("N",), np.float32),
            (("N",), np.float32)), lambda n, c: (2 + 4) * n * c + 2 * 2 * c + 8 * n, lambda n, c: -(-n // 8)),
    VecRow("bias_relu_f32", "bias_act.tsr", ((("N", "C"), np.float32), (("C",), np.float32), (("N", "C"), np.float32)),
           lambda n, c: 2 * 4 * n * c + 4 * c, lambda n, c: None),
    VecRow("bias_row_gelu_bf16", "bias_act.tsr", ((("N", "C"), BF16), (("C",), BF16), (("N", "C"), BF16)),
           lambda n, c: 2 * 2 * n * c + 2 * c, lambda n, c: None),
)


def bench_vector_rows(tessera: Any, bw: float, repeat: int, n: int = VEC_ROWS_N, c: int = VEC_ROWS_C) -> None:
    """The vector-access rows: achieved bandwidth (the bytes a launch must move) against the goal
    of MAP_GOAL of peak."""
    rng = np.random.default_rng(0)
    print(f"\nper-tile vector access and broadcasting at {n} x {c}; goal >= {MAP_GOAL} of peak")
    print(map_header(None))
    for row in VEC_ROWS:
        mod = tessera.load(ROOT / "samples" / row.sample, backend="cuda")
        args = row.arrays(n, c, rng)
        grid = row.grid(n, c)
        t = mod[row.kernel].benchmark(*args, repeat=repeat, **({"grid": grid} if grid is not None else {}))
        del args
        print(format_map_row(row.kernel, t, row.nbytes(n, c), bw, None))
        record(row.kernel, t, row.nbytes(n, c) / (t / 1e3) / bw, "bandwidth", None, None,
               f">= {MAP_GOAL} of peak bandwidth")


def dry_run_vector_rows(n: int = VEC_ROWS_N, c: int = VEC_ROWS_C) -> int:
    """The vector-access rows without a GPU: each launch at full size as the CUDA backend binds it
    (the grid, and the aligned variant for fresh device allocations), and each kernel on the CPU
    backend on its samples/runner.py case against NumPy. Returns the number of failures."""
    import importlib.util

    import tessera
    from tessera.api import aligned_launch
    from tessera.runtime.launch_args import bind
    from tessera.transpile.driver import compile_source, load_source

    runner = sys.modules.get("samples.runner")  # the cases of samples/runner.py (loaded by path: a script)
    if runner is None:
        spec = importlib.util.spec_from_file_location("samples.runner", ROOT / "samples" / "runner.py")
        assert spec is not None and spec.loader is not None
        runner = sys.modules["samples.runner"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(runner)
    failed = 0
    for row in VEC_ROWS:
        path = ROOT / "samples" / row.sample
        kernels = compile_source(load_source(str(path)), options=CompileOptions(arch="sm_90")).kernels
        generic = next(k for k in kernels if k.name == row.kernel and not k.aligned)
        stand_ins, ptr = [], 1 << 40
        for shape, dtype in row.shapes(n, c):
            stand_ins.append(_StandIn(shape, dtype, ptr))
            ptr += -(-int(np.prod(shape)) * dtype.itemsize // 256) * 256
        bound = bind(generic, tuple(stand_ins), {}, row.grid(n, c), device_ok=True)
        aligned = bool(generic.align_tensors) and aligned_launch(generic, bound, True)
        variant = next(k for k in kernels if k.name == row.kernel and k.aligned == aligned).c_name
        ok, message = runner.check_kernel(tessera.load(path, backend="cpu"), row.kernel, seed=0)
        ok = ok and (aligned or not generic.align_tensors)
        failed += not ok
        print(f"{'ok' if ok else 'FAILED':<6} {row.kernel:<10} {row.nbytes(n, c) / 1e9:.2f} GB a launch, "
              f"grid {bound.grid[0]} x {generic.tile[0]} threads, variant {variant}; {message}")
    return failed


class _StandIn:
    """A device array that is never allocated: shape, dtype and a 256-byte aligned address, as
    `__cuda_array_interface__` describes them (the dry run binds the full-size launch with these)."""

    def __init__(self, n: int | tuple[int, ...], dtype: type, ptr: int) -> None:
        self.shape = n if isinstance(n, tuple) else (n,)
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": self.shape, "typestr": np.dtype(dtype).str,
                                         "strides": None, "version": 3}


def dry_run(n: int = MAP_N, check_n: int = 100_003) -> int:
    """Without a GPU: for each map row, the launch at n elements as the CUDA backend binds it (the
    derived grid, and the 16-byte variant chosen for fresh device allocations), then the kernel
    on the CPU backend at check_n elements against NumPy; the hand-written vector add too.
    Returns 1 if any check fails."""
    import tessera
    from tessera.api import aligned_launch
    from tessera.runtime.launch_args import bind
    from tessera.transpile.driver import compile_source, load_source

    kernels = compile_source(load_source(str(ELEMENTWISE)), options=CompileOptions(arch="sm_90")).kernels
    cpu = tessera.load(ELEMENTWISE, backend="cpu")
    rng = np.random.default_rng(0)
    failed = 0
    print(f"dry run: map rows at 2^{n.bit_length() - 1} elements (CUDA C for sm_90, launch bound with stand-in "
          f"device arrays), checked on the CPU backend at {check_n} elements")
    for row in MAP_ROWS:
        generic = next(k for k in kernels if k.name == row.kernel and not k.aligned)
        stride = -(-n * np.dtype(row.dtype).itemsize // 256) * 256
        stand_ins = {name: _StandIn(n, row.dtype, (1 << 40) + i * stride) for i, name in enumerate("XYZ")}
        bound = bind(generic, row.args(stand_ins), {}, None, device_ok=True)
        aligned = bool(generic.align_tensors) and aligned_launch(generic, bound, True)
        variant = next(k for k in kernels if k.name == row.kernel and k.aligned == aligned)
        arrays = row.host_arrays(check_n, rng)
        want = row.expected(arrays)
        cpu[row.kernel](*row.args(arrays))
        ok = aligned and np.array_equal(arrays[row.out], want)
        failed += not ok
        print(f"{'ok' if ok else 'FAILED':<6} {row.kernel:<10} {row.bytes_moved(n) / 1e9:.2f} GB a launch, "
              f"grid {bound.grid[0]} x {variant.tile[0]} threads x {variant.map_width} elements, "
              f"variant {variant.c_name}; CPU backend {'matches' if ok else 'differs from'} NumPy")
    vec = tessera.compile(VECTOR_ADD, backend="cpu")
    vadd = next(row for row in MAP_ROWS if row.kernel == "vadd_f32")  # the arrays bench_map gives it
    arrays = vadd.host_arrays(check_n, rng)
    vec.vector_add(arrays["X"], arrays["Y"], arrays["Z"], grid=vector_add_grid(check_n))
    ok = np.array_equal(arrays["Z"], vadd.expected(arrays))
    failed += not ok
    print(f"{'ok' if ok else 'FAILED':<6} vector_add_scalar (hand-written) grid {vector_add_grid(n)} x 256 threads; "
          f"CPU backend {'matches' if ok else 'differs from'} NumPy")
    failed += not dry_run_hgemm()
    failed += not sibling("hopper_bench").dry_run_hopper()
    failed += dry_run_vector_rows()
    failed += sibling("attention_bench").dry_run_attention()
    failed += not sibling("hopper_bench").dry_run_hopper_attention(sibling("attention_bench"))
    print(f"reference: {reference_library() or 'neither CuPy nor PyTorch installed: the ratio column is skipped'}")
    return 1 if failed else 0


def dry_run_hgemm(check: tuple[int, int, int] = (200, 72, 136)) -> bool:
    """The f16 GEMM row without a GPU: its launch at HGEMM_SIZE (grid, threads, shared memory
    against the sm_90 limit) and the kernel on the CPU backend at a small size against NumPy."""
    import tessera
    from tessera.transpile.driver import compile_source, load_source

    path = ROOT / "samples" / "tc_gemm_f16.tsr"
    k = next(k for k in compile_source(load_source(str(path)), options=CompileOptions(arch="sm_90")).kernels if k.aligned)
    grid = (HGEMM_SIZE // HGEMM_TILE, HGEMM_SIZE // HGEMM_TILE)
    m, kk, n = check
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, kk)).astype(np.float16), rng.standard_normal((kk, n)).astype(np.float16)
    c = np.zeros((m, n), np.float32)
    tessera.load(path, backend="cpu").tc_gemm_f16(a, b, c, grid=(-(-n // HGEMM_TILE), -(-m // HGEMM_TILE)),
                                                  **HGEMM_CONSTS)
    ok = np.allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-4, atol=1e-3) \
        and k.dynamic_smem <= 227 * 1024
    print(f"{'ok' if ok else 'FAILED':<6} hgemm_4096 grid {grid[0]} x {grid[1]} x {k.tile[0]} threads, "
          f"{k.dynamic_smem} bytes of shared memory, variant {k.c_name}; CPU backend at {m}x{kk}x{n} "
          f"{'matches' if ok else 'differs from'} NumPy")
    return ok


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--map-only", action="store_true", help="only the map rows (samples/elementwise.tsr)")
    p.add_argument("--dry-run", action="store_true",
                   help="no GPU needed: check the map rows' launch configuration, and run them on the CPU backend")
    p.add_argument("--json", metavar="PATH", help="also write every row measured to PATH (JSON)")
    args = p.parse_args(argv)
    if args.dry_run:
        return dry_run()
    try:
        return _measure(args)
    finally:
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps({"device": DEVICE, "rows": RESULTS}, indent=1) + "\n")


def _measure(args: argparse.Namespace) -> int:
    from tessera.runtime.devices import cuda_status

    ok, why = cuda_status()
    if not ok:
        print(f"skipped: {why}")
        return 0
    import tessera

    bw, flops, name = peaks()
    DEVICE.update(name=name, peak_gb_s=round(bw / 1e9, 1), peak_fp32_tflop_s=round(flops / 1e12, 2))
    print(f"device: {name}; peak {bw / 1e9:.0f} GB/s, {flops / 1e12:.1f} FP32 TFLOP/s")
    if not args.map_only:
        bench_others(tessera, bw, flops, args.repeat)
        free_reference_memory()
        sibling("hopper_bench").bench_hopper(tessera, args.repeat, reference_time, record)
        free_reference_memory()
    bench_map(tessera, bw, args.repeat)
    bench_vector_rows(tessera, bw, args.repeat)
    if not args.map_only:
        sibling("attention_bench").bench_attention(tessera, flops, args.repeat, record)
        sibling("hopper_bench").bench_hopper_attention(tessera, sibling("attention_bench"), args.repeat, record)
    return 0


def bench_others(tessera: Any, bw: float, flops: float, repeat: int) -> None:
    """The first table: the hand-written scalar vector add at 2^26, matmul, SGEMM, softmax, reduction."""
    n, m, rows, cols = 1 << 26, 2048, 8192, 1024
    rng = np.random.default_rng(0)
    vec = tessera.compile(VECTOR_ADD, backend="cuda")
    mm = tessera.load(ROOT / "samples" / "matmul.tsr", backend="cuda")
    sm = tessera.load(ROOT / "samples" / "softmax.tsr", backend="cuda")
    red = tessera.load(ROOT / "samples" / "warp_reduce.tsr", backend="cuda")
    a = rng.random(n, dtype=np.float32)
    A = rng.random((m, m), dtype=np.float32)
    x16 = rng.random((rows, cols)).astype(np.float16)
    rows_out = []
    t = vec.vector_add.benchmark(a, a, np.empty_like(a), grid=vector_add_grid(n), repeat=repeat)
    rows_out.append(("vector_add_scalar", t, 3 * a.nbytes / (t / 1e3) / bw, "bandwidth"))
    t = mm.matmul.benchmark(A, A, np.empty_like(A), grid=(m // 64, m // 64), repeat=repeat)
    rows_out.append(("matmul", t, 2 * m**3 / (t / 1e3) / flops, "FP32 peak"))
    sg = tessera.load(ROOT / "samples" / "sgemm_pipelined.tsr", backend="cuda")
    S = rng.random((SGEMM_SIZE, SGEMM_SIZE), dtype=np.float32)
    t = sg.sgemm.benchmark(S, S, np.empty_like(S), grid=(SGEMM_SIZE // 128, SGEMM_SIZE // 128), repeat=repeat,
                           **SGEMM_CONSTS)
    rows_out.append(("sgemm_4096", t, 2 * SGEMM_SIZE**3 / (t / 1e3) / flops, "FP32 peak"))
    tc = tessera.load(ROOT / "samples" / "tc_gemm_f16.tsr", backend="cuda")
    H = rng.random((HGEMM_SIZE, HGEMM_SIZE)).astype(np.float16)
    t = tc.tc_gemm_f16.benchmark(H, H, np.empty((HGEMM_SIZE, HGEMM_SIZE), np.float32),
                                 grid=(HGEMM_SIZE // HGEMM_TILE, HGEMM_SIZE // HGEMM_TILE), repeat=repeat,
                                 **HGEMM_CONSTS)
    rows_out.append(("hgemm_4096", t, 2 * HGEMM_SIZE**3 / (t / 1e3) / flops, "FP32 peak"))
    t = sm.softmax.benchmark(x16, np.empty_like(x16), grid=rows, repeat=repeat)
    rows_out.append(("softmax", t, 2 * x16.nbytes / (t / 1e3) / bw, "bandwidth"))
    t = red.warp_reduce.benchmark(a, np.zeros(1, np.float32), grid=1024, repeat=repeat)
    rows_out.append(("reduce", t, a.nbytes / (t / 1e3) / bw, "bandwidth"))
    refs = references(n, m, rows, cols)
    print(f"{'kernel':<18} {'ms':>9} {'of peak':>9} {'':<10} {'reference ms':>13} {'tessera/ref':>12}")
    library = reference_library()
    goals = {"sgemm_4096": "reference/tessera >= 0.8 (cuBLAS, FP32 SIMT)",
             "hgemm_4096": f"reference/tessera >= {HGEMM_GOAL} (cuBLAS f16, mma.sync)"}
    for kname, ms, frac, what in rows_out:
        ref = reference_time(refs[kname], repeat) if kname in refs else None
        record(kname, ms, frac, what, ref, library, goals.get(kname, ""))
        ratio = f"{ms / ref:.2f}x" if ref else "-"
        print(f"{kname:<18} {ms:>9.3f} {frac:>8.1%} {what:<10} {ref if ref else float('nan'):>13.3f} {ratio:>12}")
        if kname == "sgemm_4096" and ref:
            print(f"{'':<18} pipelined SGEMM at {SGEMM_SIZE}^3: {ref / ms:.2f} of cuBLAS (goal >= 0.8, FP32 SIMT)")
        if kname == "hgemm_4096" and ref:
            print(f"{'':<18} tensor-core f16 GEMM at {HGEMM_SIZE}^3: {ref / ms:.2f} of cuBLAS "
                  f"(goal >= {HGEMM_GOAL}, mma.sync; 'of peak' is against the FP32 SIMT peak)")
    print("vector_add_scalar: the hand-written VECTOR_ADD (one f32 a thread, scalar loads) at 2^26 elements")


if __name__ == "__main__":
    sys.exit(main())
