// ---- f16/bf16 atomics: a CAS loop on the aligned 32-bit word that holds the element ----------
#define TSR_ATOMIC_RMW16(SUFFIX)                                                                      \
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

TSR_ATOMIC_RMW16(_block)
TSR_ATOMIC_RMW16()
TSR_ATOMIC_RMW16(_system)

// add, sub and exch of one 16-bit type at one scope (instantiated by atomic_f16.cuh, atomic_bf16.cuh)
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
