"""The CPU backend at memory speed (issue 32) against NVIDIA Warp's CPU path and NumPy, in one run:

* **reduce 2^18 / 2^22** -- an 8 x 128 grid-stride reduction of float32
  (`for k in range(global_linear_id(), n, grid_tile_count()): acc += x[k]`, then a shared-memory
  tree per group), on one thread, with its bandwidth (goal: <= 1.0x Warp, >= 5 GB/s); Warp: the same
  8 x 128 threads grid-striding with an atomic add per thread, and, as a second baseline, the same
  reduction written with Warp's tile API (each of 8 blocks of 128 grid-strides over 1024-element
  tiles, `wp.tile_sum`, one atomic add per block);
* **matmul16 256 / 512** -- a 16x16 shared-memory tiled matmul (Warp: its tile API, 16x16x16 tiles;
  goal: stays ahead);
* **bias+gelu 2^20** -- a map kernel, `h = X + B; Y = 0.5 h (1 + tanh(0.79788 (h + 0.044715 h^3)))`
  (Warp: a thread per element; NumPy: the same expression in float32);
* **layernorm 1024x1024** -- a row kernel, a group of 128 tiles per row, the mean and the variance
  each by a group-stride loop and a shared-memory tree (Warp: a thread per row; NumPy: mean/var);
  goal for these two: <= 1.0x the faster of Warp and NumPy;
* **ops.layer_norm 1024x1024** -- `tessera.ops.layer_norm(x, weight, bias)` (rows.tsr: per-tile
  vector access and group reductions, the autotuner's configuration; region mode since
  transpile/cpu/group_reduce.py) against NumPy's `(x - mean) / sqrt(var + eps) * weight + bias`;
* **launch 1 / 8 groups** -- a 32-tile kernel that adds one to 32 elements per group, through the
  Python API (goal: <= Warp), in us, CPU time and wall time;
* **scaling** -- Tessera's reduction at 2^22, layer norm and matmul16 at 512 on 1 and 2 threads.

Tessera runs with `TESSERA_CPU_THREADS=1` except in the scaling rows (Warp's CPU launches run on
one thread). The one-thread rows are timed in the calling thread's CPU time (`time.thread_time`:
Tessera's worker 0, Warp's CPU launches and NumPy all run on it), which the other engineers' load
on this shared machine hardly moves; the scaling rows in wall time. Every result is checked against
NumPy (exit 1 on a mismatch). Printed: median and minimum of --repeats runs in ms (launches in us),
then the ratios of the medians. Warp's rows are
skipped with a message when `warp` cannot be imported (`pip install warp-lang`).

    python bench/cpu_streaming.py [--repeats N] [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

GROUPS, TILES = 8, 128
SIZES = {"reduce 2^18": 1 << 18, "reduce 2^22": 1 << 22}

# The kernels (bench/kernels/, shared with bench/cpu_vs_numba_sim.py and tests/transpile/cpu/), and a tiny one.
TSR = "\n".join((Path(__file__).resolve().parent / "kernels" / f"{name}.tsr").read_text()
                 for name in ("block_reduce", "matmul16", "bias_gelu", "layernorm")) + """
@kernel tile[(32,)]
def tiny(x: f32[n], y: mut f32[n]):
    g = global_linear_id()
    if g < n:
        y[g] = x[g] + 1.0
"""


# One-thread rows are timed in the calling thread's CPU time (Tessera's worker 0, Warp's CPU launches
# and NumPy all run on it), which the other engineers' load on this shared machine hardly moves; the
# 2-thread rows (and the launches' second figure) in wall time.
CPU = time.thread_time


def timed(fn: Callable[[], Any], repeats: int, clock: Callable[[], float] = CPU,
          inner: int = 1) -> tuple[float, float]:
    """(median, min) of `repeats` rounds of `inner` calls, per call, in the clock's unit x 1e3."""
    fn()
    out = []
    for _ in range(repeats):
        t0 = clock()
        for _ in range(inner):
            fn()
        out.append((clock() - t0) / inner * 1e3)
    return statistics.median(out), min(out)


def us(t: tuple[float, float]) -> tuple[float, float]:
    return t[0] * 1e3, t[1] * 1e3


def check(got: np.ndarray, want: np.ndarray, what: str, tol: float = 1e-3) -> None:
    if not np.allclose(got, want, rtol=tol, atol=tol):
        raise SystemExit(f"MISMATCH: {what}: max error {float(np.abs(got - want).max())}")


def data(rng: np.random.Generator) -> dict[str, Any]:
    d: dict[str, Any] = {name: rng.standard_normal(n).astype(np.float32) for name, n in SIZES.items()}
    for n in (256, 512):
        d[f"matmul {n}"] = (rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32))
    d["gelu"] = (rng.standard_normal((1024, 1024), np.float32), rng.standard_normal((1024, 1024), np.float32))
    d["ln"] = rng.standard_normal((1024, 1024), np.float32) * 3 + 1
    d["ln weight"] = (rng.standard_normal(1024, np.float32), rng.standard_normal(1024, np.float32))
    return d


def gelu_ref(x: np.ndarray, b: np.ndarray) -> np.ndarray:
    h = x + b
    return np.float32(0.5) * h * (np.float32(1) + np.tanh(np.float32(0.7978845608) * (h + np.float32(0.044715) * h * h * h)))


def ln_ref(x: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=1, keepdims=True) + np.float32(1e-5))


def tessera_rows(d: dict[str, Any], repeats: int, threads: int,
                 clock: Callable[[], float] | None = None) -> dict[str, tuple[float, float]]:
    import tessera

    os.environ["TESSERA_CPU_THREADS"] = str(threads)  # read at each launch
    m = tessera.compile(TSR, backend="cpu")
    rows: dict[str, tuple[float, float]] = {}
    clock = clock or (CPU if threads == 1 else time.perf_counter)
    for name in SIZES:
        x, part = d[name], np.zeros(GROUPS, np.float32)
        rows[name] = timed(lambda x=x, part=part: m.block_reduce(x, part, grid=GROUPS), repeats, clock)
        check(np.array(part.sum(dtype=np.float64)), np.array(x.sum(dtype=np.float64)), f"tessera {name}", 1e-2)
    for n in (256, 512):
        a, b = d[f"matmul {n}"]
        c = np.zeros((n, n), np.float32)
        rows[f"matmul16 {n}"] = timed(lambda a=a, b=b, c=c, n=n: m.matmul16(a, b, c, grid=(n // 16, n // 16)), repeats, clock)
        check(c, a @ b, f"tessera matmul16 {n}")
    x, b = d["gelu"]
    y = np.zeros_like(x)
    rows["bias+gelu 2^20"] = timed(lambda: m.bias_gelu(x, b, y), repeats, clock)
    check(y, gelu_ref(x, b), "tessera bias+gelu")
    x = d["ln"]
    y = np.zeros_like(x)
    rows["layernorm 1024^2"] = timed(lambda: m.layernorm(x, y, 1e-5, grid=x.shape[0]), repeats, clock)
    check(y, ln_ref(x), "tessera layernorm")
    from tessera import ops

    w, b = d["ln weight"]
    rows["ops.layer_norm 1024^2"] = timed(lambda: ops.layer_norm(x, w, b), repeats, clock)
    check(ops.layer_norm(x, w, b), ln_ref(x) * w + b, "tessera ops.layer_norm")
    for groups in (1, 8):
        xs, ys = np.ones(32 * groups, np.float32), np.zeros(32 * groups, np.float32)

        def launch(xs: np.ndarray = xs, ys: np.ndarray = ys, groups: int = groups) -> None:
            m.tiny(xs, ys, grid=groups)
        rows[f"launch {groups} group(s) cpu"] = us(timed(launch, repeats, CPU, inner=2000))
        rows[f"launch {groups} group(s) wall"] = us(timed(launch, repeats, time.perf_counter, inner=2000))
    return rows


def warp_rows(d: dict[str, Any], repeats: int) -> dict[str, tuple[float, float]] | str:
    try:
        import warp as wp
    except ImportError as e:
        return f"warp cannot be imported ({e}); pip install warp-lang"
    wp.config.quiet = True
    wp.init()
    tile = 1024

    @wp.kernel
    def reduce_atomic(x: wp.array(dtype=float), out: wp.array(dtype=float), n: int, threads: int):  # type: ignore
        t = wp.tid()
        acc = wp.float32(0.0)
        k = t
        while k < n:
            acc += x[k]
            k += threads
        wp.atomic_add(out, 0, acc)

    @wp.kernel
    def reduce_tile(x: wp.array(dtype=float), out: wp.array(dtype=float), n: int, blocks: int):  # type: ignore
        i = wp.tid()
        acc = wp.tile_zeros(shape=tile, dtype=float)
        for k in range(i * tile, n, blocks * tile):
            acc += wp.tile_load(x, shape=tile, offset=k)
        wp.tile_atomic_add(out, wp.tile_sum(acc))

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
    def bias_gelu(x: wp.array(dtype=float), b: wp.array(dtype=float), y: wp.array(dtype=float)):  # type: ignore
        i = wp.tid()
        h = x[i] + b[i]
        y[i] = 0.5 * h * (1.0 + wp.tanh(0.7978845608 * (h + 0.044715 * h * h * h)))

    @wp.kernel
    def layernorm(x: wp.array2d(dtype=float), y: wp.array2d(dtype=float), eps: float):  # type: ignore
        r = wp.tid()
        c = x.shape[1]
        s = wp.float32(0.0)
        for j in range(c):
            s += x[r, j]
        mean = s / float(c)
        v = wp.float32(0.0)
        for j in range(c):
            dd = x[r, j] - mean
            v += dd * dd
        inv = 1.0 / wp.sqrt(v / float(c) + eps)
        for j in range(c):
            y[r, j] = (x[r, j] - mean) * inv

    @wp.kernel
    def tiny(x: wp.array(dtype=float), y: wp.array(dtype=float)):  # type: ignore
        i = wp.tid()
        y[i] = x[i] + 1.0

    def sync(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            fn()
            wp.synchronize_device("cpu")
        return run

    arr = lambda a: wp.array(a, dtype=float, device="cpu")  # noqa: E731
    rows: dict[str, tuple[float, float]] = {"version": wp.config.version}  # type: ignore[dict-item]
    for name, n in SIZES.items():
        x, out = arr(d[name]), wp.zeros(1, dtype=float, device="cpu")
        want = np.array(d[name].sum(dtype=np.float64))
        run = sync(lambda x=x, out=out, n=n: (out.zero_(), wp.launch(reduce_atomic, dim=GROUPS * TILES,
                                                                     inputs=[x, out, n, GROUPS * TILES], device="cpu")))
        rows[name] = timed(run, repeats)
        check(np.array(out.numpy()[0], np.float64), want, f"warp {name}", 1e-2)
        try:
            run = sync(lambda x=x, out=out, n=n: (out.zero_(), wp.launch_tiled(
                reduce_tile, dim=GROUPS, inputs=[x, out, n, GROUPS], block_dim=TILES, device="cpu")))
            rows[f"{name} tile"] = timed(run, repeats)
            check(np.array(out.numpy()[0], np.float64), want, f"warp tile {name}", 1e-2)
        except Exception as e:  # noqa: BLE001 -- an API this Warp lacks: the row says so
            rows[f"{name} tile"] = f"failed: {type(e).__name__}: {e}"[:100]  # type: ignore[assignment]
    for n in (256, 512):
        a, b = d[f"matmul {n}"]
        wa, wb, wc = arr(a), arr(b), wp.zeros((n, n), dtype=float, device="cpu")
        rows[f"matmul16 {n}"] = timed(sync(lambda wa=wa, wb=wb, wc=wc, n=n: wp.launch_tiled(
            matmul16, dim=(n // 16, n // 16), inputs=[wa, wb, wc], block_dim=64, device="cpu")), repeats)
        check(wc.numpy(), a @ b, f"warp matmul16 {n}")
    x, b = d["gelu"]
    wx, wb, wy = arr(x.ravel()), arr(b.ravel()), wp.zeros(x.size, dtype=float, device="cpu")
    rows["bias+gelu 2^20"] = timed(sync(lambda: wp.launch(bias_gelu, dim=x.size, inputs=[wx, wb, wy], device="cpu")),
                                   repeats)
    check(wy.numpy().reshape(x.shape), gelu_ref(x, b), "warp bias+gelu")
    x = d["ln"]
    wx, wy = arr(x), wp.zeros(x.shape, dtype=float, device="cpu")
    rows["layernorm 1024^2"] = timed(sync(lambda: wp.launch(layernorm, dim=x.shape[0], inputs=[wx, wy, 1e-5],
                                                            device="cpu")), repeats)
    check(wy.numpy(), ln_ref(x), "warp layernorm")
    for groups in (1, 8):
        xs, ys = arr(np.ones(32 * groups, np.float32)), wp.zeros(32 * groups, dtype=float, device="cpu")

        def launch(xs: Any = xs, ys: Any = ys, groups: int = groups) -> None:
            wp.launch(tiny, dim=32 * groups, inputs=[xs, ys], device="cpu")
        rows[f"launch {groups} group(s) cpu"] = us(timed(launch, repeats, CPU, inner=2000))
        rows[f"launch {groups} group(s) wall"] = us(timed(launch, repeats, time.perf_counter, inner=2000))
    return rows


def numpy_rows(d: dict[str, Any], repeats: int) -> dict[str, tuple[float, float]]:
    x, b = d["gelu"]
    w, bias = d["ln weight"]
    return {"bias+gelu 2^20": timed(lambda: gelu_ref(x, b), repeats),
            "layernorm 1024^2": timed(lambda: ln_ref(d["ln"]), repeats),
            "ops.layer_norm 1024^2": timed(lambda: ln_ref(d["ln"]) * w + bias, repeats)}


def cell(v: Any) -> str:
    if isinstance(v, tuple):
        return f"{v[0]:9.3f} ({v[1]:8.3f})"
    return f"{str(v)[:20]:>20}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--quick", action="store_true", help="3 repeats")
    args = p.parse_args()
    repeats = 3 if args.quick else args.repeats
    d = data(np.random.default_rng(0))
    tsr = tessera_rows(d, repeats, 1)
    warp = warp_rows(d, repeats)
    npy = numpy_rows(d, repeats)
    one = {k: tessera_rows(d, repeats, 1, time.perf_counter)[k] for k in ("reduce 2^22", "matmul16 512",
                                                                          "layernorm 1024^2")}
    one["launch 8 group(s) wall"] = tsr["launch 8 group(s) wall"]
    scaled = {k: v for k, v in tessera_rows(d, repeats, 2).items()
              if k in ("reduce 2^22", "matmul16 512", "layernorm 1024^2", "launch 8 group(s) wall")}
    print(f"median (min) of {repeats} runs in ms of the calling thread's CPU time (launches: us, also wall);"
          " Tessera on 1 thread; every result checked")
    print(f"{'':26}{'tessera':>20}{'warp CPU':>20}{'warp tile API':>20}{'numpy':>20}")
    for name, t in tsr.items():
        w = warp.get(name, "-") if isinstance(warp, dict) else "skipped"
        wt = warp.get(f"{name} tile", "-") if isinstance(warp, dict) else "skipped"
        print(f"{name:26}{cell(t)}{cell(w)}{cell(wt)}{cell(npy.get(name, '-'))}")
    print("\nratios of the medians (tessera / baseline):")
    for name, t in tsr.items():
        parts = []
        if isinstance(warp, dict):
            for label, key in (("warp", name), ("warp tile", f"{name} tile")):
                if isinstance(warp.get(key), tuple):
                    parts.append(f"/ {label} {t[0] / warp[key][0]:5.2f}x")
        if name in npy:
            parts.append(f"/ numpy {t[0] / npy[name][0]:5.2f}x")
        if name in SIZES:
            parts.append(f"  {SIZES[name] * 4 / (t[0] * 1e-3) / 1e9:5.2f} GB/s (median), "
                         f"{SIZES[name] * 4 / (t[1] * 1e-3) / 1e9:5.2f} (min)")
        print(f"  {name:26}" + "  ".join(parts))
    print("\nscaling, 1 -> 2 threads (median wall time):")
    for name, t in scaled.items():
        print(f"  {name:26}{one[name][0]:9.3f} -> {t[0]:9.3f}   {one[name][0] / t[0]:4.2f}x")
    if isinstance(warp, str):
        print(f"\nWarp: SKIPPED: {warp}")
    else:
        print(f"\nWarp {warp['version']}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; python {sys.version.split()[0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
