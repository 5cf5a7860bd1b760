"""Benchmark of `tessera.ops` (issue 27).

On a GPU (CUDA and PyTorch with CUDA): each operator against the same operation in PyTorch, in one
run, as ratios (PyTorch's time / Tessera's: above 1 is faster than PyTorch): matmul f16 vs cuBLAS,
attention vs SDPA's flash backend, layer_norm / rms_norm / softmax vs PyTorch's kernels and as a
fraction of the DRAM peak, depthwise conv vs F.conv2d with groups = C.

Without a GPU (or with --cpu): each operator on the CPU backend at small sizes against a float64
NumPy reference (tests/ops/reference.py; the largest error), with the static figures of the configuration it ran with,
from an NVRTC build for --arch (no GPU needed): registers, shared memory, spills.

    python bench/ops_bench.py            # GPU if there is one, else the CPU mode
    python bench/ops_bench.py --cpu --quick   # the CPU mode with autotuning off (the defaults; what the test runs)
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tessera import autotune, ops  # noqa: E402
from tessera.ops import launcher  # noqa: E402
from tests.ops import reference as ref  # noqa: E402

# (operator, the kernel file and kernel that does the work)
KERNELS = {"matmul": ("matmul.tsr", "mm_f32"), "softmax": ("rows.tsr", "softmax"),
           "layer_norm": ("rows.tsr", "layer_norm"), "rms_norm": ("rows.tsr", "rms_norm"),
           "attention": ("attention.tsr", "attention"), "depthwise_conv2d": ("depthwise.tsr", "depthwise")}


def cpu_cases(rng: np.random.Generator) -> list[tuple[str, Any, np.ndarray]]:
    """(operator, a call, its float64 reference) at small, ragged sizes."""
    a, b, bias = (rng.standard_normal(s).astype(np.float32) for s in ((2, 37, 45), (45, 29), (29,)))
    x = rng.standard_normal((2, 7, 131)).astype(np.float32)
    w, beta = (rng.standard_normal(131).astype(np.float32) for _ in range(2))
    q, k, v = (rng.standard_normal((1, 2, 77, 64)).astype(np.float16) for _ in range(3))
    img, filt = rng.standard_normal((2, 3, 17, 23)).astype(np.float32), rng.standard_normal((3, 1, 3, 3)).astype(np.float32)
    return [("matmul", lambda: ops.matmul(a, b, bias, "gelu"), ref.matmul(a, b, bias, "gelu")),
            ("softmax", lambda: ops.softmax(x), ref.softmax(x)),
            ("layer_norm", lambda: ops.layer_norm(x, w, beta), ref.layer_norm(x, w, beta)),
            ("rms_norm", lambda: ops.rms_norm(x, w), ref.rms_norm(x, w)),
            ("attention", lambda: ops.attention(q, k, v, causal=True), ref.attention(q, k, v, causal=True)),
            ("depthwise_conv2d", lambda: ops.depthwise_conv2d(img, filt, 1, 1), ref.depthwise_conv2d(img, filt, 1, 1))]


def cpu_mode(arch: str) -> list[dict[str, Any]]:
    """Each operator on the CPU backend vs NumPy, with its configuration's static figures."""
    os.environ["TESSERA_BACKEND"] = "cpu"
    rows = []
    for name, call, want in cpu_cases(np.random.default_rng(0)):
        got = ref.as_f64(call())
        file, kernel = KERNELS[name]
        consts = dict(launcher.LAST[kernel])
        fig = launcher.figures(file, kernel, consts, arch)
        space = launcher.kernel(file, kernel, False).tune_space
        tuned = {n: consts.get(n, "default") for n, _ in (space.axes if space is not None else ())}
        rows.append({"op": name, "max_error": float(np.abs(got - want).max()), "registers": fig["registers"],
                     "shared": fig["shared"], "spills": fig["spills"],
                     "config": ", ".join(f"{n}={v}" for n, v in tuned.items()) or "defaults"})
    print(f"tessera.ops on the CPU backend vs NumPy (float64); static figures from NVRTC for {arch}")
    print(f"{'operator':<17} {'max error':>10} {'regs':>5} {'shared':>7} {'spills':>6}  configuration")
    for r in rows:
        print(f"{r['op']:<17} {r['max_error']:>10.2e} {r['registers']:>5} {r['shared']:>7} {r['spills']:>6}  {r['config']}")
    return rows


def _time(fn: Any, torch: Any, repeat: int = 20) -> float:
    """Median milliseconds per call, with CUDA events on the current stream."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return float(np.median(times))


def gpu_mode() -> list[dict[str, Any]]:
    """Each operator against PyTorch on the GPU, as ratios in one run."""
    import torch
    import torch.nn.functional as F

    from tessera.autotune.arch import arch_spec
    from tessera.runtime.cuda.driver import device

    dev = device()
    peak = arch_spec(dev.arch).dram_gbs
    h = torch.float16
    g = torch.Generator(device="cuda").manual_seed(0)
    rnd = lambda *s: torch.randn(*s, device="cuda", dtype=h, generator=g)  # noqa: E731
    a, b = rnd(4096, 4096), rnd(4096, 4096)
    q, k, v = rnd(4, 16, 4096, 64), rnd(4, 16, 4096, 64), rnd(4, 16, 4096, 64)
    x, w, bias = rnd(8192, 4096), rnd(4096), rnd(4096)
    img, filt = rnd(32, 256, 112, 112), rnd(256, 1, 3, 3)
    norm_bytes = 2 * x.numel() * 2
    cases = [
        ("matmul f16 4096^3", lambda: ops.matmul(a, b), lambda: a @ b, 2 * 4096**3, 0),
        ("attention f16 [4,16,4096,64]", lambda: ops.attention(q, k, v),
         lambda: F.scaled_dot_product_attention(q, k, v), 4 * 4 * 16 * 4096 * 4096 * 64, 0),
        ("softmax f16 [8192,4096]", lambda: ops.softmax(x), lambda: torch.softmax(x, -1), 0, norm_bytes),
        ("layer_norm f16 [8192,4096]", lambda: ops.layer_norm(x, w, bias),
         lambda: F.layer_norm(x, (4096,), w, bias), 0, norm_bytes),
        ("rms_norm f16 [8192,4096]", lambda: ops.rms_norm(x, w), lambda: F.rms_norm(x, (4096,), w), 0, norm_bytes),
        ("depthwise 3x3 f16 [32,256,112,112]", lambda: ops.depthwise_conv2d(img, filt, 1, 1),
         lambda: F.conv2d(img, filt, padding=1, groups=256), 0, 2 * img.numel() * 2),
    ]
    rows = []
    print(f"tessera.ops vs PyTorch on {dev.name} ({dev.arch}); ratio = PyTorch's time / Tessera's")
    print(f"{'operation':<36} {'tessera ms':>10} {'torch ms':>9} {'ratio':>6} {'TFLOP/s':>8} {'% DRAM':>7}")
    for name, mine, theirs, flops, nbytes in cases:
        t_mine, t_theirs = _time(mine, torch), _time(theirs, torch)
        tflops = flops / t_mine / 1e9 if flops else math.nan
        dram = 100 * nbytes / (t_mine * 1e-3) / (peak * 1e9) if nbytes else math.nan
        rows.append({"op": name, "tessera_ms": t_mine, "torch_ms": t_theirs, "ratio": t_theirs / t_mine})
        print(f"{name:<36} {t_mine:>10.3f} {t_theirs:>9.3f} {t_theirs / t_mine:>6.2f} {tflops:>8.1f} {dram:>7.1f}")
    return rows


def has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    from tessera.runtime.devices import cuda_status

    return bool(cuda_status()[0]) and torch.cuda.is_available()


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpu", action="store_true", help="the CPU mode even where there is a GPU")
    p.add_argument("--quick", action="store_true", help="autotuning off: each kernel's default configuration")
    p.add_argument("--arch", default="sm_80", help="the architecture of the static figures (CPU mode)")
    args = p.parse_args(argv)
    if args.quick:
        autotune.enable(False)
    if not args.cpu and has_gpu():
        return gpu_mode()
    return cpu_mode(args.arch)


if __name__ == "__main__":
    main()
