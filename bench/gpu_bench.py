"""GPU benchmark: vector add, tiled matmul, the pipelined SGEMM at 4096³ (against cuBLAS), row softmax
and reduction on the CUDA backend.

For each kernel it prints the median time (CUDA events), the achieved bandwidth (GB/s) or
FLOP/s as a fraction of the device's peak (from its clock, memory bus and SM count), and the
same operation in CuPy or PyTorch when one is installed, measured in the same run, as a ratio.
Skips (exit 0) without an NVIDIA GPU.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent

VECTOR_ADD = """
@kernel tile[(256,)]
def vector_add(a: f32[n], b: f32[n], c: mut f32[n]):
    i = global_linear_id()
    if i < n:
        c[i] = a[i] + b[i]
"""


def peaks() -> tuple[float, float, str]:
    """(bytes/s, FP32 FLOP/s, name) of device 0, from its attributes."""
    from cuda.bindings import driver as drv

    from tessera.runtime.cuda import device

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
        torch.backends.cuda.matmul.allow_tf32 = False  # FP32 SIMT against FP32, not TF32 tensor cores
        return {"vector_add": lambda: a + a, "matmul": lambda: A @ A, "sgemm_4096": lambda: S @ S,
                "softmax": lambda: torch.softmax(s.float(), 1).half(), "reduce": lambda: a.sum()}
    a = xp.random.rand(n, dtype=xp.float32)
    A = xp.random.rand(m, m, dtype=xp.float32)
    s = xp.random.rand(rows, cols).astype(xp.float16)
    S = xp.random.rand(SGEMM_SIZE, SGEMM_SIZE, dtype=xp.float32)

    def softmax():
        x = s.astype(xp.float32)
        e = xp.exp(x - x.max(1, keepdims=True))
        return (e / e.sum(1, keepdims=True)).astype(xp.float16)
    return {"vector_add": lambda: a + a, "matmul": lambda: A @ A, "sgemm_4096": lambda: S @ S, "softmax": softmax,
            "reduce": lambda: a.sum()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeat", type=int, default=20)
    args = p.parse_args()
    from tessera.runtime.devices import cuda_status

    ok, why = cuda_status()
    if not ok:
        print(f"skipped: {why}")
        return 0
    import tessera

    bw, flops, name = peaks()
    print(f"device: {name}; peak {bw / 1e9:.0f} GB/s, {flops / 1e12:.1f} FP32 TFLOP/s")
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
    t = vec.vector_add.benchmark(a, a, np.empty_like(a), grid=(n + 255) // 256, repeat=args.repeat)
    rows_out.append(("vector_add", t, 3 * a.nbytes / (t / 1e3) / bw, "bandwidth"))
    t = mm.matmul.benchmark(A, A, np.empty_like(A), grid=(m // 64, m // 64), repeat=args.repeat)
    rows_out.append(("matmul", t, 2 * m**3 / (t / 1e3) / flops, "FP32 peak"))
    sg = tessera.load(ROOT / "samples" / "sgemm_pipelined.tsr", backend="cuda")
    S = rng.random((SGEMM_SIZE, SGEMM_SIZE), dtype=np.float32)
    t = sg.sgemm.benchmark(S, S, np.empty_like(S), grid=(SGEMM_SIZE // 128, SGEMM_SIZE // 128), repeat=args.repeat)
    rows_out.append(("sgemm_4096", t, 2 * SGEMM_SIZE**3 / (t / 1e3) / flops, "FP32 peak"))
    t = sm.softmax.benchmark(x16, np.empty_like(x16), grid=rows, repeat=args.repeat)
    rows_out.append(("softmax", t, 2 * x16.nbytes / (t / 1e3) / bw, "bandwidth"))
    t = red.warp_reduce.benchmark(a, np.zeros(1, np.float32), grid=1024, repeat=args.repeat)
    rows_out.append(("reduce", t, a.nbytes / (t / 1e3) / bw, "bandwidth"))
    refs = references(n, m, rows, cols)
    print(f"{'kernel':<12} {'ms':>9} {'of peak':>9} {'':<10} {'reference ms':>13} {'tessera/ref':>12}")
    for kname, ms, frac, what in rows_out:
        ref = reference_time(refs[kname], args.repeat) if kname in refs else None
        ratio = f"{ms / ref:.2f}x" if ref else "-"
        print(f"{kname:<12} {ms:>9.3f} {frac:>8.1%} {what:<10} {ref if ref else float('nan'):>13.3f} {ratio:>12}")
        if kname == "sgemm_4096" and ref:
            print(f"{'':<12} pipelined SGEMM at {SGEMM_SIZE}^3: {ref / ms:.2f} of cuBLAS (goal >= 0.8, FP32 SIMT)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
