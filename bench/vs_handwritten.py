"""Tessera's kernels against hand-written CUDA C of the same tiling, compiled by the same NVRTC.

For each pair -- `samples/matmul.tsr` and `bench/handwritten/matmul.cu`,
`samples/sgemm_pipelined.tsr` and `bench/handwritten/sgemm_pipelined.cu`, the tensor-core
`samples/tc_gemm_f16.tsr` and `bench/handwritten/hgemm_mma.cu`, FlashAttention-2 forward
(f16, head dim 64, not causal) `samples/flash_attention.tsr` and `bench/handwritten/flash_attn_fwd.cu`, on sm_80 and
sm_90; on sm_90a the warpgroup-MMA `samples/tc_gemm_f16.tsr` (wgmma fed by the tensor memory accelerator's
swizzled bulk copies in its aligned variant) against `bench/handwritten/hgemm_wgmma_tma.cu` (the same by hand)
and `bench/handwritten/hgemm_wgmma.cu` (wgmma fed by cp.async into swizzled shared memory) -- and each architecture, both sides are compiled with `tessera.runtime.cuda.nvrtc.compile_cuda` (the
same options) and the table shows, per kernel:

* registers, spilled bytes (stores + loads) and shared memory: static (from the ptxas report) plus
  dynamic (Tessera's kernel info; for the hand-written side, the size its launch needs);
* **loop**: SASS instructions in the main loop (the k-loop: of the loops holding the most FFMA
  instructions -- HMMA for the tensor-core pair --, the shortest, from its label through the branch
  back; `tessera.runtime.cuda.sass`), with its FFMA (HMMA) count in parentheses as a check that both
  sides measure the same work;
* **total**: SASS instructions of the kernel, not counting the NOP padding at its end;
* **compile**: NVRTC compile time of the whole `.cu`, the median of `--repeat` compiles after a
  warm-up, the two sides interleaved so that noise hits both. It includes every kernel of the
  source: "(+N)" after a kernel's name counts the others. Tessera's side is what a launch with
  aligned arrays compiles: the ``_a16`` variant alone. The hand-written matmul has both a float4 and a scalar copy of its k-loop in
  one kernel (its loop figure is the float4 one's), the hand-written SGEMM only the aligned one.

The Tessera kernel measured is the one whose C name ends in ``_a16`` (specialized for 16-byte
aligned pointers and shapes divisible by 16) where the output has one, else its only kernel. The
goals: main loop within 1.1x of hand-written, compile time within 1.2x. The script is a report: it
exits 0 whether or not the goals are met, and 1 only if something fails to compile (a sample that
is missing or that Tessera rejects is shown as "not available").

    python bench/vs_handwritten.py [--repeat N] [--arch sm_80 --arch sm_90 --arch sm_90a]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass

from tessera.base.errors import CompileError, TesseraError
from tessera.base.options import CompileOptions
from tessera.runtime.cuda import nvrtc, sass
from tessera.transpile.driver import compile_source, load_source

LOOP_GOAL = 1.1
COMPILE_GOAL = 1.2
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HANDWRITTEN = os.path.join(ROOT, "bench", "handwritten")


@dataclass(frozen=True)
class Pair:
    """A sample and its hand-written twin; `variants` pins the sample to the twin's tiling."""

    title: str
    sample: str  # under samples/
    variants: Mapping[str, Mapping[str, int | str]]  # const values, and type parameters by name
    handwritten: str  # under bench/handwritten/
    kernel: str  # the hand-written kernel's C name
    opcode: str = "FFMA"  # the arithmetic instruction that finds the main loop and checks its work
    dynamic_smem: int = 0  # the hand-written kernel's dynamic shared memory at launch
    archs: tuple[str, ...] = ("sm_80", "sm_90")  # the targets the pair is compared on


PAIRS = (
    Pair("matmul", "matmul.tsr", {"matmul": {"BM": 64, "BN": 64}}, "matmul.cu", "matmul"),
    Pair("sgemm_pipelined", "sgemm_pipelined.tsr",
         {"sgemm": {"BM": 128, "BN": 128, "BK": 8, "stages": 3}}, "sgemm_pipelined.cu", "sgemm"),
    Pair("tc_gemm_f16", "tc_gemm_f16.tsr",
         {"tc_gemm_f16": {"BM": 128, "BN": 128, "BK": 32, "stages": 3, "NT": 256}}, "hgemm_mma.cu", "hgemm", "HMMA",
         3 * (128 * 40 + 32 * 136) * 2),  # kStages * sizeof(Stage)
    Pair("flash_attention", "flash_attention.tsr",
         {"flash_attention": {"causal": 0, "HD": 64, "BM": 64, "BN": 64, "stages": 2, "NT": 128, "T": "f16"}},
         "flash_attn_fwd.cu", "flash_fwd_d64", "HMMA", 5 * 64 * (64 + 8) * 2),  # sizeof(Smem<64>)
    Pair("tc_gemm wgmma", "tc_gemm_f16.tsr",
         {"tc_gemm_f16": {"BM": 128, "BN": 128, "BK": 32, "stages": 3, "NT": 256}}, "hgemm_wgmma.cu", "hgemm_wgmma",
         "HGMMA", 3 * (128 * 32 + 32 * 128) * 2, ("sm_90a",)),  # kSmem
    Pair("tc_gemm TMA", "tc_gemm_f16.tsr",
         {"tc_gemm_f16": {"BM": 128, "BN": 128, "BK": 32, "stages": 3, "NT": 256}}, "hgemm_wgmma_tma.cu",
         "hgemm_wgmma_tma", "HGMMA", 3 * (128 * 32 + 32 * 128) * 2, ("sm_90a",)),  # kStages * kStageBytes
)


@dataclass(frozen=True)
class Side:
    """One compiled kernel and what was measured of it."""

    label: str  # "tessera" or "by hand"
    name: str  # the .cu file's name, for NVRTC's messages
    source: str  # CUDA C
    kernel: str  # C name of the kernel measured
    others: int  # other kernels in the same source (their compile is in its compile time)
    registers: int
    spill_bytes: int
    shared_bytes: int
    loop: int
    loop_ops: int  # the pair's arithmetic instructions (FFMA or HMMA) in the loop
    total: int


class NotAvailable(Exception):
    """The Tessera side of a pair cannot be built yet (sample missing or rejected)."""


def tessera_cuda(pair: Pair, arch: str) -> tuple[str, int]:
    """The CUDA C Tessera emits for `pair`'s sample and its kernel's dynamic shared memory;
    NotAvailable if it is missing or rejected."""
    path = os.path.join(ROOT, "samples", pair.sample)
    if not os.path.exists(path):
        raise NotAvailable(f"samples/{pair.sample} does not exist")
    try:
        # What a launch with aligned arrays compiles: the aligned variant only.
        result = compile_source(load_source(path), options=CompileOptions(arch=arch, alignment="aligned"), variants=pair.variants)
        return result.cuda, max((k.dynamic_smem for k in result.kernels), default=0)
    except CompileError as e:
        raise NotAvailable(f"Tessera rejects it: {first_line(e)}") from e


def tessera_kernel(result: nvrtc.NvrtcResult) -> str:
    """The kernel to measure in Tessera's output: the ``_a16`` variant if any, else the only one."""
    names = [k.name for k in result.kernels]
    aligned = [n for n in names if n.endswith("_a16")]
    if len(aligned) == 1:
        return aligned[0]
    if len(names) == 1:
        return names[0]
    raise TesseraError(f"cannot tell which kernel to measure among {', '.join(names) or 'none'}")


def code_size(function_sass: str) -> int:
    """Instructions of one function, without the NOPs that pad it to its alignment."""
    ops = sass.instructions(function_sass)
    while ops and ops[-1] == "NOP":
        ops.pop()
    return len(ops)


def measure(label: str, name: str, source: str, arch: str, kernel: str | None = None, opcode: str = "FFMA",
            dynamic_smem: int = 0) -> Side:
    """Compile `source` and measure `kernel` (by default, Tessera's choice; see `tessera_kernel`)."""
    result = nvrtc.compile_cuda(source, name=name, arch=arch)
    if result.cubin is None:
        raise TesseraError(f"no SASS for {arch}: this NVRTC made PTX for {result.arch} only")
    kernel = kernel or tessera_kernel(result)
    res = result.kernel(kernel)
    text = sass.function_sass(sass.disassemble(result.cubin), kernel)
    loop = sass.main_loop(text, opcode)
    return Side(label, name, source, kernel, len(result.kernels) - 1, res.registers,
                res.spill_stores + res.spill_loads, res.shared_bytes + dynamic_smem, len(loop.ops), loop.count(opcode),
                code_size(text))


def compile_times(sides: tuple[Side, ...], arch: str, repeat: int) -> list[float]:
    """Median NVRTC compile time of each side's source, in seconds, the sides interleaved."""
    times: list[list[float]] = [[] for _ in sides]
    for _ in range(repeat):
        for side, samples in zip(sides, times):
            t0 = time.perf_counter()
            nvrtc.compile_cuda(side.source, name=side.name, arch=arch)
            samples.append(time.perf_counter() - t0)
    return [statistics.median(samples) for samples in times]


ROW = "{:<17}{:<9}{:<26}{:>6}{:>9}{:>8}{:>13}{:>8}{:>12}"
HEADER = ROW.format("", "", "kernel", "regs", "spill B", "smem B", "loop (F/HMMA)", "total", "compile ms")


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def side_row(title: str, side: Side, seconds: float) -> str:
    kernel = f"{side.kernel} (+{side.others})" if side.others else side.kernel
    return ROW.format(title, side.label, kernel, side.registers, side.spill_bytes, side.shared_bytes,
                      f"{side.loop} ({side.loop_ops})", side.total, f"{seconds * 1e3:.1f}")


def verdict(what: str, ratio: float, goal: float) -> str:
    return f"{what} {ratio:.2f}x (goal <= {goal}x) {'met' if ratio <= goal else 'MISSED'}"


def ratio_rows(ours: Side, theirs: Side, t_ours: float, t_theirs: float) -> list[str]:
    """The Tessera / hand-written ratios, and whether the goals are met."""
    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}" if b else "-"

    row = ROW.format("", "ratio", "", ratio(ours.registers, theirs.registers), "",
                     ratio(ours.shared_bytes, theirs.shared_bytes), ratio(ours.loop, theirs.loop),
                     ratio(ours.total, theirs.total), ratio(t_ours, t_theirs))
    goals = (f"{'':<17}{verdict('main loop', ours.loop / theirs.loop, LOOP_GOAL)}, "
             f"{verdict('compile', t_ours / t_theirs, COMPILE_GOAL)}")
    if ours.loop_ops != theirs.loop_ops:  # e.g. one loop unrolled twice: its length is not comparable
        goals += "; the loops do different work (FFMA/HMMA counts differ)"
    return [row, goals]


def report_pair(pair: Pair, arch: str, repeat: int) -> list[str]:
    """The table rows of one pair on one architecture. Raises on a failure to compile."""
    path = os.path.join(HANDWRITTEN, pair.handwritten)
    with open(path, encoding="utf-8") as f:
        theirs = measure("by hand", pair.handwritten, f.read(), arch, pair.kernel, pair.opcode, pair.dynamic_smem)
    try:
        cuda, dynamic = tessera_cuda(pair, arch)
    except NotAvailable as e:
        return [f"{pair.title:<17}not available: {e}"]
    ours = measure("tessera", pair.sample.replace(".tsr", ".cu"), cuda, arch, opcode=pair.opcode, dynamic_smem=dynamic)
    t_ours, t_theirs = compile_times((ours, theirs), arch, repeat)
    return [side_row(pair.title, ours, t_ours), side_row("", theirs, t_theirs),
            *ratio_rows(ours, theirs, t_ours, t_theirs)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=5, help="compiles per side for the median (default 5)")
    p.add_argument("--arch", action="append", help="target (repeatable; default sm_80, sm_90 and sm_90a)")
    args = p.parse_args()
    major, minor = nvrtc.nvrtc_version()
    print(f"NVRTC {major}.{minor}; compile time: median of {max(1, args.repeat)}, interleaved")
    failed = False
    for arch in args.arch or ["sm_80", "sm_90", "sm_90a"]:
        print(f"\n{arch}\n{HEADER}")
        for pair in (p for p in PAIRS if arch in p.archs):
            try:
                print("\n".join(report_pair(pair, arch, max(1, args.repeat))))
            except (OSError, TesseraError, KeyError) as e:
                failed = True
                print(f"{pair.title:<17}FAILED: {first_line(e)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
