// FlashAttention-2 forward, O = softmax(scale * Q K^T) V per (batch, head), written by hand for
// f16 Q, K, V, O laid out [B * H][N][D] (row-major, D contiguous), with f32 accumulation. The
// tiling samples/flash_attention.tsr is compared with: 128 threads (4 warps) compute a 64 x D block
// of O, each warp 16 query rows; the key/value sequence is walked 64 rows at a time.
//
// - Q's 64 x D block goes through shared memory once and stays in registers (ldmatrix.x4, the mma
//   A layout) for the whole key loop.
// - K and V blocks go through a 2-stage ring of shared buffers filled with 16-byte cp.async copies
//   one block ahead; one __syncthreads per block: after it, block j has landed for every warp and
//   every warp is done with block j - 1, whose stage the copies of block j + 1 then refill.
// - S = Q K^T (mma.sync.m16n8k16, K read with ldmatrix.x4: K's rows are the B operand's columns),
//   masked (keys past N; keys after the query in causal mode), then the online softmax in
//   registers: row max and sum over the quad of threads that share a row (two shuffles), the
//   running output rescaled by exp2(m_old - m_new).
// - P = exp2(...) is converted to f16 in registers: the accumulator layout of two m16n8 tiles is
//   the A layout of one k16 step, so P never touches shared memory. O += P V reads V with
//   ldmatrix.x4.trans.
// - The row sums are reduced over the quad at the end; O is divided by them and stored as f16
//   (rows past N skipped).
//
// Rows are padded by 8 halves so that the 8 rows of an ldmatrix phase fall in different banks.
// Assumes Q, K, V, O 16-byte aligned (D is 64 or 128). Any N works: rows past N are zero-filled
// on the way in and masked. Launch with blockDim 128, gridDim (ceil(N / 64), B * H) and
// sizeof(Smem<D>) bytes of dynamic shared memory (46,080 for D = 64, 87,040 for D = 128, which
// needs the opt-in above 48 KiB). Needs sm_80 or newer.

#include <cuda_fp16.h>

namespace {

constexpr int kThreads = 128;
constexpr int kBM = 64;   // query rows of a block (16 per warp)
constexpr int kBN = 64;   // key rows of a step
constexpr int kPad = 8;   // halves added to each shared row
constexpr float kLog2e = 1.4426950408889634f;
#define NEG_INF __int_as_float(0xff800000)  // -infinity (NVRTC has no <math.h> INFINITY)

template <int D>
struct Smem {
    __half q[kBM][D + kPad];
    __half k[2][kBN][D + kPad];
    __half v[2][kBN][D + kPad];
};

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void copy16_async(unsigned dst, const void* src, bool in_bounds) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(in_bounds ? 16 : 0) : "memory");
}

__device__ __forceinline__ void commit_async() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

__device__ __forceinline__ void wait_all_async() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

__device__ __forceinline__ void mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ unsigned pack_half2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&h);
}

// Rows row0 .. row0 + 63 of a [N][D] matrix into a 64 x D shared tile, 16 bytes per copy; rows
// past N are zero-filled.
template <int D>
__device__ __forceinline__ void load_tile(__half (*dst)[D + kPad], const __half* src, int row0, int N, int tid) {
    constexpr int kChunks = kBN * D / 8;
#pragma unroll
    for (int p = 0; p < kChunks / kThreads; ++p) {
        const int c = tid + p * kThreads;
        const int r = c / (D / 8), col = (c % (D / 8)) * 8;
        const bool in = row0 + r < N;
        copy16_async(smem_addr(&dst[r][col]), in ? src + (size_t)(row0 + r) * D + col : src, in);
    }
}

template <int D>
__device__ __forceinline__ void attention(const __half* __restrict__ Q, const __half* __restrict__ K,
                                          const __half* __restrict__ V, __half* __restrict__ O, int N, float scale,
                                          int causal) {
    extern __shared__ __align__(16) unsigned char smem[];
    Smem<D>& s = *reinterpret_cast<Smem<D>*>(smem);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int m0 = blockIdx.x * kBM, wr = warp * 16;
    const size_t base = (size_t)blockIdx.y * N * D;
    Q += base;
    K += base;
    V += base;
    O += base;
    const float scale_log2 = scale * kLog2e;
    int blocks = (N + kBN - 1) / kBN;
    if (causal) blocks = min(blocks, (m0 + kBM + kBN - 1) / kBN);

    load_tile<D>(s.q, Q, m0, N, tid);
    load_tile<D>(s.k[0], K, 0, N, tid);
    load_tile<D>(s.v[0], V, 0, N, tid);
    commit_async();
    wait_all_async();
    __syncthreads();
    unsigned qf[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(qf[kk], smem_addr(&s.q[wr + (lane & 15)][kk * 16 + (lane >> 4) * 8]));

    float o[D / 8][4] = {};
    float row_max[2] = {NEG_INF, NEG_INF}, row_sum[2] = {0.f, 0.f};
    for (int j = 0; j < blocks; ++j) {
        if (j > 0) {
            wait_all_async();
            __syncthreads();  // block j has landed; every warp is done with block j - 1's stage
        }
        if (j + 1 < blocks) {
            load_tile<D>(s.k[(j + 1) & 1], K, (j + 1) * kBN, N, tid);
            load_tile<D>(s.v[(j + 1) & 1], V, (j + 1) * kBN, N, tid);
        }
        commit_async();
        const __half (*sk)[D + kPad] = s.k[j & 1];
        const __half (*sv)[D + kPad] = s.v[j & 1];

        float sacc[kBN / 8][4] = {};
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
            for (int n = 0; n < kBN / 8; n += 2) {
                unsigned b[4];
                const int mi = lane >> 3;
                ldmatrix_x4(b, smem_addr(&sk[n * 8 + (mi >> 1) * 8 + (lane & 7)][kk * 16 + (mi & 1) * 8]));
                mma(sacc[n], qf[kk], b[0], b[1]);
                mma(sacc[n + 1], qf[kk], b[2], b[3]);
            }
        }
        const int k0 = j * kBN;
        if (k0 + kBN > N || (causal && k0 + kBN > m0 + wr)) {
#pragma unroll
            for (int n = 0; n < kBN / 8; ++n) {
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int key = k0 + n * 8 + 2 * t + (r & 1), query = m0 + wr + g + (r >> 1) * 8;
                    if (key >= N || (causal && key > query)) sacc[n][r] = NEG_INF;
                }
            }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float mx = row_max[h];
#pragma unroll
            for (int n = 0; n < kBN / 8; ++n) mx = fmaxf(mx, fmaxf(sacc[n][2 * h], sacc[n][2 * h + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float shift = mx == NEG_INF ? 0.f : mx * scale_log2;
            const float alpha = exp2f(row_max[h] * scale_log2 - shift);
            row_max[h] = mx;
            float sum = 0.f;
#pragma unroll
            for (int n = 0; n < kBN / 8; ++n) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float p = exp2f(sacc[n][2 * h + e] * scale_log2 - shift);
                    sacc[n][2 * h + e] = p;
                    sum += p;
                }
            }
            row_sum[h] = row_sum[h] * alpha + sum;
#pragma unroll
            for (int d = 0; d < D / 8; ++d) {
                o[d][2 * h] *= alpha;
                o[d][2 * h + 1] *= alpha;
            }
        }
#pragma unroll
        for (int kk = 0; kk < kBN / 16; ++kk) {
            const unsigned a[4] = {pack_half2(sacc[2 * kk][0], sacc[2 * kk][1]),
                                   pack_half2(sacc[2 * kk][2], sacc[2 * kk][3]),
                                   pack_half2(sacc[2 * kk + 1][0], sacc[2 * kk + 1][1]),
                                   pack_half2(sacc[2 * kk + 1][2], sacc[2 * kk + 1][3])};
#pragma unroll
            for (int d = 0; d < D / 8; d += 2) {
                unsigned b[4];
                ldmatrix_x4_trans(b, smem_addr(&sv[kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8][d * 8 + (lane >> 4) * 8]));
                mma(o[d], a, b[0], b[1]);
                mma(o[d + 1], a, b[2], b[3]);
            }
        }
    }
    wait_all_async();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float sum = row_sum[h];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
        const int row = m0 + wr + g + h * 8;
        if (row < N) {
#pragma unroll
            for (int d = 0; d < D / 8; ++d) {
                *reinterpret_cast<__half2*>(O + (size_t)row * D + d * 8 + 2 * t) =
                    __floats2half2_rn(o[d][2 * h] * inv, o[d][2 * h + 1] * inv);
            }
        }
    }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads)
flash_fwd_d64(const __half* __restrict__ Q, const __half* __restrict__ K, const __half* __restrict__ V,
              __half* __restrict__ O, int N, float scale, int causal) {
    attention<64>(Q, K, V, O, N, scale, causal);
}

extern "C" __global__ void __launch_bounds__(kThreads)
flash_fwd_d128(const __half* __restrict__ Q, const __half* __restrict__ K, const __half* __restrict__ V,
               __half* __restrict__ O, int N, float scale, int causal) {
    attention<128>(Q, K, V, O, N, scale, causal);
}
