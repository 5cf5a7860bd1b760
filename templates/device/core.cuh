// ---- Tessera device header, section core (in every module) ----------------------------------
// The sections are written against the CUDA primitives only (threadIdx, __syncthreads,
// __shfl_*_sync, atomicCAS, ...) so that the CPU backend, which emulates those primitives, runs
// them as they are. A module includes the sections it uses (transpile/emit/header_parts.py).
#if !defined(TESSERA_HOST)
// A .tsr local that is assigned but never read is not worth a C warning (177, 550).
#pragma nv_diag_suppress 177
#pragma nv_diag_suppress 550
// `u >= 0` on an unsigned value is a valid .tsr test (a generic bound check), not a mistake.
#pragma nv_diag_suppress 186
#if !defined(__CUDACC_RTC__)
#include <cstdio>  // printf under nvcc (NVRTC has it built in)
#endif
#define TSR_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

// Float to integer conversion that saturates and maps NaN to 0, as the GPU's cvt.rzi does,
// so that the CPU backend gives the same results.
template <class I> struct tsr_int_limits;
#define TSR_INT_LIMITS(I, LO, HI) \
    template <> struct tsr_int_limits<I> { static constexpr I lo = LO, hi = HI; };
TSR_INT_LIMITS(signed char, -128, 127)
TSR_INT_LIMITS(short, -32768, 32767)
TSR_INT_LIMITS(int, -2147483647 - 1, 2147483647)
TSR_INT_LIMITS(long long, -9223372036854775807ll - 1, 9223372036854775807ll)
TSR_INT_LIMITS(unsigned char, 0, 255)
TSR_INT_LIMITS(unsigned short, 0, 65535)
TSR_INT_LIMITS(unsigned int, 0u, 4294967295u)
TSR_INT_LIMITS(unsigned long long, 0ull, 18446744073709551615ull)
template <class I, class F>
__device__ __forceinline__ I tsr_f2i(F x) {
    const double d = (double)x;
    if (d != d) return (I)0;
    if (d <= (double)tsr_int_limits<I>::lo) return tsr_int_limits<I>::lo;
    if (d >= (double)tsr_int_limits<I>::hi) return tsr_int_limits<I>::hi;
    return (I)x;
}

// Integer division and remainder by a divisor that is not a known nonzero constant: on the GPU a
// division by zero gives an unspecified value; the CPU backend must not trap, so it gives -1 (and
// wraps INT_MIN / -1) there.
template <class T>
__device__ __forceinline__ T tsr_div(T a, T b) {
#if defined(TESSERA_HOST)
    if (b == 0) return (T)~(T)0;
    if ((T)-1 < (T)0 && b == (T)-1) return (T)(0 - a);
#endif
    return a / b;
}
template <class T>
__device__ __forceinline__ T tsr_mod(T a, T b) {
#if defined(TESSERA_HOST)
    if (b == 0) return a;
    if ((T)-1 < (T)0 && b == (T)-1) return (T)0;
#endif
    return a % b;
}

__device__ __forceinline__ int tsr_group_linear_id() {
    return (int)(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
}
__device__ __forceinline__ int tsr_grid_groups() { return (int)(gridDim.x * gridDim.y * gridDim.z); }

template <int N, class T>
__device__ __forceinline__ void tsr_fill(T* first, T value) {
#pragma unroll
    for (int i = 0; i < N; ++i) first[i] = value;
}

// The word that moves BYTES bytes in one access (copies, map kernels' vector accesses).
template <int BYTES> struct tsr_chunk;
template <> struct tsr_chunk<16> { typedef uint4 type; };
template <> struct tsr_chunk<8> { typedef uint2 type; };
template <> struct tsr_chunk<4> { typedef unsigned int type; };
template <> struct tsr_chunk<2> { typedef unsigned short type; };
template <> struct tsr_chunk<1> { typedef unsigned char type; };
