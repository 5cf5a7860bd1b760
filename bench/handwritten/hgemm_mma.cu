// C = A @ B for row-major f16 matrices A[M][K], B[K][N] and f32 C[M][N], written by hand with the
// tiling of samples/tc_gemm_f16.tsr at its defaults: 256 threads (8 warps, 2 x 4) compute a
// 128 x 128 tile of C, each warp a 64 x 32 block of 4 x 4 mma.sync.m16n8k16 tiles (f32
// accumulators), stepping through K 32 at a time. The A and B tiles go through a 3-stage ring of
// shared-memory buffers filled with 16-byte cp.async copies two k-steps ahead; rows are padded by
// 8 halves (16 bytes) so that the 8 rows of an ldmatrix phase fall in different banks. A is read
// with ldmatrix.x4, B with ldmatrix.x4.trans.
//
// Assumes K and N are multiples of 8 and A, B 16-byte aligned (every 16-byte chunk of a row is in
// or out of the matrix as a whole); any M, and K, N not multiples of the tile, work: chunks
// outside the matrices are zero-filled and C is stored only inside. Launch with blockDim 256 and
// gridDim (ceil(N / 128), ceil(M / 128)). Needs sm_80 or newer.

#include <cuda_fp16.h>

namespace {

constexpr int kThreads = 256;
constexpr int kBM = 128;
constexpr int kBN = 128;
constexpr int kBK = 32;
constexpr int kStages = 3;
constexpr int kPad = 8;                      // halves added to each shared row
constexpr int kWarpsN = 4;                   // warps along N (2 along M)
constexpr int kWM = 64, kWN = 32;            // a warp's block of C
constexpr int kTM = kWM / 16, kTN = kWN / 8;  // its mma tiles

struct Stage {
    __half a[kBM][kBK + kPad];
    __half b[kBK][kBN + kPad];
};

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void copy16_async(unsigned dst, const void* src, bool in_bounds) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(in_bounds ? 16 : 0) : "memory");
}

__device__ __forceinline__ void commit_async() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int pending>
__device__ __forceinline__ void wait_async() { asm volatile("cp.async.wait_group %0;\n" :: "n"(pending) : "memory"); }

// The k-step at k0 into stage s: the 128 x 32 tile of A (512 chunks of 8 halves) and the 32 x 128
// tile of B (512 chunks), two chunks of each per thread.
__device__ __forceinline__ void load_stage(Stage& s, const __half* A, const __half* B, int M, int K, int N, int m0,
                                           int n0, int k0, int tid) {
#pragma unroll
    for (int p = 0; p < 2; ++p) {
        const int c = tid + p * kThreads;
        const int ar = c / (kBK / 8), ak = (c % (kBK / 8)) * 8;
        const bool a_in = m0 + ar < M && k0 + ak < K;
        copy16_async(smem_addr(&s.a[ar][ak]), a_in ? A + (size_t)(m0 + ar) * K + k0 + ak : A, a_in);
        const int br = c / (kBN / 8), bn = (c % (kBN / 8)) * 8;
        const bool b_in = k0 + br < K && n0 + bn < N;
        copy16_async(smem_addr(&s.b[br][bn]), b_in ? B + (size_t)(k0 + br) * N + n0 + bn : B, b_in);
    }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads)
hgemm(const __half* __restrict__ A, const __half* __restrict__ B, float* __restrict__ C, int M, int K, int N) {
    extern __shared__ __align__(16) unsigned char smem[];
    Stage* stage = reinterpret_cast<Stage*>(smem);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
    const int wm = (warp / kWarpsN) * kWM, wn = (warp % kWarpsN) * kWN;
    float acc[kTM][kTN][4] = {};
    const int steps = (K + kBK - 1) / kBK;
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < steps) load_stage(stage[s], A, B, M, K, N, m0, n0, s * kBK, tid);
        commit_async();
    }
    for (int step = 0; step < steps; ++step) {
        wait_async<kStages - 2>();
        __syncthreads();  // this step's tiles have landed; every warp is done with the stage refilled next
        const int next = step + kStages - 1;
        if (next < steps) load_stage(stage[next % kStages], A, B, M, K, N, m0, n0, next * kBK, tid);
        commit_async();
        const Stage& st = stage[step % kStages];
#pragma unroll
        for (int kk = 0; kk < kBK; kk += 16) {
            unsigned a[kTM][4], b[kTN][2];
#pragma unroll
            for (int i = 0; i < kTM; ++i) {
                const unsigned p = smem_addr(&st.a[wm + i * 16 + (lane & 15)][kk + (lane >> 4) * 8]);
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                             : "=r"(a[i][0]), "=r"(a[i][1]), "=r"(a[i][2]), "=r"(a[i][3]) : "r"(p));
            }
#pragma unroll
            for (int j = 0; j < kTN; j += 2) {
                const unsigned p = smem_addr(&st.b[kk + (lane & 7) + ((lane >> 3) & 1) * 8][wn + j * 8 + (lane >> 4) * 8]);
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                             : "=r"(b[j][0]), "=r"(b[j][1]), "=r"(b[j + 1][0]), "=r"(b[j + 1][1]) : "r"(p));
            }
#pragma unroll
            for (int i = 0; i < kTM; ++i) {
#pragma unroll
                for (int j = 0; j < kTN; ++j) {
                    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                                 : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]), "+f"(acc[i][j][3])
                                 : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]), "r"(b[j][0]), "r"(b[j][1]));
                }
            }
        }
    }
    wait_async<0>();
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
#pragma unroll
        for (int j = 0; j < kTN; ++j) {
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int row = m0 + wm + i * 16 + g + (r >> 1) * 8, col = n0 + wn + j * 8 + 2 * t + (r & 1);
                if (row < M && col < N) C[(size_t)row * N + col] = acc[i][j][r];
            }
        }
    }
}
