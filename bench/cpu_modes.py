"""The CPU backend's two modes (issue 12) side by side: region mode (the code between barriers
runs as loops over the group's tiles, transpile/cpu/regions.py) and fiber mode (a fiber per
tile, `TESSERA_CPU_REGIONS=0`), each on one thread and on every CPU (`TESSERA_CPU_THREADS`),
and NVIDIA Warp's CPU path on the same work when `warp` is installed (skipped otherwise):

* **matmul16 256 / 512** -- a 16x16 shared-memory tiled matmul, one C element per tile, C = A @ B
  in float32 at 256^2 and 512^2 (Warp: its tile API, 16x16x16 tiles, `wp.launch_tiled`, as in
  issue 12's table);
* **matmul64 512** -- `samples/matmul.tsr` (64x64 block per 16x16 group, 4x4 per tile, tcopy) at
  512^2 (Warp: the same 16x16x16 tile kernel);
* **reduce 2^22** -- an 8 x 128 grid-stride reduction of 2^22 float32 with a shared-memory tree
  per group (Warp: 8 x 128 threads grid-striding with an atomic add per thread, as in issue 12's
  table: 9.5 ms).

The scaling over N threads is printed next to this machine's own ceiling, measured in the same
run by a small C++ program built with the same compiler: N threads each running the same
independent work as one thread does alone, for vectorized float arithmetic on L1-resident arrays
(what region mode's inner loops become) and for a scalar dependency chain (latency-bound, like
fiber switches). On a machine whose CPUs share a core's vector units (SMT siblings, or a virtual
machine's CPUs on one physical core), no program scales on the first kind of work.

Each configuration runs in its own process (the mode is fixed when a kernel compiles, the thread
count when the engine starts); the compile cache is warmed first, untimed. Every result is checked
against NumPy (the script exits 1 on a mismatch). Printed: the median and minimum of --repeats
launches in ms, then the ratios regions/fibers (1 thread), N threads vs 1 (regions), and
Tessera regions / Warp (1 thread each).

    python bench/cpu_modes.py [--repeats N] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

# The kernels are the ones the Numba-simulator bench measures (bench/, the script's folder, is on sys.path).
from cpu_vs_numba_sim import TSR_MATMUL, TSR_REDUCE

ROOT = Path(__file__).resolve().parents[1]
N_REDUCE = 1 << 22
GROUPS, TILES = 8, 128


def _time(fn: Any, repeats: int) -> tuple[float, float]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), min(times)


def _close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    if not np.allclose(got, want, rtol=1e-3, atol=1e-2):
        raise SystemExit(f"MISMATCH: {what}: max error {float(np.abs(got - want).max())}")


def _workloads(rng: np.random.Generator) -> dict[str, dict[str, np.ndarray]]:
    out = {}
    for n in (256, 512):
        a, b = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
        out[f"matmul16 {n}"] = {"A": a, "B": b, "want": a @ b}
    out["matmul64 512"] = out["matmul16 512"]
    x = rng.standard_normal(N_REDUCE, np.float32)
    out["reduce 2^22"] = {"x": x, "want": np.array(x.astype(np.float64).sum())}
    return out


def tessera_child(repeats: int) -> dict[str, Any]:
    """Time every kernel in this process's mode and thread count (set by the parent's env)."""
    import tessera

    m16 = tessera.compile(TSR_MATMUL, backend="cpu")
    m64 = tessera.load(str(ROOT / "samples" / "matmul.tsr"), backend="cpu")
    red = tessera.compile(TSR_REDUCE, backend="cpu")
    data = _workloads(np.random.default_rng(0))
    rows: dict[str, Any] = {}
    for name, d in data.items():
        if name.startswith("reduce"):
            part = np.zeros(GROUPS, np.float32)

            def run(d: dict[str, np.ndarray] = d, part: np.ndarray = part) -> None:
                red.block_reduce(d["x"], part, grid=GROUPS)
            regions = red["block_reduce"].info().regions
        else:
            n = d["A"].shape[0]
            c = np.zeros((n, n), np.float32)
            k, step = (m16.matmul16, 16) if name.startswith("matmul16") else (m64.matmul, 64)

            def run(k: Any = k, d: dict[str, np.ndarray] = d, c: np.ndarray = c, g: int = n // step) -> None:
                k(d["A"], d["B"], c, grid=(g, g))
            regions = (m16 if step == 16 else m64)[k.name].info().regions
        run()  # the first launch builds the kernel
        med, best = _time(run, repeats)
        if name.startswith("reduce"):
            _close(np.array(part.astype(np.float64).sum()), d["want"], f"tessera {name}")
        else:
            _close(c, d["want"], f"tessera {name}")
        rows[name] = {"median": med, "min": best, "regions": regions}
    return rows


def warp_child(repeats: int) -> dict[str, Any]:
    """The same work through Warp's CPU path (`wp.launch(..., device="cpu")`)."""
    try:
        import warp as wp
    except ImportError as e:
        return {"skipped": f"warp cannot be imported ({e})"}
    wp.config.quiet = True
    wp.init()

    @wp.kernel
    def matmul16(A: wp.array2d(dtype=float), B: wp.array2d(dtype=float), C: wp.array2d(dtype=float)):  # type: ignore
        i, j = wp.tid()
        acc = wp.tile_zeros(shape=(16, 16), dtype=float)
        for k in range(A.shape[1] // 16):
            a = wp.tile_load(A, shape=(16, 16), offset=(i * 16, k * 16))
            b = wp.tile_load(B, shape=(16, 16), offset=(k * 16, j * 16))
            wp.tile_matmul(a, b, acc)
        wp.tile_store(C, acc, offset=(i * 16, j * 16))

    @wp.kernel
    def reduce(x: wp.array(dtype=float), out: wp.array(dtype=float), n: int, threads: int):  # type: ignore
        t = wp.tid()
        acc = wp.float32(0.0)
        k = t
        while k < n:
            acc += x[k]
            k += threads
        wp.atomic_add(out, 0, acc)

    data = _workloads(np.random.default_rng(0))
    rows: dict[str, Any] = {"version": wp.config.version}
    for name, d in data.items():
        if name.startswith("reduce"):
            x = wp.array(d["x"], dtype=float, device="cpu")
            out = wp.zeros(1, dtype=float, device="cpu")

            def run(x: Any = x, out: Any = out) -> None:
                out.zero_()
                wp.launch(reduce, dim=GROUPS * TILES, inputs=[x, out, N_REDUCE, GROUPS * TILES], device="cpu")
                wp.synchronize_device("cpu")
        else:
            n = d["A"].shape[0]
            a, b = wp.array(d["A"], dtype=float, device="cpu"), wp.array(d["B"], dtype=float, device="cpu")
            c = wp.zeros((n, n), dtype=float, device="cpu")

            def run(a: Any = a, b: Any = b, c: Any = c, n: int = n) -> None:
                wp.launch_tiled(matmul16, dim=(n // 16, n // 16), inputs=[a, b, c], block_dim=64, device="cpu")
                wp.synchronize_device("cpu")
        run()
        med, best = _time(run, repeats)
        got = out.numpy()[0] if name.startswith("reduce") else c.numpy()
        _close(np.asarray(got, np.float64), d["want"], f"warp {name}")
        rows[name] = {"median": med, "min": best}
    return rows


CEILING = r"""
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
static volatile float fsink;
static volatile unsigned usink;
static void vec() {  // vectorizable float arithmetic on L1-resident arrays
    alignas(64) static thread_local float a[1024], b[1024], acc[1024];
    for (int i = 0; i < 1024; ++i) { a[i] = i * 1e-3f; b[i] = 1.0f - i * 1e-4f; acc[i] = 0.0f; }
    for (int r = 0; r < 40000; ++r)
        for (int i = 0; i < 1024; ++i) acc[i] = acc[i] * 0.999f + a[i] * b[i];
    fsink = acc[7];
}
static void chain() {  // a scalar dependency chain
    unsigned x = 1;
    for (long r = 0; r < 100000000; ++r) x = x * 1664525u + 1013904223u;
    usink = x;
}
static double run(void (*f)(), int n) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> ts;
    for (int i = 0; i < n; ++i) ts.emplace_back(f);
    for (auto& t : ts) t.join();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
int main(int argc, char** argv) {
    int n = std::atoi(argv[1]);
    double best[4] = {1e9, 1e9, 1e9, 1e9};
    for (int k = 0; k < 3; ++k) {
        double v[4] = {run(vec, 1), run(vec, n), run(chain, 1), run(chain, n)};
        for (int i = 0; i < 4; ++i) best[i] = v[i] < best[i] ? v[i] : best[i];
    }
    std::printf("%.3f %.3f\n", n * best[0] / best[1], n * best[2] / best[3]);
}
"""


def machine_ceiling(ncpu: int, tmp: str) -> tuple[float, float]:
    """This machine's speedup of `ncpu` threads over one on independent work (each thread does
    one thread's work): vectorized float arithmetic, and a scalar dependency chain."""
    from tessera.runtime.host.build import find_cxx

    src, exe = Path(tmp) / "ceiling.cpp", Path(tmp) / "ceiling"
    src.write_text(CEILING)
    subprocess.run([*find_cxx(), "-O2", "-pthread", str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe), str(ncpu)], check=True, capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1])




def _child(kind: str, env: dict[str, str], repeats: int) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, "--child", kind, "--repeats", str(repeats)],
                          env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{kind} child failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="3 repeats")
    p.add_argument("--child", choices=("tessera", "warp"), help=argparse.SUPPRESS)
    args = p.parse_args()
    repeats = 3 if args.quick else args.repeats
    if args.child == "tessera":
        print(json.dumps(tessera_child(repeats)))
        return 0
    if args.child == "warp":
        print(json.dumps(warp_child(repeats)))
        return 0
    ncpu = os.cpu_count() or 1
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="tessera-modes-") as cache:
        base = {**os.environ, "TESSERA_CACHE_DIR": cache}
        for mode, flag in (("regions", "1"), ("fibers", "0")):
            for threads in (1, ncpu):
                env = {**base, "TESSERA_CPU_REGIONS": flag, "TESSERA_CPU_THREADS": str(threads)}
                if threads == 1:
                    _child("tessera", env, 1)  # warm the compile cache, untimed
                results[f"{mode} {threads}T"] = _child("tessera", env, repeats)
        warp = _child("warp", {**base, "OMP_NUM_THREADS": "1"}, repeats)
        vec, chain = machine_ceiling(ncpu, cache)
    cols = list(results)
    print(f"median (min) ms of {repeats} launches; {ncpu} CPUs; every result checked against NumPy")
    print(f"{'kernel':14}" + "".join(f"{c:>18}" for c in cols) + f"{'warp CPU':>18}")
    for name in results[cols[0]]:
        cells = [f"{results[c][name]['median']:8.2f} ({results[c][name]['min']:6.2f})" for c in cols]
        w = warp.get(name)
        cells.append(f"{w['median']:8.2f} ({w['min']:6.2f})" if w else f"{'skipped':>17}")
        print(f"{name:14}" + "".join(f"{x:>18}" for x in cells))
    if "skipped" in warp:
        print(f"Warp: SKIPPED: {warp['skipped']}")
    else:
        print(f"Warp {warp['version']} (one CPU thread: Warp's CPU launches run serially)")
    print(f"\nthis machine's own {ncpu}-thread speedup on independent work (C++, same compiler): vectorized float "
          f"{vec:.2f}x, scalar chain {chain:.2f}x (of {ncpu})")
    print("ratios (medians): regions/fibers at 1T, 1T/NT speedup in each mode, regions/warp at 1T")
    for name in results[cols[0]]:
        r1, rn = results["regions 1T"][name]["median"], results[f"regions {ncpu}T"][name]["median"]
        f1, fn = results["fibers 1T"][name]["median"], results[f"fibers {ncpu}T"][name]["median"]
        line = (f"{name:14} regions/fibers {r1 / f1:5.2f}x   scaling regions {r1 / rn:4.2f}x fibers {f1 / fn:4.2f}x"
                f" (of {ncpu})   region mode: {results['regions 1T'][name]['regions']}")
        if name in warp:
            line += f"   regions/warp {r1 / warp[name]['median']:5.2f}x"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
