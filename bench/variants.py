"""Compiling many variants of one kernel: parse once, specialize per set of const values.

The autotuner compiles dozens of variants of a kernel (one per set of `const` parameter values).
This measures, in one process, the transpile time (`.tsr` to CUDA C, no NVRTC) of the 16 variants
BM, BN in {16, 32, 64, 128} of `samples/matmul.tsr`:

* **16 full compiles** -- `tessera.transpile.driver.compile_source` once per variant (parse, every pass,
  emission), the baseline;
* **16 variants** -- `tessera.transpile.driver.front_end` once (parse, module constants), then
  `compile_variant` per variant (specialize, kernel headers, typecheck, checks, lowering, emission).

Both are timed best-of-`--repeat` after a warm-up, the garbage collector paused while timing;
the ratio is printed with the goal (< 0.4x).

    python bench/variants.py [--repeat N] [FILE.tsr]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import time

GOAL = 0.4
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCKS = (16, 32, 64, 128)


def best_of(fn, repeat: int) -> float:
    """Best wall time of `repeat` calls after a warm-up, with the garbage collector paused while
    timing (as `timeit` does: a collection landing in one run is noise, not a cost of either side)."""
    fn()
    best = float("inf")
    gc.collect()
    gc.disable()
    try:
        for _ in range(max(1, repeat)):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
    finally:
        gc.enable()
    return best


def main() -> int:
    from tessera.transpile.driver import compile_source, compile_variant, front_end, load_source

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("file", nargs="?", default=os.path.join(ROOT, "samples", "matmul.tsr"))
    args = p.parse_args()
    src = load_source(args.file)
    variants = [{"matmul": {"BM": bm, "BN": bn}} for bm, bn in itertools.product(BLOCKS, BLOCKS)]

    def full() -> None:
        for v in variants:
            compile_source(src, variants=v)

    def shared() -> None:
        front = front_end(src)
        for v in variants:
            compile_variant(front, variants=v)

    t_full = best_of(full, args.repeat)
    t_shared = best_of(shared, args.repeat)
    ratio = t_shared / t_full
    print(f"{os.path.basename(args.file)}: {len(variants)} variants")
    print(f"  16 full compiles (baseline)     {t_full * 1e3:8.1f} ms  ({t_full / len(variants) * 1e3:.2f} ms each)")
    print(f"  parse once + 16 variants        {t_shared * 1e3:8.1f} ms  ({t_shared / len(variants) * 1e3:.2f} ms each)")
    print(f"  ratio {ratio:.2f}x (goal < {GOAL}x): {'ok' if ratio < GOAL else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
