// ---- tcopy and tcopy_async: the whole group copies a D0 x D1 x D2 view -----------------------
// `dst`/`src` point at the views' origins; ds0..ds2 and ss0..ss2 are the element strides of its
// three dimensions (the innermost is 1 unless the view is a column); dl0..dl2 and sl0..sl2 count the
// elements of each dimension from the origin to the tensor's far edge (negative counts as none), and
// dlo0..dlo2 and slo0..slo2 those before its near edge (a view that starts below index 0, such as
// a stencil's halo; 0 where the compiler proved the start non-negative). Source elements outside
// read as zero; destination elements outside are not written.
//
// Each tile moves chunks of VB bytes (VB / sizeof(T) elements) in a fixed pattern with unsigned
// 32-bit index math and a constant trip count, so the loop unrolls into straight-line code. The
// compiler picks VB from what it knows: the row width, shared-memory strides, the alignment its
// kernel variant assumes and what it proves about the views' origins. With CHECK, what it could
// not prove is tested once per copy, falling back to single elements in a loop that is not
// unrolled (ROLLED): the fallback is the rare path, and unrolled beside the fast one it would keep
// every element of the view in flight in registers (the generic variant of a bf16 GEMM needed 244
// registers for it, the aligned one 98).

// Calls f(row, k) for the calling tile's chunks: row in [0, ROWS) (i = row / D1, j = row % D1),
// k the chunk within the row; unrolled unless ROLLED.
template <unsigned ROWS, unsigned CPR, unsigned NT, bool ROLLED = false, class F>
__device__ __forceinline__ void tsr_for_chunks(unsigned tid, F f) {
    if constexpr (ROLLED) {
#pragma unroll 1
        for (unsigned c = tid; c < ROWS * CPR; c += NT) f(c / CPR, c % CPR);
    } else if constexpr (NT % CPR == 0) {  // each tile keeps one column of chunks: k is fixed
        constexpr unsigned step = NT / CPR, passes = (ROWS + step - 1) / step;
        const unsigned k = tid % CPR, r = tid / CPR;
#pragma unroll
        for (unsigned p = 0; p < passes; ++p) {
            if (ROWS % step == 0 || r + p * step < ROWS) f(r + p * step, k);
        }
    } else {
        constexpr unsigned total = ROWS * CPR, passes = (total + NT - 1) / NT;
#pragma unroll
        for (unsigned p = 0; p < passes; ++p) {
            const unsigned c = tid + p * NT;
            if (total % NT == 0 || c < total) f(c / CPR, c % CPR);
        }
    }
}

// A count of elements from a view's origin, as an unsigned in [0, D].
template <int D>
__device__ __forceinline__ unsigned tsr_extent(int n) { return n <= 0 ? 0u : n >= D ? (unsigned)D : (unsigned)n; }

// The part of a D0 x D1 x D2 view inside its tensor: per dimension the first index inside (lo)
// and how many are inside from there (n). `has` tests an element with one unsigned compare per
// dimension (an index below lo wraps around); with lo a constant 0 the subtraction folds away.
struct tsr_box {
    unsigned lo0, lo1, lo2, n0, n1, n2;
    __device__ __forceinline__ bool has(unsigned i, unsigned j, unsigned k) const {
        return i - lo0 < n0 && j - lo1 < n1 && k - lo2 < n2;
    }
};
template <int D0, int D1, int D2>
__device__ __forceinline__ tsr_box tsr_box_of(int l0, int l1, int l2, int lo0, int lo1, int lo2) {
    const unsigned h0 = tsr_extent<D0>(l0), h1 = tsr_extent<D1>(l1), h2 = tsr_extent<D2>(l2);
    const unsigned b0 = tsr_extent<D0>(lo0), b1 = tsr_extent<D1>(lo1), b2 = tsr_extent<D2>(lo2);
    return tsr_box{b0, b1, b2, h0 > b0 ? h0 - b0 : 0u, h1 > b1 ? h1 - b1 : 0u, h2 > b2 ? h2 - b2 : 0u};
}

// Where element (i, j, k) of the destination view is, from its origin: by the strides (tsr_linear),
// or, for a shared array that wgmma reads (tsr_swizzled, lir/swizzle.py), i by its stride and
// (j, k) in a ROWS-row matrix stored in MODE-byte swizzle atoms (panels of MODE bytes of columns,
// the 16-byte chunks of each row XORed with its line's number).
struct tsr_linear {
    __device__ __forceinline__ static unsigned at(unsigned i, unsigned j, unsigned k, unsigned d0, unsigned d1,
                                                  unsigned d2) {
        return i * d0 + j * d1 + k * d2;
    }
};
template <int MODE, unsigned ROWS, unsigned E>
struct tsr_swizzled {
    __device__ __forceinline__ static unsigned at(unsigned i, unsigned j, unsigned k, unsigned d0, unsigned,
                                                  unsigned) {
        constexpr unsigned cols = MODE / E;
        unsigned o = j * MODE + (k % cols) * E;
        o ^= ((o >> 7) & (MODE / 16 - 1)) << 4;
        return i * d0 + ((k / cols) * (ROWS * MODE) + o) / E;
    }
};

// Whether chunks of E elements can be moved whole: both origins VB-aligned, every stride and the
// innermost bounds multiples of E (then a chunk is either wholly inside the tensor or outside).
template <int VB, int E>
__device__ __forceinline__ bool tsr_chunks_aligned(const void* dst, const void* src, unsigned strides,
                                                   const tsr_box& d, const tsr_box& s) {
    return ((reinterpret_cast<size_t>(dst) | reinterpret_cast<size_t>(src)) % VB) == 0 &&
           ((strides | d.lo2 | d.n2 | s.lo2 | s.n2) % E) == 0;
}

// The synchronous copy in chunks of VB bytes. DST_SHARED/SRC_SHARED (check_bounds builds only)
// route the shared side's elements through the race detector, with the .tsr line of the copy.
template <class T, int D0, int D1, int D2, int NT, int VB, bool DST_SHARED, bool SRC_SHARED, bool ROLLED = false,
          class DO = tsr_linear>
__device__ __forceinline__ void tsr_copy_chunks(T* dst, unsigned ds0, unsigned ds1, unsigned ds2, const tsr_box& db,
                                                const T* src, unsigned ss0, unsigned ss1, unsigned ss2,
                                                const tsr_box& sb, unsigned tid, int line) {
    typedef typename tsr_chunk<VB>::type C;
    constexpr unsigned E = VB / sizeof(T);
    tsr_for_chunks<D0 * D1, D2 / E, NT, ROLLED>(tid, [&](unsigned row, unsigned k) {
        const unsigned i = row / D1, j = row % D1;
        k *= E;
        if (!db.has(i, j, k)) return;
        const bool in = sb.has(i, j, k);
        T* d = dst + DO::at(i, j, k, ds0, ds1, ds2);
        const T* s = src + (i * ss0 + j * ss1 + k * ss2);
        if (DST_SHARED || SRC_SHARED) {
            for (unsigned e = 0; e < E; ++e) {
                if (DST_SHARED) tsr_race_write(d + e, line);
                if (SRC_SHARED && in) tsr_race_read(s + e, line);
            }
        }
        C v = C();
        if (in) v = *reinterpret_cast<const C*>(s);
        *reinterpret_cast<C*>(d) = v;
    });
}

template <class T, int D0, int D1, int D2, int NT, int VB, bool CHECK, bool DST_SHARED = false, bool SRC_SHARED = false,
          class DO = tsr_linear>
__device__ __forceinline__ void tsr_copy(T* dst, unsigned ds0, unsigned ds1, unsigned ds2, int dl0, int dl1, int dl2,
                                         int dlo0, int dlo1, int dlo2, const T* src, unsigned ss0, unsigned ss1,
                                         unsigned ss2, int sl0, int sl1, int sl2, int slo0, int slo1, int slo2,
                                         unsigned tid, int line = 0) {
    constexpr int E = VB / (int)sizeof(T);
    const tsr_box db = tsr_box_of<D0, D1, D2>(dl0, dl1, dl2, dlo0, dlo1, dlo2);
    const tsr_box sb = tsr_box_of<D0, D1, D2>(sl0, sl1, sl2, slo0, slo1, slo2);
    if constexpr (CHECK && E > 1) {
        if (!tsr_chunks_aligned<VB, E>(dst, src, ds0 | ds1 | ss0 | ss1, db, sb)) {
            tsr_copy_chunks<T, D0, D1, D2, NT, sizeof(T), DST_SHARED, SRC_SHARED, true, DO>(dst, ds0, ds1, ds2, db,
                                                                                            src, ss0, ss1, ss2, sb, tid,
                                                                                            line);
            return;
        }
    }
    tsr_copy_chunks<T, D0, D1, D2, NT, VB, DST_SHARED, SRC_SHARED, false, DO>(dst, ds0, ds1, ds2, db, src, ss0, ss1,
                                                                              ss2, sb, tid, line);
}

// ---- cp.async (sm_80 and later); the CPU backend's prelude emulates the same functions -------
#if !defined(TESSERA_HOST)
typedef unsigned tsr_saddr;  // a shared-memory address
__device__ __forceinline__ tsr_saddr tsr_shared_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
// BYTES bytes to shared memory: the first src_bytes from src, the rest zero (src_bytes = 0 reads
// nothing). 16-byte copies bypass L1 (.cg); 4- and 8-byte ones cannot (.ca).
template <int BYTES>
__device__ __forceinline__ void tsr_cp_async(tsr_saddr dst, const void* src, unsigned src_bytes, int, int) {
#if __CUDA_ARCH__ >= 800
    if constexpr (BYTES == 16) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
    } else {
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(src), "n"(BYTES), "r"(src_bytes)
                     : "memory");
    }
#endif
}
__device__ __forceinline__ void tsr_cp_async_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void tsr_cp_async_wait() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}
#endif

// tcopy_async: a global view into shared memory with cp.async in chunks of VB bytes (4, 8 or 16;
// below 4 bytes, and for single elements of 1 or 2 bytes, the copy is synchronous, and in
// check_bounds builds, line > 0, its writes go through the race detector as tcopy's do). Chunks
// outside the tensor are zero-filled through the source-size operand and read nothing.
template <class T, int D0, int D1, int D2, int NT, int VB, bool ROLLED = false, class DO = tsr_linear>
__device__ __forceinline__ void tsr_copy_async_chunks(T* dst, unsigned ds0, unsigned ds1, unsigned ds2,
                                                      const tsr_box& db, const T* src, unsigned ss0, unsigned ss1,
                                                      unsigned ss2, const tsr_box& sb, unsigned tid, int line) {
    if constexpr (VB < 4) {
        if (line > 0)
            tsr_copy_chunks<T, D0, D1, D2, NT, VB, true, false, ROLLED, DO>(dst, ds0, ds1, ds2, db, src, ss0, ss1, ss2,
                                                                            sb, tid, line);
        else
            tsr_copy_chunks<T, D0, D1, D2, NT, VB, false, false, ROLLED, DO>(dst, ds0, ds1, ds2, db, src, ss0, ss1, ss2,
                                                                             sb, tid, line);
    } else {
        constexpr unsigned E = VB / sizeof(T);
        const tsr_saddr base = tsr_shared_addr(dst);
        tsr_for_chunks<D0 * D1, D2 / E, NT, ROLLED>(tid, [&](unsigned row, unsigned k) {
            const unsigned i = row / D1, j = row % D1;
            k *= E;
            if (!db.has(i, j, k)) return;
            const bool in = sb.has(i, j, k);
            tsr_cp_async<VB>(base + DO::at(i, j, k, ds0, ds1, ds2) * (unsigned)sizeof(T),
                             src + (i * ss0 + j * ss1 + k * ss2), in ? VB : 0, (int)sizeof(T), line);
        });
    }
}

template <class T, int D0, int D1, int D2, int NT, int VB, bool CHECK, class DO = tsr_linear>
__device__ __forceinline__ void tsr_copy_async(T* dst, unsigned ds0, unsigned ds1, unsigned ds2, int dl0, int dl1,
                                               int dl2, int dlo0, int dlo1, int dlo2, const T* src, unsigned ss0,
                                               unsigned ss1, unsigned ss2, int sl0, int sl1, int sl2, int slo0,
                                               int slo1, int slo2, unsigned tid, int line = 0) {
    constexpr int E = VB / (int)sizeof(T);
    const tsr_box db = tsr_box_of<D0, D1, D2>(dl0, dl1, dl2, dlo0, dlo1, dlo2);
    const tsr_box sb = tsr_box_of<D0, D1, D2>(sl0, sl1, sl2, slo0, slo1, slo2);
    if constexpr (CHECK && E > 1) {
        if (!tsr_chunks_aligned<VB, E>(dst, src, ds0 | ds1 | ss0 | ss1, db, sb)) {
            tsr_copy_async_chunks<T, D0, D1, D2, NT, sizeof(T), true, DO>(dst, ds0, ds1, ds2, db, src, ss0, ss1, ss2,
                                                                          sb, tid, line);
            return;
        }
    }
    tsr_copy_async_chunks<T, D0, D1, D2, NT, VB, false, DO>(dst, ds0, ds1, ds2, db, src, ss0, ss1, ss2, sb, tid, line);
}
