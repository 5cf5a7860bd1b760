"""The autotuner on its search spaces: pruning, the cost model's ranking, and how it compares with
measured times.

For each space in `SPACES` (one entry per `.tsr` kernel with `@autotune`) and each architecture
(sm_80, sm_90):
1. every candidate compiled (transpile + NVRTC, no GPU) and judged at the model shape: how many
   each pruning rule removed, and the cost model's ranking (the top and bottom five);
2. on the CPU backend at a small shape, the survivors' measured times against the model's
   ranking for the same shape: the Spearman rank correlation. CPU times are NOT GPU times: a CPU
   runs the tiles of a group one after the other, with no shared-memory banks, no warps and no
   DRAM roof, so this correlation says little about the model's quality on a GPU; it is printed
   because it is what can be measured here;
3. with a GPU (skipped without one): every survivor timed with CUDA events at the model shape,
   the model's first choice's time as a fraction of the best measured (goal >= 0.9), and the time
   a first launch takes to tune (top-4 measured).

    python bench/autotune_bench.py [--cpu-candidates N] [--archs sm_80,sm_90] [--spaces tc_gemm_f16,sgemm]

Adding a space is one `Space(...)` entry in `SPACES`.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
GOAL = 0.9


def _gemm_args(dtype: Any) -> Callable[[dict[str, int]], tuple]:
    def make(s: dict[str, int]) -> tuple:
        rng = np.random.default_rng(0)
        a = rng.standard_normal((s["M"], s["K"])).astype(dtype)
        b = rng.standard_normal((s["K"], s["N"])).astype(dtype)
        return a, b, np.zeros((s["M"], s["N"]), np.float32)
    return make


def _gemm_grid(s: dict[str, int]) -> Callable[[dict[str, Any]], tuple[int, int]]:
    return lambda c: ((s["N"] + c["BN"] - 1) // c["BN"], (s["M"] + c["BM"] - 1) // c["BM"])


@dataclass(frozen=True)
class Space:
    name: str
    sample: str                                        # relative to the repository
    kernel: str
    make_args: Callable[[dict[str, int]], tuple]        # shapes -> launch arguments
    grid: Callable[[dict[str, int]], Callable]           # shapes -> grid function of the constants
    model_shape: dict[str, int]
    cpu_shape: dict[str, int]


SPACES = [
    Space("pipelined SGEMM (f32)", "samples/sgemm_pipelined.tsr", "sgemm", _gemm_args(np.float32), _gemm_grid,
          {"M": 4096, "N": 4096, "K": 4096}, {"M": 256, "N": 256, "K": 64}),
    Space("tensor-core GEMM (f16 -> f32)", "samples/tc_gemm_f16.tsr", "tc_gemm_f16", _gemm_args(np.float16),
          _gemm_grid, {"M": 4096, "N": 4096, "K": 4096}, {"M": 256, "N": 256, "K": 128}),
]


def spearman(x: list[float], y: list[float]) -> float:
    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2 + 1
            i = j + 1
        return r
    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sx = math.sqrt(sum((a - mx) ** 2 for a in rx))
    sy = math.sqrt(sum((b - my) ** 2 for b in ry))
    return cov / (sx * sy) if sx and sy else float("nan")


def judge(space: Space, arch: str, shapes: dict[str, int]) -> list:
    from tessera.autotune import groups_function
    from tessera.autotune.search import candidates, judge_all
    from tessera.transpile.driver import front_end, load_source
    from tessera.transpile.passes.autotune_spec import tune_spaces

    front = front_end(load_source(os.path.join(ROOT, space.sample)))
    tspace = tune_spaces(front.module, front.source)[space.kernel]
    configs = candidates(tspace, {})
    return judge_all(front, arch, space.kernel, configs, {}, shapes,
                     groups_function(space.kernel, space.grid(shapes)), progress=False)


def text(cfg: tuple) -> str:
    return ", ".join(f"{n}={v}" for n, v in cfg)


def report_model(space: Space, arch: str) -> list:
    t0 = time.perf_counter()
    judged = judge(space, arch, space.model_shape)
    took = time.perf_counter() - t0
    pruned = Counter(j.rule for j in judged if j.pruned)
    survivors = sorted((j for j in judged if not j.pruned), key=lambda j: j.estimate.time_us)
    shape = ", ".join(f"{k}={v}" for k, v in space.model_shape.items())
    print(f"\n## {space.name} on {arch}, {shape}: {len(judged)} candidates, judged in {took:.1f} s")
    rules = ", ".join(f"{r}: {n}" for r, n in sorted(pruned.items())) or "none"
    print(f"pruned {sum(pruned.values())} ({rules}); {len(survivors)} survive")
    for j in [j for j in judged if j.pruned][:6]:
        print(f"  pruned {text(j.config)}: {j.rule}: {j.reason}")
    print("model ranking (estimates):")
    shown = survivors if len(survivors) <= 10 else survivors[:5] + [None] + survivors[-5:]
    for j in shown:
        if j is None:
            print("  ...")
            continue
        e, r = j.estimate, j.resources
        print(f"  {survivors.index(j) + 1:>3}. {e.time_us:>9.1f} us  {e.bound:<13} occ {e.occupancy:.2f}  "
              f"regs {r.registers:>3}  smem {r.shared:>6}  {text(j.config)}")
    return survivors


def report_cpu(space: Space, arch: str, limit: int) -> None:
    import tessera
    from tessera.autotune.measure import measure

    survivors = sorted((j for j in judge(space, arch, space.cpu_shape) if not j.pruned),
                       key=lambda j: j.estimate.time_us)
    if len(survivors) > limit:  # evenly spread over the ranking
        step = len(survivors) / limit
        survivors = [survivors[int(i * step)] for i in range(limit)]
    mod = tessera.load(os.path.join(ROOT, space.sample), backend="cpu", arch=arch)
    args = space.make_args(space.cpu_shape)
    grid = space.grid(space.cpu_shape)
    t0 = time.perf_counter()
    times = [measure(mod[space.kernel], dict(j.config), args, {}, grid, repeat=3) for j in survivors]
    ok = [(j.estimate.time_us, t) for j, t in zip(survivors, times) if math.isfinite(t)]
    rho = spearman([a for a, _ in ok], [b for _, b in ok])
    best = min(times)
    first = times[0]
    shape = ", ".join(f"{k}={v}" for k, v in space.cpu_shape.items())
    print(f"CPU backend at {shape} ({len(ok)} survivors timed in {time.perf_counter() - t0:.0f} s; CPU times are "
          f"not GPU times): Spearman(model, measured) = {rho:+.2f}; the model's first choice runs at "
          f"{best / first:.2f} of the best CPU time")


def report_gpu(space: Space, survivors: list) -> None:
    import tessera
    from tessera.autotune.measure import measure

    mod = tessera.load(os.path.join(ROOT, space.sample), backend="cuda")
    args = space.make_args(space.model_shape)
    grid = space.grid(space.model_shape)
    times = [measure(mod[space.kernel], dict(j.config), args, {}, grid, repeat=10) for j in survivors]
    best = min(times)
    frac = best / times[0] if math.isfinite(times[0]) else 0.0
    rho = spearman([j.estimate.time_us for j, t in zip(survivors, times) if math.isfinite(t)],
                   [t for t in times if math.isfinite(t)])
    print(f"GPU {mod.arch}: model's first choice {times[0]:.3f} ms, best measured {best:.3f} ms "
          f"({text(survivors[times.index(best)].config)}): {frac:.2f} of the best (goal >= {GOAL}); "
          f"Spearman(model, measured) = {rho:+.2f}")
    tessera.autotune.clear()
    t0 = time.perf_counter()
    mod[space.kernel](*args, grid=grid)
    print(f"tuning on a first launch (compile + prune + rank + measure top-4): {time.perf_counter() - t0:.1f} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--archs", default="sm_80,sm_90")
    p.add_argument("--cpu-candidates", type=int, default=12, help="survivors timed on the CPU backend")
    p.add_argument("--spaces", default="", help="only these kernels (comma-separated names; default: every space)")
    args = p.parse_args()
    wanted = {n for n in args.spaces.split(",") if n}
    unknown = wanted - {s.kernel for s in SPACES}
    if unknown:
        p.error(f"no space for {', '.join(sorted(unknown))}; the spaces are {', '.join(s.kernel for s in SPACES)}")
    from tessera.runtime.devices import cuda_status

    gpu, why = cuda_status()
    for space in SPACES:
        if wanted and space.kernel not in wanted:
            continue
        for arch in args.archs.split(","):
            report_model(space, arch)
            report_cpu(space, arch, args.cpu_candidates)
        if gpu:
            from tessera.runtime.cuda.driver import device

            report_gpu(space, report_model(space, device().arch))
        else:
            print(f"\nno GPU ({why}): the model's first choice as a fraction of the best measured time and the "
                  "tuning time are measured only with one")


if __name__ == "__main__":
    main()
