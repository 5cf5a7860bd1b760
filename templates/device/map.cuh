// ---- map kernels (vectorize): a tile's W consecutive elements in whole words -----------------
// `lanes` is the tile's register array of the W elements (declared alignas(16)); `p` points at the
// first of them and is aligned to the word in the kernel variant that uses these (the launch
// checks the tensors' alignment), so that each word is one 16-, 8-, 4-, 2- or 1-byte access.
template <int W, class T>
__device__ __forceinline__ void tsr_vload(T (&lanes)[W], const T* p) {
    constexpr int bytes = (int)(W * sizeof(T)), word = bytes < 16 ? bytes : 16;
    typedef typename tsr_chunk<word>::type C;
#pragma unroll
    for (int k = 0; k < bytes / word; ++k) reinterpret_cast<C*>(lanes)[k] = reinterpret_cast<const C*>(p)[k];
}
template <int W, class T>
__device__ __forceinline__ void tsr_vstore(T* p, const T (&lanes)[W]) {
    constexpr int bytes = (int)(W * sizeof(T)), word = bytes < 16 ? bytes : 16;
    typedef typename tsr_chunk<word>::type C;
#pragma unroll
    for (int k = 0; k < bytes / word; ++k) reinterpret_cast<C*>(p)[k] = reinterpret_cast<const C*>(lanes)[k];
}
