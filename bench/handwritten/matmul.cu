// C = A @ B for row-major f32 matrices A[M][K], B[K][N], C[M][N], written by hand with the tiling
// of samples/matmul.tsr: a 16x16 block of threads computes a 64x64 tile of C, stepping through K
// 16 at a time; the A and B tiles are staged in padded shared memory, and each thread accumulates
// a 4x4 block of C (rows ty*4+i, columns tx*4+j) in registers.
//
// Tiles are loaded as float4 (16 bytes) when K and N are multiples of 4 and A and B are 16-byte
// aligned, which is decided once per launch; otherwise element by element. Either way elements
// outside the matrices read as zero, so any M, K, N works. Launch with blockDim (16, 16) and
// gridDim (ceil(N / 64), ceil(M / 64)).

namespace {

constexpr int kThreadsX = 16;
constexpr int kThreadsY = 16;
constexpr int kBM = 64;
constexpr int kBN = 64;
constexpr int kBK = 16;
constexpr int kPad = 4;  // floats added to each shared row against bank conflicts
constexpr int kTM = kBM / kThreadsY;  // rows of C per thread
constexpr int kTN = kBN / kThreadsX;  // columns of C per thread

// The four elements X[r][c..c+3] of a row-major matrix at p, zero outside it: row_in says whether
// row r exists, `left` how many columns from c on do (all four are in when left >= 4).
// kVec: the row length is a multiple of 4 and X is 16-byte aligned, so the four are in or out
// together and one 16-byte load reads them.
template <bool kVec>
__device__ __forceinline__ float4 load4(const float* __restrict__ p, bool row_in, int left) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (kVec) {
        if (row_in && left > 0) v = *reinterpret_cast<const float4*>(p);
    } else if (row_in) {
        if (left > 0) v.x = p[0];
        if (left > 1) v.y = p[1];
        if (left > 2) v.z = p[2];
        if (left > 3) v.w = p[3];
    }
    return v;
}

template <bool kVec>
__device__ __forceinline__ void matmul_tile(const float* __restrict__ A, const float* __restrict__ B,
                                            float* __restrict__ C, int M, int K, int N,
                                            float (&As)[kBM][kBK + kPad], float (&Bs)[kBK][kBN + kPad]) {
    static_assert(kBM * kBK == 4 * kThreadsX * kThreadsY, "one float4 of the A tile per thread");
    static_assert(kBK * kBN == 4 * kThreadsX * kThreadsY, "one float4 of the B tile per thread");

    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int tid = ty * kThreadsX + tx;
    const int r0 = blockIdx.y * kBM;
    const int c0 = blockIdx.x * kBN;
    // The float4 each thread loads: A tile row a_row, columns a_col..+3; B tile likewise.
    const int a_row = tid / (kBK / 4);
    const int a_col = tid % (kBK / 4) * 4;
    const int b_row = tid / (kBN / 4);
    const int b_col = tid % (kBN / 4) * 4;
    const bool a_row_in = r0 + a_row < M;
    const int b_cols_left = N - (c0 + b_col);
    const float* a_src = A + (r0 + a_row) * K + a_col;  // advances along the row by kBK a step
    const float* b_src = B + b_row * N + c0 + b_col;    // advances down the columns by kBK rows

    float acc[kTM][kTN] = {};
    for (int k0 = 0; k0 < K; k0 += kBK, a_src += kBK, b_src += kBK * N) {
        *reinterpret_cast<float4*>(&As[a_row][a_col]) = load4<kVec>(a_src, a_row_in, K - (k0 + a_col));
        *reinterpret_cast<float4*>(&Bs[b_row][b_col]) = load4<kVec>(b_src, k0 + b_row < K, b_cols_left);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < kBK; ++kk) {
            const float4 b = *reinterpret_cast<const float4*>(&Bs[kk][tx * kTN]);
#pragma unroll
            for (int i = 0; i < kTM; ++i) {
                const float a = As[ty * kTM + i][kk];
                acc[i][0] += a * b.x;
                acc[i][1] += a * b.y;
                acc[i][2] += a * b.z;
                acc[i][3] += a * b.w;
            }
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < kTM; ++i) {
        const int r = r0 + ty * kTM + i;
#pragma unroll
        for (int j = 0; j < kTN; ++j) {
            const int c = c0 + tx * kTN + j;
            if (r < M && c < N) C[r * N + c] = acc[i][j];
        }
    }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreadsX * kThreadsY)
matmul(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int K, int N) {
    __shared__ __align__(16) float As[kBM][kBK + kPad];
    __shared__ __align__(16) float Bs[kBK][kBN + kPad];
    const bool vec = K % 4 == 0 && N % 4 == 0 &&
                     (reinterpret_cast<unsigned long long>(A) | reinterpret_cast<unsigned long long>(B)) % 16 == 0;
    if (vec) {
        matmul_tile<true>(A, B, C, M, K, N, As, Bs);
    } else {
        matmul_tile<false>(A, B, C, M, K, N, As, Bs);
    }
}
