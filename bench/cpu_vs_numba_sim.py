"""Tessera's CPU backend versus Numba's CUDA simulator on the same two kernels.

Both tools run CUDA-style kernels (blocks of threads, shared memory, barriers) without a GPU;
this script writes the same two kernels in `.tsr` and in Numba CUDA and measures, in one run:

* **block_reduce** -- a 128-thread shared-memory tree reduction over n = 2**18 float32 with 8
  groups: each tile grid-strides over the input, the group reduces its 128 partial sums in
  shared memory (``tbarrier()`` / ``cuda.syncthreads()`` between halvings) and tile 0 writes
  the group's partial sum.  Checked against NumPy (per group and in total).
* **matmul16** -- a 16x16 tiled shared-memory matmul, C = A @ B in float32: 2-D groups of
  16x16 tiles, one C element per tile, 16x16 shared tiles of A and B, loop over K in steps of 16
  with a barrier after loading and after using the tiles.  At 128x128 (and 256x256), checked
  against NumPy.

For each kernel it prints:

* **compile**: Tessera's first ``tessera.compile`` + launch with an empty ``TESSERA_CACHE_DIR``
  (a fresh temporary folder per kernel) minus its steady-state launch time; for the Numba
  simulator, which has no compile step, its first call (simulated launch included).  The
  one-time, per-process front-end setup (imports, grammar, C++ compiler probe) is paid by a
  throw-away warm-up kernel first and shown on its own line.
* **steady state**: the median launch time of Tessera (``--repeats`` launches) and of the Numba
  simulator (the simulator takes seconds to minutes per launch, so it runs only twice: the first
  call, then one timed steady-state call; with ``--quick`` once, and that call is both), and the
  speedup Numba-sim / Tessera.  **Goal: a speedup of at least 1000x.**  Tessera's fastest launch
  and the speedup against it are shown as well: on a shared machine the median can carry other
  processes' load.
* for the matmul at 256x256 also NumPy's ``A @ B`` (median), and Tessera / NumPy: the cost of
  emulating the GPU's execution model on the CPU compared with a BLAS call (no goal; informative).

``NUMBA_ENABLE_CUDASIM=1`` is set in ``os.environ`` before Numba is imported.  Without an
importable Numba (``pip install numba``) the script says so and exits 0.  It exits 1 only if a
result does not match NumPy; a missed speed goal is reported, not an error.

    python bench/cpu_vs_numba_sim.py [--quick] [--skip-sim-256] [--repeats N]

``--quick`` shrinks nothing (same sizes, same kernels); it only limits repeats.  At 256x256 the
simulator takes minutes per launch: ``--skip-sim-256`` leaves it out.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

# The simulator is chosen when numba.cuda is first imported: set this before any numba import.
os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

GOAL_SPEEDUP = 1000.0
N_REDUCE = 2**18
GROUPS = 8
TILES = 128
TILE = 16
SIZES = (128, 256)

# numba.cuda, bound by import_numba_cuda().  The kernels must name it as a module global: the
# simulator swaps every global bound to numba.cuda for its per-launch fake module.
cuda: Any = None

KERNELS = Path(__file__).resolve().parent / "kernels"  # shared with bench/cpu_streaming.py and tests/transpile/cpu/
TSR_REDUCE = (KERNELS / "block_reduce.tsr").read_text()
TSR_MATMUL = (KERNELS / "matmul16.tsr").read_text()

TSR_WARMUP = """
@kernel tile[(32,)]
def warmup(x: mut f32[n]):
    i = global_linear_id()
    if i < n:
        x[i] = x[i] + 1.0
"""


def import_numba_cuda():
    """numba with the CUDA simulator on (and the global `cuda` bound), or None after saying why not."""
    global cuda
    try:
        import numba
        from numba import cuda
    except Exception as e:  # ImportError, or a broken install failing on import
        print(f"SKIPPED: numba cannot be imported ({type(e).__name__}: {e}); `pip install numba` to run this benchmark")
        return None
    if not numba.config.ENABLE_CUDASIM:
        print("SKIPPED: numba was imported before NUMBA_ENABLE_CUDASIM=1 could take effect; run this script directly")
        return None
    return numba


def make_numba_kernels(float32) -> tuple[Callable, Callable]:
    """The two kernels in Numba CUDA, statement for statement as in the .tsr versions."""

    @cuda.jit
    def block_reduce(x, partial):
        smem = cuda.shared.array(128, float32)
        i = cuda.threadIdx.x
        acc = float32(0.0)
        for k in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
            acc += x[k]
        smem[i] = acc
        cuda.syncthreads()
        s = 64
        while s > 0:
            if i < s:
                smem[i] += smem[i + s]
            cuda.syncthreads()
            s //= 2
        if i == 0:
            partial[cuda.blockIdx.x] = smem[0]

    @cuda.jit
    def matmul16(A, B, C):
        As = cuda.shared.array((16, 16), float32)
        Bs = cuda.shared.array((16, 16), float32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        row = cuda.blockIdx.y * 16 + ty
        col = cuda.blockIdx.x * 16 + tx
        acc = float32(0.0)
        for k0 in range(0, A.shape[1], 16):
            As[ty, tx] = A[row, k0 + tx]
            Bs[ty, tx] = B[k0 + ty, col]
            cuda.syncthreads()
            for kk in range(16):
                acc += As[ty, kk] * Bs[kk, tx]
            cuda.syncthreads()
        C[row, col] = acc

    return block_reduce, matmul16


@contextlib.contextmanager
def fresh_cache_dir() -> Iterator[str]:
    """TESSERA_CACHE_DIR set to a new empty folder for the duration."""
    old = os.environ.get("TESSERA_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="tessera-bench-cache-") as d:
        os.environ["TESSERA_CACHE_DIR"] = d
        try:
            yield d
        finally:
            if old is None:
                os.environ.pop("TESSERA_CACHE_DIR", None)
            else:
                os.environ["TESSERA_CACHE_DIR"] = old


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def median_time(fn: Callable[[], object], repeats: int) -> float:
    return median_min(fn, repeats)[0]


def median_min(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    times = [timed(fn) for _ in range(repeats)]
    return statistics.median(times), min(times)


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def ratio(num: float | None, den: float | None) -> str:
    return "-" if num is None or den is None or den <= 0 else f"{num / den:,.0f}x"


def reduce_reference(x: np.ndarray) -> np.ndarray:
    """Per-group partial sums in float64: group g owns x[k] with (k // TILES) % GROUPS == g."""
    return x.astype(np.float64).reshape(-1, GROUPS, TILES).sum(axis=(0, 2))


class Results:
    def __init__(self) -> None:
        self.failures: list[str] = []

    def check(self, what: str, ok: bool, detail: str) -> None:
        print(f"  check {what}: {'ok' if ok else 'MISMATCH'} ({detail})")
        if not ok:
            self.failures.append(what)


def run_sim(launch: Callable[[], object], runs: int, label: str) -> tuple[float, float]:
    """(first call, steady-state median) of the Numba simulator; prints progress (it is slow)."""
    print(f"  numba-sim {label}: run 1/{runs} ...", end="", flush=True)
    first = timed(launch)
    print(f" {first:.1f} s", flush=True)
    rest = []
    for r in range(2, runs + 1):
        print(f"  numba-sim {label}: run {r}/{runs} ...", end="", flush=True)
        rest.append(timed(launch))
        print(f" {rest[-1]:.1f} s", flush=True)
    return first, statistics.median(rest) if rest else first


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="same sizes and kernels, fewer repeats (the simulator runs once per kernel)")
    ap.add_argument("--skip-sim-256", action="store_true", help="do not run the simulator on the 256x256 matmul")
    ap.add_argument("--repeats", type=int, default=None,
                    help="Tessera and NumPy launches per steady-state median (default 20, 5 with --quick)")
    a = ap.parse_args()
    repeats = a.repeats or (5 if a.quick else 20)
    sim_runs = 1 if a.quick else 2

    numba = import_numba_cuda()
    if numba is None:
        return 0
    import tessera

    nb_reduce, nb_matmul = make_numba_kernels(numba.float32)
    res = Results()
    rng = np.random.default_rng(0)
    threads = os.environ.get("TESSERA_CPU_THREADS") or f"{os.cpu_count()} (one per CPU)"
    print(f"Tessera {tessera.__version__} CPU backend (worker threads: {threads}) vs numba {numba.__version__} "
          f"CUDA simulator; NumPy {np.__version__}; Python {sys.version.split()[0]}")
    print(f"repeats: Tessera/NumPy median of {repeats}, numba-sim {sim_runs} run(s) per kernel"
          + (" (--quick)" if a.quick else ""))

    # One-time, per-process front-end cost (imports, grammar, C++ compiler probe), kept out of
    # the per-kernel compile times below.
    with fresh_cache_dir():
        warm = np.zeros(64, np.float32)
        t_setup = timed(lambda: tessera.compile(TSR_WARMUP, backend="cpu").warmup(warm, grid=2))
    print(f"one-time Tessera front-end setup + warm-up kernel (empty cache): {t_setup * 1e3:.0f} ms\n")

    # (kernel, Tessera compile, sim first call, Tessera median, Tessera min, sim steady)
    rows: list[tuple[str, float | None, float | None, float, float, float | None]] = []

    # (a) block reduction ----------------------------------------------------------------------
    print(f"[block_reduce] n = 2**18 float32, {GROUPS} groups x {TILES} tiles")
    x = rng.standard_normal(N_REDUCE).astype(np.float32)
    ref = reduce_reference(x)
    part = np.zeros(GROUPS, np.float32)
    with fresh_cache_dir():
        state: dict = {}

        def first_reduce() -> None:
            state["mod"] = tessera.compile(TSR_REDUCE, backend="cpu")
            state["mod"].block_reduce(x, part, grid=GROUPS)

        t_first = timed(first_reduce)
        k = state["mod"].block_reduce
        res.check("tessera block_reduce", np.allclose(part, ref, rtol=1e-4, atol=1e-2),
                  f"sum {part.sum(dtype=np.float64):.5f} vs NumPy {ref.sum():.5f}")
        part[:] = 0
        t_tsr, t_min = median_min(lambda: k(x, part, grid=GROUPS), repeats)
    part_nb = np.zeros(GROUPS, np.float32)
    sim_first, t_sim = run_sim(lambda: nb_reduce[GROUPS, TILES](x, part_nb), sim_runs, "block_reduce")
    res.check("numba-sim block_reduce", np.allclose(part_nb, ref, rtol=1e-4, atol=1e-2),
              f"sum {part_nb.sum(dtype=np.float64):.5f} vs NumPy {ref.sum():.5f}")
    rows.append(("block_reduce n=2^18", max(t_first - t_tsr, 0.0), sim_first, t_tsr, t_min, t_sim))
    print()

    # (b) tiled matmul ---------------------------------------------------------------------------
    numpy_256: tuple[float, float] | None = None
    mats = {}
    for n in SIZES:
        A = rng.standard_normal((n, n)).astype(np.float32)
        B = rng.standard_normal((n, n)).astype(np.float32)
        mats[n] = (A, B, A.astype(np.float64) @ B.astype(np.float64))
    with fresh_cache_dir():
        holder: dict = {}
        n0 = SIZES[0]
        C0 = np.zeros((n0, n0), np.float32)

        def first_matmul() -> None:
            holder["mod"] = tessera.compile(TSR_MATMUL, backend="cpu")
            holder["mod"].matmul16(mats[n0][0], mats[n0][1], C0, grid=(n0 // TILE, n0 // TILE))

        t_first = timed(first_matmul)  # compiled once; the 256x256 launch reuses the same variant
        mm = holder["mod"].matmul16
        for n in SIZES:
            print(f"[matmul16] {n}x{n} float32, groups of 16x16 tiles, grid ({n // TILE}, {n // TILE})")
            A, B, ref_c = mats[n]
            C = np.zeros((n, n), np.float32)
            grid = (n // TILE, n // TILE)

            def launch(A=A, B=B, C=C, grid=grid) -> None:
                mm(A, B, C, grid=grid)

            launch()
            res.check(f"tessera matmul16 {n}", np.allclose(C, ref_c, rtol=1e-4, atol=1e-3),
                      f"max |C - A@B| = {np.abs(C - ref_c).max():.2e}")
            t_tsr, t_min = median_min(launch, repeats)
            t_compile = max(t_first - t_tsr, 0.0) if n == n0 else None
            sim_first = t_sim = None
            if n == 256 and a.skip_sim_256:
                print("  numba-sim matmul16 256: skipped (--skip-sim-256)")
            else:
                C_nb = np.zeros((n, n), np.float32)

                def launch_sim(A=A, B=B, C_nb=C_nb, grid=grid) -> None:
                    nb_matmul[grid, (TILE, TILE)](A, B, C_nb)

                sim_first, t_sim = run_sim(launch_sim, sim_runs, f"matmul16 {n}")
                res.check(f"numba-sim matmul16 {n}", np.allclose(C_nb, ref_c, rtol=1e-4, atol=1e-3),
                          f"max |C - A@B| = {np.abs(C_nb - ref_c).max():.2e}")
            rows.append((f"matmul16 {n}x{n}", t_compile, sim_first if n == n0 else None, t_tsr, t_min, t_sim))
            if n == 256:
                A @ B  # noqa: B018 - warm up the BLAS threads
                numpy_256 = (median_time(lambda A=A, B=B: A @ B, max(repeats, 50)), t_tsr)
            print()

    # report --------------------------------------------------------------------------------------
    print("compile (Tessera: first compile+launch, empty cache, minus steady launch; numba-sim: first call,")
    print("         which includes the simulated launch -- the simulator has no compile step)")
    print(f"  {'kernel':<22} {'Tessera ms':>12} {'numba-sim first call ms':>24}")
    for name, comp, sim_first, *_ in rows:
        if comp is not None or sim_first is not None:
            print(f"  {name:<22} {ms(comp):>12} {ms(sim_first):>24}")
    print()
    print(f"steady-state launch (median)                               goal: speedup >= {GOAL_SPEEDUP:,.0f}x")
    print(f"  {'kernel':<22} {'Tessera ms':>12} {'numba-sim ms':>14} {'speedup':>10}  goal    "
          f"{'(Tessera min ms':>16} {'speedup vs min)':>16}")
    for name, _, _, t_tsr, t_min, t_sim in rows:
        verdict = "-" if t_sim is None else ("met" if t_sim / t_tsr >= GOAL_SPEEDUP else "MISSED")
        print(f"  {name:<22} {ms(t_tsr):>12} {ms(t_sim):>14} {ratio(t_sim, t_tsr):>10}  {verdict:<6}  "
              f"{ms(t_min):>16} {ratio(t_sim, t_min):>16}")
    if numpy_256 is not None:
        t_np, t_tsr = numpy_256
        print()
        print("emulation cost at 256x256 (informative): Tessera's 16x16-tile kernel vs NumPy A @ B (BLAS)")
        print(f"  Tessera {t_tsr * 1e3:.3f} ms, NumPy {t_np * 1e3:.3f} ms, Tessera / NumPy = {t_tsr / t_np:,.1f}x")
    if res.failures:
        print(f"\nFAILED: results differ from NumPy: {', '.join(res.failures)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
