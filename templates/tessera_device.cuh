// ---- Tessera device header (static; the same text for every program) ---------------------
// Written against the CUDA primitives only (threadIdx, __syncthreads, __shfl_*_sync,
// atomicCAS, ...) so that the CPU backend, which emulates those primitives, runs it as is.
#if !defined(TESSERA_HOST)
// A .tsr local that is assigned but never read is not worth a C warning (177, 550).
#pragma nv_diag_suppress 177
#pragma nv_diag_suppress 550
// `u >= 0` on an unsigned value is a valid .tsr test (a generic bound check), not a mistake.
#pragma nv_diag_suppress 186
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#if !defined(__CUDACC_RTC__)
#include <cstdio>  // printf under nvcc (NVRTC has it built in)
#endif
#define TSR_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
// check_bounds builds route shared-memory accesses through these; the CPU backend's
// versions detect data races, on the GPU they are the plain access.
template <class T> __device__ __forceinline__ T* tsr_race_read(T* p, int) { return p; }
template <class T> __device__ __forceinline__ T* tsr_race_write(T* p, int) { return p; }
#endif

// f16/bf16 values are computed in float and rounded back after every operation.
__device__ __forceinline__ float tsr_round_f16(float x) { return __half2float(__float2half_rn(x)); }
__device__ __forceinline__ float tsr_round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

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

// ---- warp reductions (all 32 lanes participate; the result is in every lane) -------------
template <class T>
__device__ __forceinline__ T tsr_warp_sum(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <class T>
__device__ __forceinline__ T tsr_warp_max(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) { T w = __shfl_xor_sync(0xffffffffu, v, o); v = w > v ? w : v; }
    return v;
}
template <class T>
__device__ __forceinline__ T tsr_warp_min(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) { T w = __shfl_xor_sync(0xffffffffu, v, o); v = w < v ? w : v; }
    return v;
}

// ---- group reductions ----------------------------------------------------------------------
// Every tile gets the same result: each combines the per-warp partials in the same order.
// The leading barrier protects the scratch buffer from a previous reduction's readers.
struct tsr_op_sum { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; } };
struct tsr_op_max { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return b > a ? b : a; } };
struct tsr_op_min { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return b < a ? b : a; } };

template <int NT, class T, class Op>
__device__ __forceinline__ T tsr_group_reduce(T v, unsigned char* scratch_bytes, Op op) {
    T* scratch = reinterpret_cast<T*>(scratch_bytes);
    const int tid = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
    if (NT % 32 == 0) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
        __syncthreads();
        if ((tid & 31) == 0) scratch[tid >> 5] = v;
        __syncthreads();
        T r = scratch[0];
        for (int w = 1; w < NT / 32; ++w) r = op(r, scratch[w]);
        return r;
    }
    __syncthreads();
    scratch[tid] = v;
    __syncthreads();
    T r = scratch[0];
    for (int i = 1; i < NT; ++i) r = op(r, scratch[i]);
    return r;
}
template <int NT, class T>
__device__ __forceinline__ T tsr_group_sum(T v, unsigned char* s) { return tsr_group_reduce<NT>(v, s, tsr_op_sum()); }
template <int NT, class T>
__device__ __forceinline__ T tsr_group_max(T v, unsigned char* s) { return tsr_group_reduce<NT>(v, s, tsr_op_max()); }
template <int NT, class T>
__device__ __forceinline__ T tsr_group_min(T v, unsigned char* s) { return tsr_group_reduce<NT>(v, s, tsr_op_min()); }

// ---- atomics CUDA does not provide (compare-and-swap loops) -----------------------------------
#define TSR_ATOMIC_CAS_OPS(SUFFIX)                                                                  \
__device__ __forceinline__ float tsr_atomic_max##SUFFIX(float* p, float v) {                  \
    int old = *reinterpret_cast<volatile int*>(p), assumed;                                           \
    do { assumed = old; if (!(__int_as_float(assumed) < v)) break;                                    \
         old = atomicCAS##SUFFIX(reinterpret_cast<int*>(p), assumed, __float_as_int(v)); } while (old != assumed); \
    return __int_as_float(old);                                                                       \
}                                                                                                     \
__device__ __forceinline__ float tsr_atomic_min##SUFFIX(float* p, float v) {                  \
    int old = *reinterpret_cast<volatile int*>(p), assumed;                                           \
    do { assumed = old; if (!(__int_as_float(assumed) > v)) break;                                    \
         old = atomicCAS##SUFFIX(reinterpret_cast<int*>(p), assumed, __float_as_int(v)); } while (old != assumed); \
    return __int_as_float(old);                                                                       \
}                                                                                                     \
__device__ __forceinline__ double tsr_atomic_max##SUFFIX(double* p, double v) {               \
    unsigned long long* q = reinterpret_cast<unsigned long long*>(p);                                 \
    unsigned long long old = *reinterpret_cast<volatile unsigned long long*>(q), assumed;             \
    do { assumed = old; if (!(__longlong_as_double((long long)assumed) < v)) break;                   \
         old = atomicCAS##SUFFIX(q, assumed, (unsigned long long)__double_as_longlong(v)); } while (old != assumed); \
    return __longlong_as_double((long long)old);                                                      \
}                                                                                                     \
__device__ __forceinline__ double tsr_atomic_min##SUFFIX(double* p, double v) {               \
    unsigned long long* q = reinterpret_cast<unsigned long long*>(p);                                 \
    unsigned long long old = *reinterpret_cast<volatile unsigned long long*>(q), assumed;             \
    do { assumed = old; if (!(__longlong_as_double((long long)assumed) > v)) break;                   \
         old = atomicCAS##SUFFIX(q, assumed, (unsigned long long)__double_as_longlong(v)); } while (old != assumed); \
    return __longlong_as_double((long long)old);                                                      \
}                                                                                                     \
__device__ __forceinline__ float tsr_atomic_cas##SUFFIX(float* p, float cmp, float v) {        \
    return __int_as_float(atomicCAS##SUFFIX(reinterpret_cast<int*>(p), __float_as_int(cmp), __float_as_int(v))); \
}                                                                                                     \
__device__ __forceinline__ double tsr_atomic_cas##SUFFIX(double* p, double cmp, double v) {    \
    return __longlong_as_double((long long)atomicCAS##SUFFIX(reinterpret_cast<unsigned long long*>(p), \
        (unsigned long long)__double_as_longlong(cmp), (unsigned long long)__double_as_longlong(v))); \
}                                                                                                     \
/* 16-bit floats: a CAS loop on the aligned 32-bit word that holds the element. */                   \
template <class H, class F>                                                                           \
__device__ __forceinline__ float tsr_atomic_rmw16##SUFFIX(H* p, F f) {                        \
    unsigned int* word = reinterpret_cast<unsigned int*>(reinterpret_cast<size_t>(p) & ~(size_t)3);  \
    const unsigned int shift = (reinterpret_cast<size_t>(p) & 2) ? 16u : 0u;                          \
    unsigned int old = *reinterpret_cast<volatile unsigned int*>(word), assumed;                      \
    do {                                                                                              \
        assumed = old;                                                                                \
        unsigned short bits = (unsigned short)(assumed >> shift);                                     \
        unsigned short nbits = f(bits);                                                               \
        unsigned int repl = (assumed & ~(0xffffu << shift)) | ((unsigned int)nbits << shift);         \
        old = atomicCAS##SUFFIX(word, assumed, repl);                                                 \
    } while (old != assumed);                                                                         \
    return (float)(unsigned short)(old >> shift);                                                     \
}

TSR_ATOMIC_CAS_OPS(_block)
TSR_ATOMIC_CAS_OPS()
TSR_ATOMIC_CAS_OPS(_system)

__device__ __forceinline__ unsigned short tsr_f16_bits(float x) { __half h = __float2half_rn(x); return *reinterpret_cast<unsigned short*>(&h); }
__device__ __forceinline__ float tsr_f16_value(unsigned short b) { return __half2float(*reinterpret_cast<__half*>(&b)); }
__device__ __forceinline__ unsigned short tsr_bf16_bits(float x) { __nv_bfloat16 h = __float2bfloat16_rn(x); return *reinterpret_cast<unsigned short*>(&h); }
__device__ __forceinline__ float tsr_bf16_value(unsigned short b) { return __bfloat162float(*reinterpret_cast<__nv_bfloat16*>(&b)); }

#define TSR_ATOMIC_HALF_OPS(SUFFIX, T, BITS, VALUE)                                                  \
struct tsr_add16_##T##SUFFIX { float v; __device__ unsigned short operator()(unsigned short b) const { return BITS(VALUE(b) + v); } }; \
struct tsr_exch16_##T##SUFFIX { unsigned short n; __device__ unsigned short operator()(unsigned short) const { return n; } }; \
__device__ __forceinline__ float tsr_atomic_add##SUFFIX##_##T(void* p, float v) {             \
    return VALUE((unsigned short)tsr_atomic_rmw16##SUFFIX((unsigned short*)p, tsr_add16_##T##SUFFIX{v})); \
}                                                                                                     \
__device__ __forceinline__ float tsr_atomic_sub##SUFFIX##_##T(void* p, float v) {             \
    return VALUE((unsigned short)tsr_atomic_rmw16##SUFFIX((unsigned short*)p, tsr_add16_##T##SUFFIX{-v})); \
}                                                                                                     \
__device__ __forceinline__ float tsr_atomic_exch##SUFFIX##_##T(void* p, float v) {            \
    return VALUE((unsigned short)tsr_atomic_rmw16##SUFFIX((unsigned short*)p, tsr_exch16_##T##SUFFIX{BITS(v)})); \
}

TSR_ATOMIC_HALF_OPS(_block, f16, tsr_f16_bits, tsr_f16_value)
TSR_ATOMIC_HALF_OPS(, f16, tsr_f16_bits, tsr_f16_value)
TSR_ATOMIC_HALF_OPS(_system, f16, tsr_f16_bits, tsr_f16_value)
TSR_ATOMIC_HALF_OPS(_block, bf16, tsr_bf16_bits, tsr_bf16_value)
TSR_ATOMIC_HALF_OPS(, bf16, tsr_bf16_bits, tsr_bf16_value)
TSR_ATOMIC_HALF_OPS(_system, bf16, tsr_bf16_bits, tsr_bf16_value)

// ---- bounds checks (compiled in only with check_bounds on) -----------------------------------
__device__ __noinline__ void tsr_index_fail(const char* kernel, const char* array, int dim, long long i,
                                            long long n, int line) {
#if defined(TESSERA_HOST)
    char message[160];
    snprintf(message, sizeof message, "index %lld out of range for dimension %d of '%s' (size %lld)", i, dim, array, n);
    tsr_host_fail(kernel, line, message);
#else
    printf("line %d: index %lld out of range for dimension %d of '%s' (size %lld) in kernel %s\n", line, i, dim, array,
           n, kernel);
    __trap();
#endif
}
__device__ __forceinline__ int tsr_check_index(long long i, long long n, const char* kernel, const char* array,
                                               int dim, int line) {
    if (i < 0 || i >= n) tsr_index_fail(kernel, array, dim, i, n, line);
    return (int)i;
}

// ---- signed overflow checks (compiled in only with check_bounds on) ----------------------------
// i32 and i64 arithmetic follows C: overflow is undefined (docs/language.md), so check_bounds
// builds compute + - * and unary - through these, which report it with the .tsr line.
__device__ __noinline__ void tsr_overflow_fail(const char* kernel, const char* op, int line) {
#if defined(TESSERA_HOST)
    char message[96];
    snprintf(message, sizeof message, "signed integer overflow in '%s'", op);
    tsr_host_fail(kernel, line, message);
#else
    printf("line %d: signed integer overflow in '%s' in kernel %s\n", line, op, kernel);
    __trap();
#endif
}
#define TSR_CHECKED_ADD_SUB(T, U)                                                                     \
__device__ __forceinline__ T tsr_checked_add(T a, T b, const char* kernel, int line) {                \
    const T r = (T)((U)a + (U)b);                                                                     \
    if (((a ^ r) & (b ^ r)) < 0) tsr_overflow_fail(kernel, "+", line);                               \
    return r;                                                                                         \
}                                                                                                     \
__device__ __forceinline__ T tsr_checked_sub(T a, T b, const char* kernel, int line) {                \
    const T r = (T)((U)a - (U)b);                                                                     \
    if (((a ^ b) & (a ^ r)) < 0) tsr_overflow_fail(kernel, "-", line);                               \
    return r;                                                                                         \
}                                                                                                     \
__device__ __forceinline__ T tsr_checked_neg(T a, const char* kernel, int line) {                     \
    if (a == (T)((U)1 << (sizeof(T) * 8 - 1))) tsr_overflow_fail(kernel, "-", line);                 \
    return (T)(0 - (U)a);                                                                             \
}
TSR_CHECKED_ADD_SUB(int, unsigned int)
TSR_CHECKED_ADD_SUB(long long, unsigned long long)
__device__ __forceinline__ int tsr_checked_mul(int a, int b, const char* kernel, int line) {
    const long long r = (long long)a * (long long)b;
    if (r != (long long)(int)r) tsr_overflow_fail(kernel, "*", line);
    return (int)r;
}
__device__ __forceinline__ long long tsr_checked_mul(long long a, long long b, const char* kernel, int line) {
    const long long r = (long long)((unsigned long long)a * (unsigned long long)b);
#if defined(TESSERA_HOST)
    long long check;
    if (__builtin_mul_overflow(a, b, &check)) tsr_overflow_fail(kernel, "*", line);
#else
    if (__mul64hi(a, b) != (r >> 63)) tsr_overflow_fail(kernel, "*", line);
#endif
    return r;
}

// ---- tassert (compiled in only with debug on) ------------------------------------------------
__device__ __noinline__ void tsr_assert_fail(const char* kernel, const char* file, int line, const char* message) {
#if defined(TESSERA_HOST)
    tsr_host_fail(kernel, line, message);
    (void)file;
#else
    printf("%s:%d: tassert failed in kernel %s: %s\n", file, line, kernel, message);
    __trap();
#endif
}
// ---- end of the Tessera device header ---------------------------------------------------------
