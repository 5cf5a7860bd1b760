"""CPU backend runtime: hand-written CUDA C (in the style Tessera emits) compiled with
the host prelude and run as fibers, checked against numpy.  Needs a C++ compiler, no GPU."""

from __future__ import annotations

import ctypes
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tessera.base.errors import CompileError, LaunchError, TesseraError
from tessera.runtime.host import build as host_build
from tessera.runtime.host import recipe as host_recipe
from tessera.runtime.host.build import build_shared_library
from tessera.runtime.host.launch import launch, load_library
from tests.conftest import skip_without_cxx

skip_without_cxx()


def ptr(a: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(a.ctypes.data)


def build(tmp_path: Path, cuda: str, wrapper: str, name: str = "k") -> ctypes.CDLL:
    out = tmp_path / f"{name}.so"
    build_shared_library(cuda, '#include "kernel.cu"\n' + wrapper, out)
    return load_library(out)


# --------------------------------------------------------------------------- (a)

SUM_REDUCE = r"""
extern "C" __global__ void __launch_bounds__(128) sum_reduce(const float* __restrict__ x, float* __restrict__ out, int n) {
    __shared__ float smem[128];
    float acc = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        acc += x[i];
    }
    smem[threadIdx.x] = acc;
    __syncthreads();
    unsigned int s = blockDim.x / 2;
    while (s > 0) {
        if (threadIdx.x < s) {
            smem[threadIdx.x] += smem[threadIdx.x + s];
        }
        __syncthreads();
        s >>= 1;
    }
    if (threadIdx.x == 0) {
        atomicAdd(&out[blockIdx.x], smem[0]);
    }
}
"""

SUM_REDUCE_WRAPPER = r"""
TSR_EXPORT int tsr_launch_sum_reduce(const tsr_launch_config* cfg, void** args) {
    const float* x = *(const float* const*)args[0];
    float* out = *(float**)args[1];
    int n = *(const int*)args[2];
    return tsr::launch(cfg, [=] { sum_reduce(x, out, n); });
}
"""


@pytest.mark.parametrize("num_threads", [1, 2])
def test_shared_memory_tree_reduction(tmp_path, num_threads):
    lib = build(tmp_path, SUM_REDUCE, SUM_REDUCE_WRAPPER)
    n = 1 << 18
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    out = np.zeros(8, np.float32)
    launch(lib, "tsr_launch_sum_reduce", 8, 128, 0, [ptr(x), ptr(out), ctypes.c_int(n)], num_threads=num_threads)
    # Group b sums the elements whose index lies in its 128-wide slot of every 1024-wide stride.
    expected = x.astype(np.float64).reshape(-1, 8, 128).sum(axis=(0, 2))
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-3)
    # A second launch of the same library reuses the pooled stacks and starts clean.
    out2 = np.zeros(8, np.float32)
    launch(lib, "tsr_launch_sum_reduce", 8, 128, 0, [ptr(x), ptr(out2), ctypes.c_int(n)], num_threads=num_threads)
    np.testing.assert_array_equal(out, out2)


# --------------------------------------------------------------------------- (b)

WARP = r"""
extern "C" __global__ void warp_ops(const int* __restrict__ x, int* __restrict__ xor_sum, int* __restrict__ down_sum,
                                    int* __restrict__ scan, int* __restrict__ bcast16, unsigned int* __restrict__ ballot,
                                    double* __restrict__ dsum, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x % 32;
    int v = i < n ? x[i] : 0;
    // Butterfly: every lane ends with the warp total.
    int a = v;
    for (int off = 16; off > 0; off >>= 1) a += __shfl_xor_sync(0xffffffffu, a, off);
    xor_sum[i] = a;
    // Tree: lane 0 ends with the warp total.
    int b = v;
    for (int off = 16; off > 0; off >>= 1) b += __shfl_down_sync(0xffffffffu, b, off);
    if (lane == 0) down_sum[i / 32] = b;
    // Inclusive scan with __shfl_up_sync (lanes below the offset keep their own value).
    int c = v;
    for (int off = 1; off < 32; off <<= 1) {
        int t = __shfl_up_sync(0xffffffffu, c, off);
        if (lane >= off) c += t;
    }
    scan[i] = c;
    // Broadcast of the first lane of each 16-lane segment.
    bcast16[i] = __shfl_sync(0xffffffffu, v, 0, 16);
    unsigned int m = __ballot_sync(0xffffffffu, v & 1);
    if (lane == 0) ballot[i / 32] = m;
    double d = (double)v * 0.5;
    for (int off = 16; off > 0; off >>= 1) d += __shfl_down_sync(0xffffffffu, d, off);
    if (lane == 0) dsum[i / 32] = d;
}
"""

WARP_WRAPPER = r"""
TSR_EXPORT int tsr_launch_warp_ops(const tsr_launch_config* cfg, void** args) {
    const int* x = *(const int* const*)args[0];
    int* xs = *(int**)args[1]; int* ds = *(int**)args[2]; int* sc = *(int**)args[3];
    int* bc = *(int**)args[4]; unsigned int* bl = *(unsigned int**)args[5]; double* dd = *(double**)args[6];
    int n = *(const int*)args[7];
    return tsr::launch(cfg, [=] { warp_ops(x, xs, ds, sc, bc, bl, dd, n); });
}
"""


def test_warp_shuffles_and_votes(tmp_path):
    lib = build(tmp_path, WARP, WARP_WRAPPER)
    groups, block = 4, 256
    n = groups * block
    x = np.random.default_rng(2).integers(-1000, 1000, n).astype(np.int32)
    xor_sum = np.zeros(n, np.int32)
    down_sum = np.zeros(n // 32, np.int32)
    scan = np.zeros(n, np.int32)
    bcast = np.zeros(n, np.int32)
    ballot = np.zeros(n // 32, np.uint32)
    dsum = np.zeros(n // 32, np.float64)
    launch(lib, "tsr_launch_warp_ops", groups, block, 0,
           [ptr(x), ptr(xor_sum), ptr(down_sum), ptr(scan), ptr(bcast), ptr(ballot), ptr(dsum), ctypes.c_int(n)],
           num_threads=2)
    w = x.reshape(-1, 32)
    np.testing.assert_array_equal(xor_sum, np.repeat(w.sum(axis=1), 32))
    np.testing.assert_array_equal(down_sum, w.sum(axis=1))
    np.testing.assert_array_equal(scan, np.cumsum(w, axis=1).ravel())
    np.testing.assert_array_equal(bcast, np.repeat(x.reshape(-1, 16)[:, 0], 16))
    bits = (w & 1).astype(np.uint64) << np.arange(32, dtype=np.uint64)
    np.testing.assert_array_equal(ballot, bits.sum(axis=1).astype(np.uint32))
    np.testing.assert_allclose(dsum, w.sum(axis=1) * 0.5)


PARTIAL_WARP = r"""
extern "C" __global__ void partial(int* res) {
    const int n = blockDim.x * blockDim.y;
    int lin = threadIdx.x + threadIdx.y * blockDim.x;   // 2-D block: lanes are consecutive linear ids
    res[lin] = (int)__activemask();
    // Lanes past the end of the block take no part: reading from one gives the own value.
    res[n + lin] = __shfl_xor_sync(__activemask(), lin, 16);
    int t = 1;
    for (int off = 16; off > 0; off >>= 1) t += __shfl_down_sync(__activemask(), t, off);
    res[2 * n + lin] = t;
    if (threadIdx.y == 2 && threadIdx.x >= 8) return;    // returned lanes leave warp operations
    __syncwarp();
    res[3 * n + lin] = __any_sync(0xffffffffu, lin == 33) * 100 + __all_sync(0xffffffffu, lin < 36) * 10
                       + (__ballot_sync(0xffffffffu, 1) == (lin < 32 ? 0xffffffffu : 0xffu));
}
"""

PARTIAL_WRAPPER = r"""
TSR_EXPORT int tsr_launch_partial(const tsr_launch_config* cfg, void** args) {
    int* res = *(int**)args[0];
    return tsr::launch(cfg, [=] { partial(res); });
}
"""


def _down_tree(lane: int, lanes: int) -> int:
    vals = [1] * 32
    for off in (16, 8, 4, 2, 1):
        vals = [vals[i] + (vals[i + off] if i + off < lanes else vals[i]) for i in range(32)]
    return vals[lane]


def test_partial_warp_and_exited_lanes(tmp_path):
    lib = build(tmp_path, PARTIAL_WARP, PARTIAL_WRAPPER)
    n = 48  # block (16, 3): warp 0 is full, warp 1 has 16 lanes, 8 of which return early
    res = np.full(4 * n, -1, np.int32)
    launch(lib, "tsr_launch_partial", 1, (16, 3), 0, [ptr(res)])
    act, xor16, tree, votes = res.reshape(4, n)
    np.testing.assert_array_equal(act.view(np.uint32), [0xFFFFFFFF] * 32 + [0xFFFF] * 16)
    np.testing.assert_array_equal(xor16, [i ^ 16 for i in range(32)] + list(range(32, 48)))
    np.testing.assert_array_equal(tree, [_down_tree(i, 32) for i in range(32)] + [_down_tree(i, 16) for i in range(16)])
    # Warp 0: any(lin == 33) false, all(lin < 36) true.  Warp 1 (lanes 32..39 left): any true, all false.
    # The last term checks that the ballot names exactly the lanes still in the warp.
    np.testing.assert_array_equal(votes, [11] * 32 + [101] * 8 + [-1] * 8)


# --------------------------------------------------------------------------- (c)

ATOMICS = r"""
extern "C" __global__ void histogram(const int* __restrict__ x, unsigned int* __restrict__ hist, int n,
                                     int* __restrict__ mx, int* __restrict__ mn, unsigned long long* __restrict__ total,
                                     unsigned int* __restrict__ ticket) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        int v = x[i];
        atomicAdd(&hist[v], 1u);
        atomicMax(mx, v * 7 - i % 13);
        atomicMin_block(mn, v * 7 - i % 13);
        atomicAdd_system(total, (unsigned long long)v);
    }
    if (threadIdx.x == 0) {
        unsigned int old;
        do { old = *ticket; } while (atomicCAS(ticket, old, old + 1) != old);
    }
}
"""

ATOMICS_WRAPPER = r"""
TSR_EXPORT int tsr_launch_histogram(const tsr_launch_config* cfg, void** args) {
    const int* x = *(const int* const*)args[0]; unsigned int* h = *(unsigned int**)args[1];
    int n = *(const int*)args[2]; int* mx = *(int**)args[3]; int* mn = *(int**)args[4];
    unsigned long long* tot = *(unsigned long long**)args[5]; unsigned int* tk = *(unsigned int**)args[6];
    return tsr::launch(cfg, [=] { histogram(x, h, n, mx, mn, tot, tk); });
}
"""


def test_atomics_from_many_groups_on_four_threads(tmp_path):
    lib = build(tmp_path, ATOMICS, ATOMICS_WRAPPER)
    n = 200_000
    x = np.random.default_rng(3).integers(0, 64, n).astype(np.int32)
    hist = np.zeros(64, np.uint32)
    mx = np.array([np.iinfo(np.int32).min], np.int32)
    mn = np.array([np.iinfo(np.int32).max], np.int32)
    total = np.zeros(1, np.uint64)
    ticket = np.zeros(1, np.uint32)
    groups = 96
    launch(lib, "tsr_launch_histogram", groups, 128, 0,
           [ptr(x), ptr(hist), ctypes.c_int(n), ptr(mx), ptr(mn), ptr(total), ptr(ticket)], num_threads=4)
    np.testing.assert_array_equal(hist, np.bincount(x, minlength=64))
    key = x.astype(np.int64) * 7 - np.arange(n) % 13
    assert mx[0] == key.max() and mn[0] == key.min()
    assert total[0] == x.astype(np.uint64).sum()
    assert ticket[0] == groups


SMALL_ATOMICS = r"""
extern "C" __global__ void small_atomics(unsigned int* inc, unsigned int* dec, float* f, double* d, int* bits, int* ex) {
    atomicInc(inc, 9u);
    atomicDec(dec, 9u);
    atomicAdd(f, 0.5f);
    atomicAdd(d, 0.25);
    atomicOr(&bits[0], 1 << (threadIdx.x % 31));
    atomicAnd(&bits[1], ~(1 << (threadIdx.x % 31)));
    atomicXor(&bits[2], 1);
    atomicSub(&bits[3], 2);
    atomicExch(ex, 7);
    __threadfence();
}
"""

SMALL_ATOMICS_WRAPPER = r"""
TSR_EXPORT int tsr_launch_small_atomics(const tsr_launch_config* cfg, void** args) {
    unsigned int* a = *(unsigned int**)args[0]; unsigned int* b = *(unsigned int**)args[1];
    float* c = *(float**)args[2]; double* d = *(double**)args[3]; int* e = *(int**)args[4]; int* f = *(int**)args[5];
    return tsr::launch(cfg, [=] { small_atomics(a, b, c, d, e, f); });
}
"""


def test_atomic_inc_dec_float_and_bitwise(tmp_path):
    lib = build(tmp_path, SMALL_ATOMICS, SMALL_ATOMICS_WRAPPER)
    inc = np.zeros(1, np.uint32)
    dec = np.zeros(1, np.uint32)
    f = np.zeros(1, np.float32)
    d = np.zeros(1, np.float64)
    bits = np.array([0, -1, 0, 1000], np.int32)
    ex = np.zeros(1, np.int32)
    threads = 4 * 64  # 4 groups of 64
    launch(lib, "tsr_launch_small_atomics", 4, 64, 0, [ptr(inc), ptr(dec), ptr(f), ptr(d), ptr(bits), ptr(ex)],
           num_threads=4)
    assert inc[0] == threads % 10  # wraps to 0 after reaching 9
    assert dec[0] == (-threads) % 10  # 0 wraps to 9
    assert f[0] == threads * 0.5 and d[0] == threads * 0.25
    assert bits[0] == (1 << 31) - 1 and bits[1] == -(1 << 31) and bits[2] == 0 and bits[3] == 1000 - 2 * threads
    assert ex[0] == 7


# --------------------------------------------------------------------------- (d)

MATMUL = r"""
#define TILE 16
extern "C" __global__ void __launch_bounds__(256) matmul(const float* __restrict__ A, const float* __restrict__ B,
                                                         float* __restrict__ C, int M, int N, int K) {
    __shared__ __align__(16) float As[TILE][TILE];
    __shared__ __align__(16) float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[threadIdx.y][threadIdx.x] = (row < M && k0 + threadIdx.x < K) ? A[row * K + k0 + threadIdx.x] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (col < N && k0 + threadIdx.y < K) ? B[(k0 + threadIdx.y) * N + col] : 0.0f;
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}
"""

MATMUL_WRAPPER = r"""
TSR_EXPORT int tsr_launch_matmul(const tsr_launch_config* cfg, void** args) {
    const float* A = *(const float* const*)args[0]; const float* B = *(const float* const*)args[1];
    float* C = *(float**)args[2];
    int M = *(const int*)args[3]; int N = *(const int*)args[4]; int K = *(const int*)args[5];
    return tsr::launch(cfg, [=] { matmul(A, B, C, M, N, K); });
}
"""


def test_tiled_matmul_2d_blocks(tmp_path):
    lib = build(tmp_path, MATMUL, MATMUL_WRAPPER)
    m = n = k = 128
    rng = np.random.default_rng(4)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    launch(lib, "tsr_launch_matmul", (n // 16, m // 16), (16, 16), 0,
           [ptr(a), ptr(b), ptr(c), ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(k)], num_threads=2)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)


INDEX_3D = r"""
extern "C" __global__ void index3d(unsigned int* out) {
    unsigned int g = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    unsigned int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned int nt = blockDim.x * blockDim.y * blockDim.z;
    out[g * nt + t] = (threadIdx.x << 24) | (threadIdx.y << 16) | (threadIdx.z << 12) |
                      (blockIdx.x << 8) | (blockIdx.y << 4) | blockIdx.z;
}
"""

INDEX_3D_WRAPPER = r"""
TSR_EXPORT int tsr_launch_index3d(const tsr_launch_config* cfg, void** args) {
    unsigned int* out = *(unsigned int**)args[0];
    return tsr::launch(cfg, [=] { index3d(out); });
}
"""


def test_3d_grid_and_block_indices(tmp_path):
    lib = build(tmp_path, INDEX_3D, INDEX_3D_WRAPPER)
    grid, block = (3, 2, 4), (5, 3, 2)
    out = np.zeros(int(np.prod(grid) * np.prod(block)), np.uint32)
    launch(lib, "tsr_launch_index3d", grid, block, 0, [ptr(out)], num_threads=3)
    expected = []
    for bz in range(grid[2]):
        for by in range(grid[1]):
            for bx in range(grid[0]):
                for tz in range(block[2]):
                    for ty in range(block[1]):
                        for tx in range(block[0]):
                            expected.append((tx << 24) | (ty << 16) | (tz << 12) | (bx << 8) | (by << 4) | bz)
    np.testing.assert_array_equal(out, np.array(expected, np.uint32))


def test_invalid_launch_configuration(tmp_path):
    lib = build(tmp_path, INDEX_3D, INDEX_3D_WRAPPER)
    out = np.zeros(4096, np.uint32)
    with pytest.raises(LaunchError, match="invalid launch configuration"):
        launch(lib, "tsr_launch_index3d", 1, 2048, 0, [ptr(out)])
    with pytest.raises(LaunchError, match="invalid launch configuration"):
        launch(lib, "tsr_launch_index3d", (1, 0), 32, 0, [ptr(out)])


# --------------------------------------------------------------------------- (e)

HALF = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void half_conv(const unsigned short* __restrict__ hbits, float* __restrict__ hf,
                                     unsigned short* __restrict__ hback, const float* __restrict__ f,
                                     unsigned short* __restrict__ fh, unsigned short* __restrict__ fb,
                                     const double* __restrict__ d, unsigned short* __restrict__ dh,
                                     float* __restrict__ bf, unsigned short* __restrict__ bback, int n, int m) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        hf[i] = __half2float(__ushort_as_half(hbits[i]));
        hback[i] = __half_as_ushort(__float2half_rn(hf[i]));
        bf[i] = __bfloat162float(__ushort_as_bfloat16(hbits[i]));
        bback[i] = __bfloat16_as_ushort(__float2bfloat16_rn(bf[i]));
    }
    if (i < m) {
        fh[i] = __half_as_ushort(__float2half_rn(f[i]));
        fb[i] = __bfloat16_as_ushort(__float2bfloat16_rn(f[i]));
        dh[i] = __half_as_ushort(__double2half(d[i]));
    }
}
"""

HALF_WRAPPER = r"""
TSR_EXPORT int tsr_launch_half_conv(const tsr_launch_config* cfg, void** args) {
    const unsigned short* hb = *(const unsigned short* const*)args[0]; float* hf = *(float**)args[1];
    unsigned short* hback = *(unsigned short**)args[2]; const float* f = *(const float* const*)args[3];
    unsigned short* fh = *(unsigned short**)args[4]; unsigned short* fb = *(unsigned short**)args[5];
    const double* d = *(const double* const*)args[6]; unsigned short* dh = *(unsigned short**)args[7];
    float* bf = *(float**)args[8]; unsigned short* bback = *(unsigned short**)args[9];
    int n = *(const int*)args[10]; int m = *(const int*)args[11];
    return tsr::launch(cfg, [=] { half_conv(hb, hf, hback, f, fh, fb, d, dh, bf, bback, n, m); });
}
"""


def bf16_reference(f: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, nearest-even, computed from the values in float64."""
    u = f.view(np.uint32)
    lo = (u >> 16).astype(np.uint32)
    hi = lo + 1

    def value(b: np.ndarray) -> np.ndarray:
        v = (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        mag = np.where((b & 0x7FFF) == 0x7F80, 2.0 ** 128, np.abs(v))  # one step past the largest finite
        return np.copysign(mag, np.where(b & 0x8000, -1.0, 1.0))

    x = f.astype(np.float64)
    dlo, dhi = np.abs(x - value(lo)), np.abs(value(hi) - x)
    pick_hi = (dhi < dlo) | ((dhi == dlo) & (lo & 1 == 1))
    out = np.where(pick_hi, hi, lo).astype(np.uint16)
    nan = np.isnan(f)
    nan_bits = lo.astype(np.uint16)
    nan_bits = np.where((nan_bits & 0x7F) == 0, nan_bits | 1, nan_bits)
    return np.where(nan, nan_bits, out).astype(np.uint16)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_half_and_bfloat16_conversions_bit_exact(tmp_path):
    lib = build(tmp_path, HALF, HALF_WRAPPER)
    n = 1 << 16
    hbits = np.arange(n, dtype=np.uint32).astype(np.uint16)
    rng = np.random.default_rng(5)
    special = np.array([0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FF001, 0x33000000, 0x33000001, 0x33800000,
                        0x387FE000, 0x387FF000, 0x387FFFFF, 0x38800000, 0x7F7FFFFF, 0x7F7F8000, 0x7F7F7FFF,
                        0x7F800000, 0x7F800001, 0x7FC00000, 0x7F801FFF, 0x00000001, 0x3F808000, 0x3F818000],
                       np.uint32)
    fbits = np.concatenate([rng.integers(0, 2 ** 32, 1 << 20, dtype=np.uint64).astype(np.uint32),
                            special, special | 0x80000000])
    f = fbits.view(np.float32)
    m = f.size
    d = np.concatenate([rng.standard_normal(m // 2) * 2.0 ** rng.integers(-30, 18, m // 2),
                        f[: m - m // 2].astype(np.float64)])
    hf = np.zeros(n, np.float32)
    hback = np.zeros(n, np.uint16)
    bf = np.zeros(n, np.float32)
    bback = np.zeros(n, np.uint16)
    fh = np.zeros(m, np.uint16)
    fb = np.zeros(m, np.uint16)
    dh = np.zeros(m, np.uint16)
    launch(lib, "tsr_launch_half_conv", (m + 255) // 256, 256, 0,
           [ptr(hbits), ptr(hf), ptr(hback), ptr(f), ptr(fh), ptr(fb), ptr(d), ptr(dh), ptr(bf), ptr(bback),
            ctypes.c_int(n), ctypes.c_int(m)])
    np.testing.assert_array_equal(hf.view(np.uint32), hbits.view(np.float16).astype(np.float32).view(np.uint32))
    np.testing.assert_array_equal(hback, hbits)  # every half bit pattern survives the round trip
    np.testing.assert_array_equal(fh, f.astype(np.float16).view(np.uint16))
    np.testing.assert_array_equal(dh, d.astype(np.float16).view(np.uint16))
    np.testing.assert_array_equal(bf.view(np.uint32), hbits.astype(np.uint32) << 16)
    np.testing.assert_array_equal(bback, hbits)
    np.testing.assert_array_equal(fb, bf16_reference(f))


# --------------------------------------------------------------------------- (f)

FAIL = r"""
extern "C" __global__ void failing(int* out, int mode) {
    __shared__ int s[64];
    for (int r = 0; r < 4; ++r) {
        s[threadIdx.x] = r;
        __syncthreads();
        if (blockIdx.x == 3 && threadIdx.x == 17 && r == 2) {
            if (mode == 0) tsr_host_fail("failing", 42, "index 99 out of bounds for x of length 8");
            else __trap();
        }
        __syncthreads();
    }
    atomicAdd(out, 1);
}
"""

FAIL_WRAPPER = r"""
TSR_EXPORT int tsr_launch_failing(const tsr_launch_config* cfg, void** args) {
    int* out = *(int**)args[0]; int mode = *(const int*)args[1];
    return tsr::launch(cfg, [=] { failing(out, mode); }, "failing");
}
"""


@pytest.mark.parametrize("num_threads", [1, 4])
def test_host_fail_stops_the_launch(tmp_path, num_threads):
    lib = build(tmp_path, FAIL, FAIL_WRAPPER)
    out = np.zeros(1, np.int32)
    with pytest.raises(LaunchError) as info:
        launch(lib, "tsr_launch_failing", 64, 64, 0, [ptr(out), ctypes.c_int(0)], num_threads=num_threads)
    assert str(info.value) == ("failing:42: index 99 out of bounds for x of length 8 "
                               "(block (3, 0, 0), thread (17, 0, 0))")
    assert out[0] < 64 * 64  # not every group ran to completion
    if num_threads == 1:
        assert out[0] == 3 * 64  # groups 0..2 finished; group 3 was abandoned; no later group started
    with pytest.raises(LaunchError, match=r"^failing: __trap\(\) called \(block \(3, 0, 0\), thread \(17, 0, 0\)\)"):
        launch(lib, "tsr_launch_failing", 8, 64, 0, [ptr(out), ctypes.c_int(1)], num_threads=num_threads)
    # The library is usable again afterwards.
    out[0] = 0
    launch(lib, "tsr_launch_failing", 2, 64, 0, [ptr(out), ctypes.c_int(0)], num_threads=num_threads)
    assert out[0] == 2 * 64


# --------------------------------------------------------------------------- (g)

DEADLOCK = r"""
extern "C" __global__ void deadlock(int* out) {
    // Lane 0 of warp 0 waits at the block barrier, while lanes 1..31 of its warp wait in a
    // full-warp shuffle that needs lane 0: neither can ever complete (a hang on a GPU).
    int v = threadIdx.x;
    if (threadIdx.x == 0) {
        __syncthreads();
    } else if (threadIdx.x < 32) {
        v = __shfl_sync(0xffffffffu, v, 0);
    } else {
        __syncthreads();
    }
    out[threadIdx.x] = v;
}

extern "C" __global__ void divergent_barrier(int* out) {
    __shared__ int s[128];
    if (threadIdx.x >= 96) return;               // returned threads do not take part in barriers
    s[threadIdx.x] = threadIdx.x;
    if (threadIdx.x < 32) __syncthreads();       // two call sites, one barrier (sm_70+)
    else __syncthreads();
    out[threadIdx.x] = s[95 - threadIdx.x];
}
"""

DEADLOCK_WRAPPER = r"""
TSR_EXPORT int tsr_launch_deadlock(const tsr_launch_config* cfg, void** args) {
    int* out = *(int**)args[0];
    return tsr::launch(cfg, [=] { deadlock(out); });
}
TSR_EXPORT int tsr_launch_divergent_barrier(const tsr_launch_config* cfg, void** args) {
    int* out = *(int**)args[0];
    return tsr::launch(cfg, [=] { divergent_barrier(out); });
}
"""

RUN_IN_CHILD = r"""
import ctypes, sys
import numpy as np
from tessera.base.errors import LaunchError
from tessera.runtime.host.launch import launch, load_library
lib = load_library(sys.argv[1])
out = np.full(128, -1, np.int32)
try:
    launch(lib, sys.argv[2], 4, 128, 0, [ctypes.c_void_p(out.ctypes.data)], num_threads=2)
    print("OK", ",".join(map(str, out)))
except LaunchError as e:
    print("ERR", e)
"""


def run_child(tmp_path: Path, lib_path: Path, symbol: str) -> str:
    proc = subprocess.run([sys.executable, "-c", RUN_IN_CHILD, str(lib_path), symbol],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_deadlock_is_reported_not_hung(tmp_path):
    so = tmp_path / "deadlock.so"
    build_shared_library(DEADLOCK, '#include "kernel.cu"\n' + DEADLOCK_WRAPPER, so)
    result = run_child(tmp_path, so, "tsr_launch_deadlock")
    assert re.fullmatch(r"ERR deadlock: block \(\d, 0, 0\) of 128 threads: 97 wait at __syncthreads, 31 wait "
                        r"at a warp-synchronous operation .* 0 have returned", result), result
    result = run_child(tmp_path, so, "tsr_launch_divergent_barrier")
    assert result.startswith("OK "), result
    values = [int(v) for v in result[3:].split(",")]
    assert values == [95 - i for i in range(96)] + [-1] * 32


# --------------------------------------------------------------------------- (h)

DYNAMIC = r"""
extern "C" __global__ void reverse_dynamic(const float* __restrict__ x, float* __restrict__ y, int n) {
    TSR_DYNAMIC_SMEM(smem);
    float* buf = reinterpret_cast<float*>(smem);
    int* counts = reinterpret_cast<int*>(smem + blockDim.x * sizeof(float));
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    buf[threadIdx.x] = i < n ? x[i] : 0.0f;
    if (threadIdx.x == 0) counts[0] = 0;
    __syncthreads();
    atomicAdd_block(&counts[0], 1);
    __syncthreads();
    int j = blockIdx.x * blockDim.x + (blockDim.x - 1 - threadIdx.x);
    if (j < n) y[j] = buf[threadIdx.x] + (float)(counts[0] - (int)blockDim.x);
}
"""

DYNAMIC_WRAPPER = r"""
TSR_EXPORT int tsr_launch_reverse_dynamic(const tsr_launch_config* cfg, void** args) {
    const float* x = *(const float* const*)args[0]; float* y = *(float**)args[1]; int n = *(const int*)args[2];
    return tsr::launch(cfg, [=] { reverse_dynamic(x, y, n); });
}
"""


def test_dynamic_shared_memory(tmp_path):
    lib = build(tmp_path, DYNAMIC, DYNAMIC_WRAPPER)
    block, groups = 256, 16
    n = block * groups
    x = np.random.default_rng(6).standard_normal(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    launch(lib, "tsr_launch_reverse_dynamic", groups, block, block * 4 + 16, [ptr(x), ptr(y), ctypes.c_int(n)],
           num_threads=2)
    np.testing.assert_array_equal(y, x.reshape(groups, block)[:, ::-1].ravel())


# --------------------------------------------------------------------------- (i)

PRINTF = r"""
extern "C" __global__ void hello(int tag) {
    if (threadIdx.x == 0) printf("hello from block %d of %d, tag %d\n", (int)blockIdx.x, (int)gridDim.x, tag);
}
"""

PRINTF_WRAPPER = r"""
TSR_EXPORT int tsr_launch_hello(const tsr_launch_config* cfg, void** args) {
    int tag = *(const int*)args[0];
    return tsr::launch(cfg, [=] { hello(tag); });
}
"""


def test_printf_output_appears(tmp_path, capfd):
    lib = build(tmp_path, PRINTF, PRINTF_WRAPPER)
    capfd.readouterr()
    launch(lib, "tsr_launch_hello", 3, 64, 0, [ctypes.c_int(7)], num_threads=1)
    out = capfd.readouterr().out
    assert out.splitlines() == [f"hello from block {b} of 3, tag 7" for b in range(3)]


# --------------------------------------------------------------------------- build helpers


def test_compile_error_carries_compiler_output(tmp_path):
    bad = 'extern "C" __global__ void broken(float* x) { x[0] = undefined_name; }\n'
    with pytest.raises(CompileError) as info:
        build_shared_library(bad, '#include "kernel.cu"\n', tmp_path / "bad.so")
    assert "undefined_name" in info.value.text
    assert not (tmp_path / "bad.so").exists()
    assert not list(tmp_path.glob(".bad.so.*"))  # no partial output left behind


def test_find_cxx_honours_and_reports_cxx(monkeypatch):
    monkeypatch.setenv("CXX", "g++ -fdiagnostics-color=never")
    assert host_build.find_cxx()[1:] == ["-fdiagnostics-color=never"]
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    with pytest.raises(TesseraError, match="nonexistent"):
        host_build.find_cxx()


def test_prelude_and_engine_ship_with_the_package():
    names = {p.name for p in host_recipe.host_sources(host_build.host_dir())}
    assert {"tessera_host.h", "host_abi.h", "engine.cpp"} <= names
    assert "tsr_launch_config" in (host_build.host_dir() / "host_abi.h").read_text()


def test_wrapper_may_launch_large_fiber_stacks(tmp_path):
    src = textwrap.dedent(r"""
        extern "C" __global__ void big_stack(float* out) {
            float local[16384];  // 64 KiB of locals: needs a fiber stack larger than the default
            for (int i = 0; i < 16384; ++i) local[i] = (float)(i + threadIdx.x);
            __syncthreads();
            float s = 0.0f;
            for (int i = 0; i < 16384; i += 4096) s += local[i];
            out[threadIdx.x] = s;
        }
    """)
    wrapper = r"""
        TSR_EXPORT int tsr_launch_big_stack(const tsr_launch_config* cfg, void** args) {
            float* out = *(float**)args[0];
            return tsr::launch(cfg, [=] { big_stack(out); });
        }
    """
    lib = build(tmp_path, src, wrapper)
    out = np.zeros(64, np.float32)
    launch(lib, "tsr_launch_big_stack", 1, 64, 0, [ptr(out)], fiber_stack_bytes=256 * 1024)
    np.testing.assert_array_equal(out, 4 * np.arange(64) + (0 + 4096 + 8192 + 12288))


# --------------------------------------------------------------------------- the rest of the surface

MISC = r"""
#include <cuda_fp16.h>
struct __align__(16) Pair { float a; int b; };

__device__ __forceinline__ float helper(float v) { return rsqrtf(v) * __fdividef(v, 2.0f); }

extern "C" __global__ void __launch_bounds__(64, 2) misc(int* __restrict__ ires, float* __restrict__ fres,
                                                         volatile int* flag) {
    __shared__ int ready;
    __shared__ float4 vec[2];
    int t = threadIdx.x;
    if (t == 0) ready = 0;
    int c = __syncthreads_count(t % 3 == 0);
    int a = __syncthreads_and(t < 64);
    int o = __syncthreads_or(t == 63);
    // Tile 40 publishes a value that tile 3 spin-waits for: __nanosleep lets other tiles run.
    if (t == 40) { vec[1] = make_float4(1.0f, 2.0f, 3.0f, 4.0f); __threadfence_block(); ready = 1; }
    if (t == 3) { while (!*(volatile int*)&ready) __nanosleep(100); }
    __syncthreads();
    if (t == 0) {
        ires[0] = c; ires[1] = a; ires[2] = o;
        ires[3] = __popc(0xF0F0u) + 100 * __clz(1) + 10000 * __ffs(8);
        ires[4] = (int)__brev(1u) == (int)0x80000000u;
        ires[5] = __byte_perm(0x33221100u, 0x77665544u, 0x5140u) == 0x55114400u;
        ires[6] = min(3, -4) + max(2u, 7u) * 10 + (int)(min(-1.5f, 2.0f) * 100.0f);
        ires[7] = __float2int_rn(2.5f) * 10 + __float2int_rz(-2.7f);
        ires[8] = __float2int_rz(1e20f) == 2147483647 && __float2int_rz(__int_as_float(0x7fc00000)) == 0;
        ires[9] = __mulhi(0x40000000, 8) + __umul24(0x1000001u, 3u);
        ires[10] = __half_as_ushort(__hfma(__float2half(1.5f), __float2half(2.0f), __float2half(0.25f)));
        __half h = __float2half(3.0f);
        h += __half(0.5f);
        h = -h * __half(2.0f);
        ires[11] = __half_as_ushort(h);
        ires[12] = sizeof(Pair) == 16 && alignof(float4) == 16 && alignof(double2) == 16 && sizeof(int2) == 8;
        ires[13] = (int)(vec[1].w + vec[1].x);
        long long big = 1LL << 40;
        ires[14] = atomicMax_block((long long*)&big, 5LL) == (1LL << 40);
        ires[15] = (clock64() > 0) + 2 * (int)(__ldg(&fres[0]) == 0.0f) + 4 * (warpSize == 32);
        fres[1] = helper(4.0f);
        fres[2] = exp10f(2.0f) + __expf(0.0f) + __saturatef(-3.0f) + __saturatef(7.0f);
        float s, co;
        sincospif(0.5f, &s, &co);
        fres[3] = s;
        fres[4] = __bfloat162float(__float2bfloat16(1.0f) + __float2bfloat16(0.00390625f));
    }
}
"""

MISC_WRAPPER = r"""
TSR_EXPORT int tsr_launch_misc(const tsr_launch_config* cfg, void** args) {
    int* ires = *(int**)args[0]; float* fres = *(float**)args[1]; volatile int* flag = *(volatile int**)args[2];
    return tsr::launch(cfg, [=] { misc(ires, fres, flag); });
}
"""


def test_barrier_reductions_spin_wait_and_intrinsics(tmp_path):
    lib = build(tmp_path, MISC, MISC_WRAPPER)
    ires = np.zeros(16, np.int32)
    fres = np.zeros(8, np.float32)
    flag = np.zeros(1, np.int32)
    launch(lib, "tsr_launch_misc", 2, 64, 0, [ptr(ires), ptr(fres), ptr(flag)], num_threads=1)
    h = (np.float16(1.5) * np.float16(2.0) + np.float16(0.25)).view(np.uint16)
    assert list(ires[:3]) == [22, 1, 1]
    assert ires[3] == 8 + 100 * 31 + 10000 * 4
    assert ires[4] == 1 and ires[5] == 1
    assert ires[6] == -4 + 70 - 150
    assert ires[7] == 20 - 2 and ires[8] == 1
    assert ires[9] == 2 + 3 * 0x000001
    assert ires[10] == h
    assert ires[11] == np.float16(-7.0).view(np.uint16)
    assert ires[12] == 1 and ires[13] == 5 and ires[14] == 1 and ires[15] == 7
    assert fres[1] == np.float32(1.0) and fres[2] == np.float32(102.0) and fres[3] == np.float32(1.0)
    assert fres[4] == np.float32(1.0)  # 1 + 2^-8 is a tie in bfloat16: rounds to even


# --------------------------------------------------------------------------- (j) cp.async

ASYNC_GROUPS = r"""
// Each tile owns 64 bytes of `s`, set to 0xEE ("stale"); it issues copies in four commit
// groups and one open group, and saves its bytes after issuing and after each wait.
extern "C" __global__ void async_groups(const unsigned char* __restrict__ src, unsigned char* __restrict__ out) {
    __shared__ __align__(16) unsigned char s[32 * 64];
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned char* mine = s + threadIdx.x * 64;
    const unsigned char* from = src + g * 64;
    for (int i = 0; i < 64; ++i) mine[i] = 0xEE;
    tsr_cp_async<16>(tsr_shared_addr(mine), from, 16, 4, 0);            // group 0
    tsr_cp_async<8>(tsr_shared_addr(mine + 16), from + 16, 5, 1, 0);
    tsr_cp_async_commit();
    tsr_cp_async<4>(tsr_shared_addr(mine + 24), from + 24, 3, 1, 0);    // group 1
    tsr_cp_async<16>(tsr_shared_addr(mine + 32), (const void*)16, 0, 4, 0);  // reads nothing
    tsr_cp_async_commit();
    tsr_cp_async<16>(tsr_shared_addr(mine + 48), from + 48, 12, 4, 0);  // group 2
    tsr_cp_async_commit();
    tsr_cp_async_commit();                                              // group 3: empty
    tsr_cp_async<4>(tsr_shared_addr(mine + 28), from + 28, 4, 4, 0);    // open
    unsigned char* o = out + g * 5 * 64;
    for (int i = 0; i < 64; ++i) o[i] = mine[i];
    tsr_cp_async_wait<2>();
    for (int i = 0; i < 64; ++i) o[64 + i] = mine[i];
    tsr_cp_async_wait<1>();
    for (int i = 0; i < 64; ++i) o[128 + i] = mine[i];
    tsr_cp_async_wait<0>();
    for (int i = 0; i < 64; ++i) o[192 + i] = mine[i];
    tsr_cp_async_commit();
    tsr_cp_async_wait<0>();
    for (int i = 0; i < 64; ++i) o[256 + i] = mine[i];
}
"""

ASYNC_GROUPS_WRAPPER = r"""
TSR_EXPORT int tsr_launch_async_groups(const tsr_launch_config* cfg, void** args) {
    const unsigned char* src = *(const unsigned char* const*)args[0]; unsigned char* out = *(unsigned char**)args[1];
    return tsr::launch(cfg, [=] { async_groups(src, out); });
}
"""


def async_groups_expected(src: np.ndarray) -> np.ndarray:
    """Each tile's 64 bytes after issuing and after wait<2>, <1>, <0> and commit + wait<0>."""
    tiles = src.reshape(-1, 64)
    snap = np.full((tiles.shape[0], 64), 0xEE, np.uint8)
    seen = [snap.copy()]

    def land(lo: int, width: int, src_bytes: int) -> None:
        snap[:, lo:lo + width] = 0
        snap[:, lo:lo + src_bytes] = tiles[:, lo:lo + src_bytes]

    land(0, 16, 16)  # wait<2>: groups 0 and 1
    land(16, 8, 5)
    land(24, 4, 3)
    land(32, 16, 0)
    seen.append(snap.copy())
    land(48, 16, 12)  # wait<1>: group 2
    seen.append(snap.copy())
    seen.append(snap.copy())  # wait<0>: the empty group 3; the open group stays pending
    land(28, 4, 4)  # committed, then wait<0>
    seen.append(snap.copy())
    return np.stack(seen, axis=1)


@pytest.mark.parametrize("num_threads", [1, 3])
def test_cp_async_lands_commit_groups_at_waits(tmp_path, num_threads):
    lib = build(tmp_path, ASYNC_GROUPS, ASYNC_GROUPS_WRAPPER)
    groups, block = 6, 32
    src = np.random.default_rng(7).integers(0, 256, groups * block * 64).astype(np.uint8)
    out = np.zeros(groups * block * 5 * 64, np.uint8)
    launch(lib, "tsr_launch_async_groups", groups, block, 0, [ptr(src), ptr(out)], num_threads=num_threads)
    np.testing.assert_array_equal(out.reshape(-1, 5, 64), async_groups_expected(src))


ASYNC_STALE = r"""
// Tile t copies x[t] into s[t]; its neighbour reads s[t] after a barrier (the copy has not
// landed: a barrier does not complete it) and again after the wait and another barrier.
extern "C" __global__ void async_stale(const float* __restrict__ x, float* __restrict__ before,
                                       float* __restrict__ after) {
    __shared__ __align__(16) float s[64];
    const int t = threadIdx.x;
    s[t] = -1.0f;
    __syncthreads();
    tsr_cp_async<4>(tsr_shared_addr(&s[t]), &x[t], 4, 4, 0);
    tsr_cp_async_commit();
    __syncthreads();
    before[t] = s[(t + 1) % 64];
    __syncthreads();
    tsr_cp_async_wait<0>();
    __syncthreads();
    after[t] = s[(t + 1) % 64];
}
"""

ASYNC_STALE_WRAPPER = r"""
TSR_EXPORT int tsr_launch_async_stale(const tsr_launch_config* cfg, void** args) {
    const float* x = *(const float* const*)args[0]; float* b = *(float**)args[1]; float* a = *(float**)args[2];
    return tsr::launch(cfg, [=] { async_stale(x, b, a); });
}
"""


def test_cp_async_reads_before_the_wait_see_stale_data(tmp_path):
    lib = build(tmp_path, ASYNC_STALE, ASYNC_STALE_WRAPPER)
    x = np.arange(64, dtype=np.float32) + 0.5
    before = np.zeros(64, np.float32)
    after = np.zeros(64, np.float32)
    launch(lib, "tsr_launch_async_stale", 1, 64, 0, [ptr(x), ptr(before), ptr(after)], num_threads=1)
    assert np.all(before == -1.0)
    np.testing.assert_array_equal(after, np.roll(x, -1))


ASYNC_RACE = r"""
// As check_bounds builds do: shared accesses through the race detector, the copy with its
// line (5); each tile reads what the previous one copied.  mode 0: read after a barrier but
// before the wait; 1: the tile reads its own destination before the wait; 2: a second copy into
// a pending destination; 3: read after the wait with no barrier; 4: wait, barrier, read (correct).
extern "C" __global__ void async_race(const float* __restrict__ x, float* __restrict__ y, int mode) {
    __shared__ __align__(16) float s[128];
    const int t = threadIdx.x;
    tsr_cp_async<16>(tsr_shared_addr(&s[4 * t]), &x[4 * t], 16, 4, 5);
    tsr_cp_async_commit();
    if (mode == 2) tsr_cp_async<4>(tsr_shared_addr(&s[4 * t + 2]), &x[0], 4, 4, 7);
    if (mode == 0 || mode == 4) __syncthreads();
    if (mode != 0 && mode != 1) tsr_cp_async_wait<0>();
    if (mode == 4) __syncthreads();
    const int j = mode == 1 ? 4 * t : (4 * t + 124) % 128;
    y[t] = *tsr_race_read(&s[j], 9);
}
"""

ASYNC_RACE_WRAPPER = r"""
TSR_EXPORT int tsr_launch_async_race(const tsr_launch_config* cfg, void** args) {
    const float* x = *(const float* const*)args[0]; float* y = *(float**)args[1]; int mode = *(const int*)args[2];
    return tsr::launch(cfg, [=] { async_race(x, y, mode); }, "async_race");
}
"""

PENDING = "while the asynchronous copy (tcopy_async) into it that tile {} started at line 5 is in flight: " \
          "no twait has completed it"


@pytest.mark.parametrize(("mode", "message"), [
    (0, "async_race:9: shared-memory data race: tile 31 reads it at line 9 " + PENDING.format(30)),
    (1, "async_race:9: shared-memory data race: tile 0 reads it at line 9 " + PENDING.format(0)),
    (2, "async_race:7: shared-memory data race: tile 0 starts another asynchronous copy into it at line 7 "
        + PENDING.format(0)),
    (3, "async_race:9: shared-memory data race: tile 0 writes it at line 5 and tile 1 reads it at line 9 "
        "with no tbarrier() between"),
])
def test_cp_async_race_detector(tmp_path, mode, message):
    lib = build(tmp_path, ASYNC_RACE, ASYNC_RACE_WRAPPER)
    x = np.arange(128, dtype=np.float32)
    y = np.zeros(32, np.float32)
    with pytest.raises(LaunchError) as info:
        launch(lib, "tsr_launch_async_race", 1, 32, 0, [ptr(x), ptr(y), ctypes.c_int(mode)], num_threads=1)
    assert re.sub(r" \(block .*\)$", "", str(info.value)) == message
    launch(lib, "tsr_launch_async_race", 1, 32, 0, [ptr(x), ptr(y), ctypes.c_int(4)], num_threads=1)
    np.testing.assert_array_equal(y, np.roll(x, 4)[::4])


ASYNC_LEAK = r"""
// Groups alternate: an odd group copies into `a` and ends without waiting; an even group
// writes `a` itself, waits for a copy into `b` and checks that only that one landed.
extern "C" __global__ void async_leak(const int* __restrict__ x, int* __restrict__ out) {
    __shared__ __align__(16) int a[64];
    __shared__ __align__(16) int b[64];
    const int t = threadIdx.x, g = blockIdx.x;
    if (g % 2) {
        tsr_cp_async<4>(tsr_shared_addr(&a[t]), &x[t], 4, 4, 3);
        tsr_cp_async_commit();
        return;
    }
    *tsr_race_write(&a[t], 6) = -g;
    tsr_cp_async<4>(tsr_shared_addr(&b[t]), &x[64 + t], 4, 4, 7);
    tsr_cp_async_commit();
    tsr_cp_async_wait<0>();
    out[g * 64 + t] = *tsr_race_read(&a[t], 10) + 1000 * *tsr_race_read(&b[t], 10);
}
"""

ASYNC_LEAK_WRAPPER = r"""
TSR_EXPORT int tsr_launch_async_leak(const tsr_launch_config* cfg, void** args) {
    const int* x = *(const int* const*)args[0]; int* out = *(int**)args[1];
    return tsr::launch(cfg, [=] { async_leak(x, out); });
}
"""


@pytest.mark.parametrize("num_threads", [1, 4])
def test_cp_async_pending_copies_do_not_outlive_their_group(tmp_path, num_threads):
    lib = build(tmp_path, ASYNC_LEAK, ASYNC_LEAK_WRAPPER)
    groups = 64
    x = np.arange(128, dtype=np.int32) + 1
    out = np.full(groups * 64, 7, np.int32)
    launch(lib, "tsr_launch_async_leak", groups, 64, 0, [ptr(x), ptr(out)], num_threads=num_threads)
    g = np.arange(groups)[:, None]
    expected = np.where(g % 2, 7, -g + 1000 * x[64:][None, :])
    np.testing.assert_array_equal(out.reshape(groups, 64), expected)


ASYNC_PIPELINE = r"""
// A three-stage pipeline, as pipelined loops are emitted: chunk c of the group's rows (64
// tiles x 9 float4) is copied into stage c % 3 two iterations before it is summed; tile t sums
// the elements t, t + 64, ... of each chunk, which other tiles copied.  `checked` routes the
// accesses through the race detector, as check_bounds builds do.
constexpr int kChunk = 64 * 36;

__device__ void issue_chunk(float* stage, const float* chunk, int t, int line) {
    for (int j = 0; j < 9; ++j) {
        const int f = (j * 64 + t) * 4;
        tsr_cp_async<16>(tsr_shared_addr(&stage[f]), &chunk[f], 16, 4, line);
    }
}

extern "C" __global__ void async_pipeline(const float* __restrict__ x, float* __restrict__ y, int chunks, int checked) {
    __shared__ __align__(16) float s[3][kChunk];
    const int t = threadIdx.x;
    const float* rows = x + (long long)blockIdx.x * chunks * kChunk;
    for (int c = 0; c < 2; ++c) {
        issue_chunk(s[c], rows + c * kChunk, t, checked ? 12 : 0);
        tsr_cp_async_commit();
    }
    float acc = 0.0f;
    for (int c = 0; c < chunks; ++c) {
        if (c + 2 < chunks) issue_chunk(s[(c + 2) % 3], rows + (c + 2) * kChunk, t, checked ? 12 : 0);
        tsr_cp_async_commit();  // possibly empty: the group count stays uniform
        tsr_cp_async_wait<2>();
        __syncthreads();
        for (int i = t; i < kChunk; i += 64) acc += checked ? *tsr_race_read(&s[c % 3][i], 20) : s[c % 3][i];
        __syncthreads();  // the stage is refilled next iteration
    }
    y[blockIdx.x * 64 + t] = acc;
}
"""

ASYNC_PIPELINE_WRAPPER = r"""
TSR_EXPORT int tsr_launch_async_pipeline(const tsr_launch_config* cfg, void** args) {
    const float* x = *(const float* const*)args[0]; float* y = *(float**)args[1];
    int chunks = *(const int*)args[2]; int checked = *(const int*)args[3];
    return tsr::launch(cfg, [=] { async_pipeline(x, y, chunks, checked); });
}
"""


@pytest.mark.parametrize("checked", [0, 1])
def test_cp_async_three_stage_pipeline(tmp_path, checked):
    lib = build(tmp_path, ASYNC_PIPELINE, ASYNC_PIPELINE_WRAPPER)
    groups, chunks = 5, 12
    x = np.random.default_rng(3).standard_normal(groups * chunks * 64 * 36).astype(np.float32)
    y = np.zeros(groups * 64, np.float32)
    args = [ptr(x), ptr(y), ctypes.c_int(chunks), ctypes.c_int(checked)]
    launch(lib, "tsr_launch_async_pipeline", groups, 64, 0, args, num_threads=2)
    expected = x.astype(np.float64).reshape(groups, -1, 64).sum(axis=1).ravel()
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
