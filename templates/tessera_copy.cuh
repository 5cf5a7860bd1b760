// ---- Tessera copy header: tcopy and tcopy_async (included by modules that copy views) ------
// ---- tcopy: the whole group copies a D0 x D1 x D2 view ---------------------------------------
// `dst`/`src` point at the view's origin; s0/s1 are the strides of the two outer dimensions
// (the innermost is contiguous); l0..l2 are how many elements of each dimension exist from the
// origin (a tensor's edge). Source elements outside read as zero; destination elements outside
// are not written. Each tile moves chunks of up to 16 bytes when both sides are aligned and the
// chunk is wholly inside, else single elements.
template <int BYTES> struct tsr_chunk;
template <> struct tsr_chunk<16> { typedef uint4 type; };
template <> struct tsr_chunk<8> { typedef uint2 type; };
template <> struct tsr_chunk<4> { typedef unsigned int type; };
template <> struct tsr_chunk<2> { typedef unsigned short type; };
template <> struct tsr_chunk<1> { typedef unsigned char type; };

template <class T, int D2>
struct tsr_copy_width {
    static constexpr int row = D2 * (int)sizeof(T);
    static constexpr int bytes = (row % 16 == 0) ? 16 : (row % 8 == 0) ? 8 : (row % 4 == 0 && sizeof(T) <= 4) ? 4 : (int)sizeof(T);
    static constexpr int elems = bytes / (int)sizeof(T);
};

// DST_SHARED/SRC_SHARED (check_bounds builds only) route the shared side's elements through the
// race detector, with the .tsr line of the tcopy.
template <class T, int D0, int D1, int D2, int NT, bool DST_SHARED = false, bool SRC_SHARED = false>
__device__ __forceinline__ void tsr_copy(T* dst, long long ds0, long long ds1, int dl0, int dl1, int dl2,
                                                const T* src, long long ss0, long long ss1, int sl0, int sl1, int sl2,
                                                int tid, int line = 0) {
    typedef tsr_copy_width<T, D2> W;
    typedef typename tsr_chunk<W::bytes>::type C;
    typedef typename tsr_chunk<sizeof(T)>::type E;
    constexpr int chunks_per_row = D2 / W::elems;
    constexpr int total = D0 * D1 * chunks_per_row;
    for (int c = tid; c < total; c += NT) {
        const int k = (c % chunks_per_row) * W::elems;
        const int j = (c / chunks_per_row) % D1;
        const int i = c / (chunks_per_row * D1);
        T* d = dst + i * ds0 + j * ds1 + k;
        const T* s = src + i * ss0 + j * ss1 + k;
        const bool src_row = i < sl0 && j < sl1;
        const bool dst_row = i < dl0 && j < dl1;
        if (!dst_row) continue;
        for (int e = 0; (DST_SHARED || SRC_SHARED) && e < W::elems && k + e < dl2; ++e) {
            if (DST_SHARED) tsr_race_write(d + e, line);
            if (SRC_SHARED && src_row && k + e < sl2) tsr_race_read(s + e, line);
        }
        if (src_row && k + W::elems <= sl2 && k + W::elems <= dl2 &&
            ((reinterpret_cast<size_t>(d) | reinterpret_cast<size_t>(s)) % W::bytes) == 0) {
            *reinterpret_cast<C*>(d) = *reinterpret_cast<const C*>(s);
            continue;
        }
#pragma unroll
        for (int e = 0; e < W::elems; ++e) {
            if (k + e >= dl2) break;
            E bits = (E)0;
            if (src_row && k + e < sl2) bits = reinterpret_cast<const E*>(s)[e];
            reinterpret_cast<E*>(d)[e] = bits;
        }
    }
}

