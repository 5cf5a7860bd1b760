// C = A @ B for row-major f16 matrices A[M][K], B[K][N] and f32 C[M][N], written by hand for sm_90a
// with the tiling of samples/tc_gemm_f16.tsr at its defaults: 256 threads (2 warpgroups) compute a
// 128 x 128 tile of C, each warpgroup a 64 x 128 block with one wgmma.mma_async.m64n128k16 per
// k16 step (A and B read from shared memory through matrix descriptors, f32 accumulators),
// stepping through K 32 at a time. The A and B tiles go through a 3-stage ring of shared-memory
// buffers filled with 16-byte cp.async copies two k-steps ahead, stored in the swizzled layouts the
// descriptors name: A's 64-byte rows in the 64-byte mode (16-byte chunk c of row r at c ^ ((r / 2) % 4)),
// B's 256-byte rows as two panels of 64 columns in the 128-byte mode (chunk c of row r at c ^ (r % 8)),
// B read MN-major (transposed by the instruction).
//
// Assumes K and N are multiples of 8 and A, B 16-byte aligned; any M, and K, N not multiples of the
// tile, work: chunks outside the matrices are zero-filled and C is stored only inside. Launch with
// blockDim 256, gridDim (ceil(N / 128), ceil(M / 128)) and kStages * kStageBytes (48 KiB) of dynamic
// shared memory.

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

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void copy16_async(unsigned dst, const void* src, bool in_bounds) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(in_bounds ? 16 : 0) : "memory");
}
__device__ __forceinline__ void commit_async() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int pending>
__device__ __forceinline__ void wait_async() { asm volatile("cp.async.wait_group %0;\n" :: "n"(pending) : "memory"); }

// Byte offsets of the 16-byte chunk `c` of row `r` in the two swizzled tiles.
__device__ __forceinline__ unsigned a_chunk(unsigned r, unsigned c) { return r * 64 + ((c ^ ((r >> 1) & 3)) << 4); }
__device__ __forceinline__ unsigned b_chunk(unsigned r, unsigned c) {
    return (c >> 3) * (kBK * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4);
}

// The k-step at k0 into the stage at byte `s`: 512 chunks of A and 512 of B, two of each per thread.
__device__ __forceinline__ void load_stage(unsigned s, const __half* A, const __half* B, int M, int K, int N, int m0,
                                           int n0, int k0, int tid) {
#pragma unroll
    for (int p = 0; p < 2; ++p) {
        const int c = tid + p * kThreads;
        const int ar = c / (kBK / 8), ac = c % (kBK / 8);
        const bool a_in = m0 + ar < M && k0 + ac * 8 < K;
        copy16_async(s + a_chunk(ar, ac), a_in ? A + (size_t)(m0 + ar) * K + k0 + ac * 8 : A, a_in);
        const int br = c / (kBN / 8), bc = c % (kBN / 8);
        const bool b_in = k0 + br < K && n0 + bc * 8 < N;
        copy16_async(s + kABytes + b_chunk(br, bc), b_in ? B + (size_t)(k0 + br) * N + n0 + bc * 8 : B, b_in);
    }
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
hgemm_wgmma(const __half* __restrict__ A, const __half* __restrict__ B, float* __restrict__ C, int M, int K, int N) {
    extern __shared__ __align__(1024) unsigned char smem[];
    const unsigned base = smem_addr(smem);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
    const int wg_row = (warp >> 2) * 64;       // the warpgroup's rows of the tile
    float d[64] = {};
    const int steps = (K + kBK - 1) / kBK;
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < steps) load_stage(base + s * kStageBytes, A, B, M, K, N, m0, n0, s * kBK, tid);
        commit_async();
    }
    for (int step = 0; step < steps; ++step) {
        wait_async<kStages - 2>();
        __syncthreads();  // this step's tiles have landed; every warpgroup is done with the stage refilled next
        const int next = step + kStages - 1;
        if (next < steps) load_stage(base + (next % kStages) * kStageBytes, A, B, M, K, N, m0, n0, next * kBK, tid);
        commit_async();
        const unsigned st = base + (step % kStages) * kStageBytes;
        fence_acc(d);
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
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
    wait_async<0>();
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
