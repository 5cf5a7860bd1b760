"""The attention rows of bench/gpu_bench.py: samples/flash_attention.tsr (FlashAttention-2 forward,
f16, head dim 128, causal and not) at B=4, H=16, N=4096 against PyTorch's
`scaled_dot_product_attention` with the flash backend forced (`torch.nn.attention.sdpa_kernel`),
both timed with CUDA events in the same run; the ratio is PyTorch's time over Tessera's (goal >= 0.8).

Without a GPU (or without PyTorch's CUDA build) the rows are skipped; `dry_run_attention` checks
their setup instead: the shapes, the grid, the kernel's NVRTC compile for sm_80 and sm_90 (no
warnings, no spills, its shared memory within the limit) and the same kernel configuration on the
CPU backend at a small ragged size against a float64 NumPy reference.
"""

from __future__ import annotations

import math
import pathlib
import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "flash_attention.tsr"
GOAL = 0.8  # of PyTorch's flash backend (its time over ours)
SMEM_LIMIT = 227 * 1024  # the sm_80/sm_90 opt-in maximum per group


@dataclass(frozen=True)
class AttentionRow:
    """One attention row: the problem and the sample's configuration."""

    causal: bool
    batch: int = 4
    heads: int = 16
    n: int = 4096
    d: int = 128
    bm: int = 128       # queries per group (8 warps of 16 rows)
    bn: int = 64        # keys per pipelined step
    threads: int = 256
    stages: int = 2

    @property
    def name(self) -> str:
        return f"attention_{'causal' if self.causal else 'full'}"

    @property
    def consts(self) -> dict[str, Any]:
        """The sample's const parameters and type binding for this row."""
        return {"T": "f16", "causal": int(self.causal), "HD": self.d, "BM": self.bm, "BN": self.bn,
                "stages": self.stages, "NT": self.threads}

    @property
    def shape(self) -> tuple[int, int, int]:
        """Q, K, V and O as the sample takes them: [B * H, N, D]."""
        return self.batch * self.heads, self.n, self.d

    def grid(self, n: int | None = None) -> tuple[int, int]:
        """One group per block of BM queries of one (batch, head)."""
        return -(-(n or self.n) // self.bm), self.batch * self.heads

    @property
    def flops(self) -> float:
        """The two matrix products (4 N^2 D per head), halved when causal."""
        full = 4.0 * self.batch * self.heads * self.n * self.n * self.d
        return full / 2 if self.causal else full


ROWS = (AttentionRow(causal=False), AttentionRow(causal=True))


def compile_row(row: AttentionRow, arch: str) -> tuple[Any, Any]:
    """The row's kernel compiled for `arch`: (its KernelInfo, NVRTC's result)."""
    from tessera.base.options import CompileOptions
    from tessera.runtime.cuda.nvrtc import compile_cuda
    from tessera.transpile.driver import compile_source, load_source

    result = compile_source(load_source(str(SAMPLE)), options=CompileOptions(arch=arch),
                            variants={"flash_attention": row.consts}, only_kernel="flash_attention")
    (info,) = [k for k in result.kernels if not k.aligned] or result.kernels[:1]
    return info, compile_cuda(result.cuda, name="flash_attention.cu", arch=arch)


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    """softmax(Q K^T / sqrt(D) (+ causal mask)) V in float64, per (batch x head)."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = np.einsum("hnd,hmd->hnm", q, k) / math.sqrt(q.shape[2])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[1:], bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("hnm,hmd->hnd", p / p.sum(-1, keepdims=True), v)


def run_cpu(row: AttentionRow, heads: int = 2, n: int = 200) -> bool:
    """The row's configuration on the CPU backend at a small ragged size, against NumPy."""
    import tessera

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((heads, n, row.d)).astype(np.float16) for _ in range(3))
    o = np.zeros_like(q)
    mod = tessera.load(SAMPLE, backend="cpu")
    mod.flash_attention(q, k, v, o, 1 / math.sqrt(row.d), grid=row.grid(n)[:1] + (heads,), **row.consts)
    return bool(np.allclose(o.astype(np.float64), reference(q, k, v, row.causal), atol=2e-2, rtol=2e-2))


def dry_run_attention() -> int:
    """The rows' setup without a GPU; the number of failures."""
    failed = 0
    for row in ROWS:
        notes = []
        ok = row.shape == (row.batch * row.heads, row.n, row.d) and row.grid() == (row.n // row.bm, 64)
        for arch in ("sm_80", "sm_90"):
            info, nv = compile_row(row, arch)
            res = nv.kernel(info.c_name)
            fine = not nv.warnings and res.spill_stores == 0 and res.spill_loads == 0 \
                and info.dynamic_smem <= SMEM_LIMIT and info.tile == (row.threads,)
            ok = ok and fine
            notes.append(f"{arch}: {res.registers} registers, {info.dynamic_smem} bytes shared, "
                         f"{res.spill_stores + res.spill_loads} spill bytes")
        cpu = run_cpu(row)
        ok = ok and cpu
        failed += not ok
        print(f"{'ok' if ok else 'FAILED':<6} {row.name} B={row.batch} H={row.heads} N={row.n} D={row.d}: grid "
              f"{row.grid()[0]} x {row.grid()[1]} x {row.threads} threads; {'; '.join(notes)}; CPU backend at "
              f"N=200 {'matches' if cpu else 'differs from'} NumPy")
    return failed


def torch_flash() -> Any | None:
    """PyTorch with CUDA and the flash SDPA backend, else None."""
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: F401
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _event_ms(torch: Any, fn: Any, repeat: int) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def bench_attention(tessera: Any, flops: float, repeat: int, record: Any) -> None:
    """Measure the rows (printing a table and calling `record(name, ms, fraction, of, ref_ms,
    reference, goal)` for each); skipped without PyTorch's CUDA build."""
    torch = torch_flash()
    if torch is None:
        print("attention rows skipped: PyTorch with CUDA is not installed")
        return
    mod = tessera.load(SAMPLE, backend="cuda")
    print(f"{'kernel':<18} {'ms':>9} {'TFLOP/s':>9} {'torch flash ms':>15} {'torch/tessera':>14}")
    for row in ROWS:
        t, ref, err = _measure_row(torch, mod, row, repeat)
        record(row.name, t, row.flops / (t / 1e3) / flops, "FP32 peak", ref, "torch flash SDPA",
               f"torch/tessera >= {GOAL}")
        print(f"{row.name:<18} {t:>9.3f} {row.flops / t / 1e9:>9.1f} {ref:>15.3f} {ref / t:>13.2f}x"
              f"  (goal >= {GOAL}; max |O - torch| {err:.1e})")


def _measure_row(torch: Any, mod: Any, row: AttentionRow, repeat: int) -> tuple[float, float, float]:
    """(Tessera's ms, PyTorch's flash SDPA's ms, the largest difference of their outputs) for one row."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(row.shape, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
    o = torch.empty_like(q)
    scale = 1 / math.sqrt(row.d)
    t = _event_ms(torch, lambda: mod.flash_attention(q, k, v, o, scale, grid=row.grid(), **row.consts), repeat)
    q4, k4, v4 = (x.view(row.batch, row.heads, row.n, row.d) for x in (q, k, v))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        ref = _event_ms(torch, lambda: sdpa(q4, k4, v4, is_causal=row.causal), repeat)
        want = sdpa(q4, k4, v4, is_causal=row.causal)
    return t, ref, float((o.view_as(want) - want).abs().max().item())


__all__ = ["GOAL", "ROWS", "AttentionRow", "bench_attention", "compile_row", "dry_run_attention", "run_cpu"]
