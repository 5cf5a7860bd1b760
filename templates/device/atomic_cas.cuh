// ---- f32/f64 atomic max, min and cas, which CUDA does not provide (compare-and-swap loops) ----
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
}

TSR_ATOMIC_CAS_OPS(_block)
TSR_ATOMIC_CAS_OPS()
TSR_ATOMIC_CAS_OPS(_system)
