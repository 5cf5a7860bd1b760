"""Cost of a tile switch in the CPU backend: __syncthreads and warp shuffles in a loop.

One group of 256 tiles runs 10,000 barriers on one worker thread; every barrier
switches once per tile, so time / (tiles * barriers) is the cost of one switch
(including the barrier bookkeeping).  Run: python bench/host_barrier.py
"""

from __future__ import annotations

import argparse
import ctypes
import tempfile
import time
from pathlib import Path

import numpy as np

from tessera.runtime.host.build import build_shared_library
from tessera.runtime.host.launch import launch, load_library

KERNELS = r"""
extern "C" __global__ void pure_barrier(int* out, int iters) {
    for (int i = 0; i < iters; ++i) __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = iters;
}

extern "C" __global__ void barrier_loop(int* out, int iters) {
    __shared__ int s[1024];
    int acc = 0;
    for (int i = 0; i < iters; ++i) {
        s[threadIdx.x] = i + threadIdx.x;
        __syncthreads();
        acc += s[(threadIdx.x + 1) % blockDim.x];
        __syncthreads();
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

extern "C" __global__ void shuffle_loop(int* out, int iters) {
    int acc = threadIdx.x;
    for (int i = 0; i < iters; ++i) acc += __shfl_xor_sync(0xffffffffu, acc, 1) & 1;
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
"""

WRAPPER = r"""
#include "kernel.cu"
TSR_EXPORT int tsr_launch_pure_barrier(const tsr_launch_config* cfg, void** args) {
    int* out = *(int**)args[0]; int iters = *(const int*)args[1];
    return tsr::launch(cfg, [=] { pure_barrier(out, iters); });
}
TSR_EXPORT int tsr_launch_barrier_loop(const tsr_launch_config* cfg, void** args) {
    int* out = *(int**)args[0]; int iters = *(const int*)args[1];
    return tsr::launch(cfg, [=] { barrier_loop(out, iters); });
}
TSR_EXPORT int tsr_launch_shuffle_loop(const tsr_launch_config* cfg, void** args) {
    int* out = *(int**)args[0]; int iters = *(const int*)args[1];
    return tsr::launch(cfg, [=] { shuffle_loop(out, iters); });
}
"""


def best_time(lib: ctypes.CDLL, symbol: str, groups: int, tiles: int, iters: int, threads: int, reps: int) -> float:
    out = np.zeros(groups * tiles, np.int32)
    args = [ctypes.c_void_p(out.ctypes.data), ctypes.c_int(iters)]
    launch(lib, symbol, groups, tiles, 0, args, num_threads=threads)  # warm up: stacks, TLS, pages
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        launch(lib, symbol, groups, tiles, 0, args, num_threads=threads)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiles", type=int, default=256)
    ap.add_argument("--iters", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        so = Path(tmp) / "bench.so"
        build_shared_library(KERNELS, WRAPPER, so)
        lib = load_library(so)
        t = best_time(lib, "tsr_launch_pure_barrier", 1, a.tiles, a.iters, 1, a.reps)
        print(f"__syncthreads alone: {a.tiles} tiles x {a.iters} barriers in {t * 1e3:.1f} ms "
              f"= {t / (a.tiles * a.iters) * 1e9:.1f} ns per tile switch")
        # barrier_loop has two barriers per iteration, and shared-memory work between them.
        t = best_time(lib, "tsr_launch_barrier_loop", 1, a.tiles, a.iters, 1, a.reps)
        switches = a.tiles * a.iters * 2
        print(f"__syncthreads + shared memory: {a.tiles} tiles x {2 * a.iters} barriers in {t * 1e3:.1f} ms "
              f"= {t / switches * 1e9:.1f} ns per tile switch")
        t = best_time(lib, "tsr_launch_shuffle_loop", 1, a.tiles, a.iters, 1, a.reps)
        print(f"__shfl_xor_sync: {a.tiles} tiles x {a.iters} shuffles in {t * 1e3:.1f} ms "
              f"= {t / (a.tiles * a.iters) * 1e9:.1f} ns per tile per shuffle")
        t = best_time(lib, "tsr_launch_barrier_loop", 8, a.tiles, a.iters // 10, 2, a.reps)
        print(f"__syncthreads, 8 groups on 2 threads: {t / (8 * a.tiles * a.iters // 10 * 2) * 1e9:.1f} ns "
              "per tile switch (wall clock / total switches)")


if __name__ == "__main__":
    main()
