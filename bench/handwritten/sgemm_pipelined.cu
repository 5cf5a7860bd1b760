// C = A @ B for row-major f32 matrices A[M][K], B[K][N], C[M][N], written by hand with the tiling
// of samples/sgemm_pipelined.tsr: a 16x16 block of threads computes a 128x128 tile of C, stepping
// through K 8 at a time. The A and B tiles go through a 3-stage ring of padded shared-memory
// buffers, filled with cp.async 16-byte copies issued two k-steps ahead of the computation. Each
// thread accumulates an 8x8 block of C in registers: rows ty + 16*i, columns tx + 16*j.
//
// Assumes K and N are multiples of 4 and A and B are 16-byte aligned (every 16-byte chunk of a
// row is then in or out of the matrix as a whole); any M, and K, N not multiples of the tile, work:
// chunks outside the matrices are zero-filled. Launch with blockDim (16, 16) and
// gridDim (ceil(N / 128), ceil(M / 128)). Needs sm_80 or newer.

namespace {

constexpr int kThreadsX = 16;
constexpr int kThreadsY = 16;
constexpr int kBM = 128;
constexpr int kBN = 128;
constexpr int kBK = 8;
constexpr int kStages = 3;
constexpr int kPad = 4;  // floats added to each shared row against bank conflicts
constexpr int kTM = kBM / kThreadsY;  // rows of C per thread
constexpr int kTN = kBN / kThreadsX;  // columns of C per thread

struct Stage {
    float a[kBM][kBK + kPad];
    float b[kBK][kBN + kPad];
};

// Copies the 16 bytes at src to shared-memory address dst asynchronously; with in_bounds false,
// writes 16 zero bytes and reads nothing (src-size 0), so src may then point anywhere.
__device__ __forceinline__ void copy16_async(unsigned dst, const float* src, bool in_bounds) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(in_bounds ? 16 : 0) : "memory");
}

__device__ __forceinline__ void commit_async() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most `pending` committed groups of this thread's copies are still in flight.
template <int pending>
__device__ __forceinline__ void wait_async() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(pending) : "memory");
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreadsX * kThreadsY)
sgemm(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int K, int N) {
    __shared__ __align__(16) Stage stage[kStages];
    static_assert(kBM * kBK == 4 * kThreadsX * kThreadsY, "one 16-byte chunk of the A tile per thread");
    static_assert(kBK * kBN == 4 * kThreadsX * kThreadsY, "one 16-byte chunk of the B tile per thread");

    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int tid = ty * kThreadsX + tx;
    const int r0 = blockIdx.y * kBM;
    const int c0 = blockIdx.x * kBN;
    // The chunk each thread copies: A tile row a_row, columns a_col..+3; B tile likewise.
    const int a_row = tid / (kBK / 4);
    const int a_col = tid % (kBK / 4) * 4;
    const int b_row = tid / (kBN / 4);
    const int b_col = tid % (kBN / 4) * 4;
    const bool a_row_in = r0 + a_row < M;
    const bool b_col_in = c0 + b_col < N;
    const float* a_src = A + (r0 + a_row) * K + a_col;  // the chunks the next issue copies
    const float* b_src = B + b_row * N + c0 + b_col;
    const unsigned a_dst = static_cast<unsigned>(__cvta_generic_to_shared(&stage[0].a[a_row][a_col]));
    const unsigned b_dst = static_cast<unsigned>(__cvta_generic_to_shared(&stage[0].b[b_row][b_col]));
    int k_next = 0;  // the k-tile the next issue copies starts at column / row k_next of A / B

    // Issues the copies of the next k-tile into stage s (k_next < K) and moves on to the tile after.
    auto issue_next = [&](int s) {
        const unsigned offset = s * sizeof(Stage);
        copy16_async(a_dst + offset, a_src, a_row_in && k_next + a_col < K);
        copy16_async(b_dst + offset, b_src, b_col_in && k_next + b_row < K);
        a_src += kBK;
        b_src += kBK * N;
        k_next += kBK;
    };

    // Prologue: the first kStages - 1 tiles in flight, one commit group each (empty past the end).
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (k_next < K) issue_next(s);
        commit_async();
    }

    float acc[kTM][kTN] = {};
    int read = 0;             // the stage holding the tile at k0
    int write = kStages - 1;  // the stage for the tile kStages - 1 ahead, freed by the previous one
    for (int k0 = 0; k0 < K; k0 += kBK) {
        wait_async<kStages - 2>();  // this tile has landed (for this thread's copies) ...
        __syncthreads();            // ... and for everyone's; all are done reading the previous one
        if (k_next < K) issue_next(write);
        commit_async();             // always, so that the wait above counts one group per tile

        const Stage& tile = stage[read];
#pragma unroll
        for (int kk = 0; kk < kBK; ++kk) {
            float a[kTM];
            float b[kTN];
#pragma unroll
            for (int i = 0; i < kTM; ++i) a[i] = tile.a[ty + kThreadsY * i][kk];
#pragma unroll
            for (int j = 0; j < kTN; ++j) b[j] = tile.b[kk][tx + kThreadsX * j];
#pragma unroll
            for (int i = 0; i < kTM; ++i) {
#pragma unroll
                for (int j = 0; j < kTN; ++j) acc[i][j] += a[i] * b[j];
            }
        }
        read = read == kStages - 1 ? 0 : read + 1;
        write = write == kStages - 1 ? 0 : write + 1;
    }

#pragma unroll
    for (int i = 0; i < kTM; ++i) {
        const int r = r0 + ty + kThreadsY * i;
#pragma unroll
        for (int j = 0; j < kTN; ++j) {
            const int c = c0 + tx + kThreadsX * j;
            if (r < M && c < N) C[r * N + c] = acc[i][j];
        }
    }
}
