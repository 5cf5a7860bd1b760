// ---- per-tile vector access: a tile's own N elements of a 1-D view (r[:] = X[i, j:j + 8]) -----
// `v` is the tile's staging array (alignas(16), of the element's storage type), `p` points at the
// view's origin and `stride` is the distance between its elements (1: a row). `ok` is 0 where an
// indexed dimension of the view is out of range (the whole view is outside), `hi` counts the
// elements from the origin to the tensor's far edge and `lo` those before its near edge (0 where
// the compiler proved the start non-negative). Elements outside read as zero and are not written.
// Each access moves VB bytes (VB / sizeof(T) elements, stride 1); with CHECK, the alignment the
// compiler could not prove is tested at run time, falling back to single elements. SHARED (in
// check_bounds builds) routes a shared view's elements through the race detector, with the .tsr
// line of the statement.
template <int N>
__device__ __forceinline__ unsigned tsr_vec_count(int n) { return n <= 0 ? 0u : n >= N ? (unsigned)N : (unsigned)n; }

template <class T, int N, int VB, bool SHARED>
__device__ __forceinline__ void tsr_vec_load_chunks(T (&v)[N], const T* p, unsigned stride, unsigned b, unsigned m,
                                                    int line) {
    typedef typename tsr_chunk<VB>::type C;
    constexpr int E = VB / (int)sizeof(T);
#pragma unroll
    for (int k = 0; k < N; k += E) {
        const T* s = p + (unsigned)k * stride;
        const bool in = (unsigned)k - b < m;
        if (SHARED && in)
            for (int e = 0; e < E; ++e) tsr_race_read(s + e, line);
        C c = C();
        if (in) c = *reinterpret_cast<const C*>(s);
        *reinterpret_cast<C*>(&v[k]) = c;
    }
}

template <class T, int N, int VB, bool SHARED>
__device__ __forceinline__ void tsr_vec_store_chunks(T* p, const T (&v)[N], unsigned stride, unsigned b, unsigned m,
                                                     int line) {
    typedef typename tsr_chunk<VB>::type C;
    constexpr int E = VB / (int)sizeof(T);
#pragma unroll
    for (int k = 0; k < N; k += E) {
        T* d = p + (unsigned)k * stride;
        if ((unsigned)k - b >= m) continue;
        if (SHARED)
            for (int e = 0; e < E; ++e) tsr_race_write(d + e, line);
        *reinterpret_cast<C*>(d) = *reinterpret_cast<const C*>(&v[k]);
    }
}

// Whether accesses of E elements are whole: `p` VB-aligned and both edges multiples of E (then
// each access is wholly inside the tensor or wholly outside).
template <int VB, int E>
__device__ __forceinline__ bool tsr_vec_aligned(const void* p, unsigned b, unsigned n) {
    return (reinterpret_cast<size_t>(p) % VB) == 0 && ((b | n) % E) == 0;
}

template <class T, int N, int VB, bool CHECK, bool SHARED = false>
__device__ __forceinline__ void tsr_vec_load(T (&v)[N], const T* p, unsigned stride, int ok, int hi, int lo,
                                             int line = 0) {
    constexpr int E = VB / (int)sizeof(T);
    const unsigned b = tsr_vec_count<N>(lo), n = ok ? tsr_vec_count<N>(hi) : 0u, m = n > b ? n - b : 0u;
    if constexpr (CHECK && E > 1) {
        if (!tsr_vec_aligned<VB, E>(p, b, n)) {
            tsr_vec_load_chunks<T, N, (int)sizeof(T), SHARED>(v, p, stride, b, m, line);
            return;
        }
    }
    tsr_vec_load_chunks<T, N, VB, SHARED>(v, p, stride, b, m, line);
}

template <class T, int N, int VB, bool CHECK, bool SHARED = false>
__device__ __forceinline__ void tsr_vec_store(T* p, const T (&v)[N], unsigned stride, int ok, int hi, int lo,
                                              int line = 0) {
    constexpr int E = VB / (int)sizeof(T);
    const unsigned b = tsr_vec_count<N>(lo), n = ok ? tsr_vec_count<N>(hi) : 0u, m = n > b ? n - b : 0u;
    if constexpr (CHECK && E > 1) {
        if (!tsr_vec_aligned<VB, E>(p, b, n)) {
            tsr_vec_store_chunks<T, N, (int)sizeof(T), SHARED>(p, v, stride, b, m, line);
            return;
        }
    }
    tsr_vec_store_chunks<T, N, VB, SHARED>(p, v, stride, b, m, line);
}
