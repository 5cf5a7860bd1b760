// C = A @ B for row-major f16 matrices A[M][K], B[K][N] and f32 C[M][N], written by hand for sm_90a
// with the tiling of samples/tc_gemm_f16.tsr at its defaults, as hgemm_wgmma.cu, but with the tiles
// moved by the tensor memory accelerator: 256 threads (2 warpgroups) compute a 128 x 128 tile of C,
// each warpgroup a 64 x 128 block with one wgmma.mma_async.m64n128k16 per k16 step, stepping
// through K 32 at a time over a 3-stage ring of shared-memory buffers. Thread 0 fills a stage with
// three cp.async.bulk.tensor copies two k-steps ahead, completing on the stage's mbarrier (one
// arrive.expect_tx of the stage's bytes): A's 128 x 32 box through a tensor map with the 64-byte
// swizzle (rows of 64 bytes), and B's 32 x 128 tile as two 32 x 64 boxes (its panels of 128 bytes)
// through a map with the 128-byte swizzle. Every thread waits on the barrier's phase; the
// descriptors name the layouts the TMA wrote (B read MN-major, transposed by the instruction).
//
// The kernel takes the tensor maps (cuTensorMapEncodeTiled, 128 opaque bytes each, out-of-bound
// fill NONE: parts of a box outside the matrix read as zero): tmap_a describes A as {K, M} (innermost
// first) with box {32, 128} and CU_TENSOR_MAP_SWIZZLE_64B, tmap_b describes B as {N, K} with box
// {64, 32} and CU_TENSOR_MAP_SWIZZLE_128B. K and N multiples of 8 (16-byte row strides), A, B 16-byte
// aligned; any M. Launch with blockDim 256, gridDim (ceil(N / 128), ceil(M / 128)) and
// kStages * kStageBytes (48 KiB) of dynamic shared memory.

#include <cuda_fp16.h>

namespace {

constexpr int kThreads = 256;
constexpr int kBM = 128;
constexpr int kBN = 128;
constexpr int kBK = 32;
constexpr int kStages = 3;
constexpr int kABytes = kBM * kBK * 2;       // 8 KiB: 128 rows of 64 bytes
constexpr int kBBytes = kBK * kBN * 2;       // 8 KiB: 2 panels of 32 rows of 128 bytes
constexpr int kStageBytes = kABytes + kBBytes;

struct __align__(64) TensorMap {
    unsigned long long opaque[16];
};

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void tma_2d(unsigned dst, const TensorMap* map, int c0, int c1, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}

// Thread 0: the k-step at k0 into the stage at byte `s`, on barrier `bar`.
__device__ __forceinline__ void load_stage(unsigned s, unsigned bar, const TensorMap* ta, const TensorMap* tb, int m0,
                                           int n0, int k0) {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(kStageBytes) : "memory");
    tma_2d(s, ta, k0, m0, bar);
    tma_2d(s + kABytes, tb, n0, k0, bar);
    tma_2d(s + kABytes + kBK * 128, tb, n0 + 64, k0, bar);
}

__device__ __forceinline__ void wait_phase(unsigned bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

// A descriptor: start address, leading and stride byte offsets (>> 4) and the swizzle mode.
__device__ __forceinline__ unsigned long long descriptor(unsigned addr, unsigned lead, unsigned stride, unsigned mode) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(lead >> 4) << 16) |
           ((unsigned long long)(stride >> 4) << 32) | ((unsigned long long)mode << 62);
}

#define ACC8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                "+f"(d[i + 6]), "+f"(d[i + 7])

// d (64 registers) += A (64 x 16, K-major) @ B (16 x 128, MN-major).
__device__ __forceinline__ void mma_64x128x16(float* d, unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1, 0, 1;\n}\n"
        : ACC8(0), ACC8(8), ACC8(16), ACC8(24), ACC8(32), ACC8(40), ACC8(48), ACC8(56)
        : "l"(da), "l"(db), "r"(1));
}

__device__ __forceinline__ void fence_acc(float* d) {
#pragma unroll
    for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads)
hgemm_wgmma_tma(const __grid_constant__ TensorMap tmap_a, const __grid_constant__ TensorMap tmap_b,
                float* __restrict__ C, int M, int K, int N) {
    extern __shared__ __align__(1024) unsigned char smem[];
    __shared__ __align__(8) unsigned long long bars[kStages];
    const unsigned base = smem_addr(smem), bar0 = smem_addr(bars);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
    const int wg_row = (warp >> 2) * 64;       // the warpgroup's rows of the tile
    if (tid == 0) {
        for (int s = 0; s < kStages; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar0 + 8 * s));
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    float d[64] = {};
    const int steps = (K + kBK - 1) / kBK;
    if (tid == 0) {
        for (int s = 0; s < kStages - 1 && s < steps; ++s)
            load_stage(base + s * kStageBytes, bar0 + 8 * s, &tmap_a, &tmap_b, m0, n0, s * kBK);
    }
    unsigned phases = 0;  // bit s: the parity of stage s's current phase
    for (int step = 0; step < steps; ++step) {
        const int stage = step % kStages;
        wait_phase(bar0 + 8 * stage, (phases >> stage) & 1u);
        phases ^= 1u << stage;
        __syncthreads();  // every warpgroup is done with the stage refilled next
        const int next = step + kStages - 1;
        if (tid == 0 && next < steps)
            load_stage(base + (next % kStages) * kStageBytes, bar0 + 8 * (next % kStages), &tmap_a, &tmap_b, m0, n0,
                       next * kBK);
        const unsigned st = base + stage * kStageBytes;
        fence_acc(d);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < kBK; kk += 16) {
            const unsigned long long da = descriptor(st + wg_row * 64 + kk * 2, 16, 512, 2);
            const unsigned long long db = descriptor(st + kABytes + kk * 128, kBK * 128, 1024, 1);
            mma_64x128x16(d, da, db);
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        fence_acc(d);
    }
    const int g = lane >> 2, t = lane & 3, row0 = m0 + wg_row + (warp & 3) * 16 + g;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int row = row0 + (r >> 1) * 8, col = n0 + j * 8 + 2 * t + (r & 1);
            if (row < M && col < N) C[(size_t)row * N + col] = d[j * 4 + r];
        }
    }
}
