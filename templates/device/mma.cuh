// ---- tensor-core tile operations (tfrag, tmma; spec section 12) ------------------------------
// Lane-level primitives with the PTX ISA's register layouts (g = lane / 4, t = lane % 4):
//   A (16 x k, row):  a[0] row g, a[1] row g + 8, a[2] row g (second half of k), a[3] row g + 8;
//   B (k x 8, col):   b[0] column g (first half of k), b[1] column g (second half);
//   C/D (16 x 8):     d[0], d[1] row g, columns 2t, 2t + 1; d[2], d[3] row g + 8.
// A 32-bit register holds 2 f16/bf16 (k = 2t, 2t + 1), 4 bytes (k = 4t ... 4t + 3) or one TF32
// value (k = t). On the GPU these are the instructions themselves; on the CPU backend the same
// data movement between the lanes of a warp, through __shfl_sync (each lane gathers what the
// hardware would route to it and computes its own elements), so that a wrong layout or a wrong
// ldmatrix address gives wrong results there too.
// check_bounds builds pass the operand loads the tmma's .tsr line (`line` > 0): on the CPU backend
// every operand element a lane reads is then a read of that lane's tile for the race detector
// (host_builtins.h), so a write into an operand that another tile makes before the next barrier
// (a tcopy_async into it, say) is reported with both lines. On the GPU `line` is unused.

__device__ __forceinline__ unsigned tsr_lane_of(int tid) { return (unsigned)tid & 31u; }

// An operand element read by this lane.
template <class T>
__device__ __forceinline__ T tsr_mma_elem(const T* p, int line) {
#if defined(TESSERA_HOST)
    if (line > 0) tsr_race_read(p, line);
#else
    (void)line;
#endif
    return *p;
}

#if defined(TESSERA_HOST)
// The `bytes` bytes at `p`, elements of `esize` bytes, read by this lane.
inline void tsr_mma_race(const unsigned char* p, unsigned bytes, unsigned esize, int line) {
    if (line > 0)
        for (unsigned k = 0; k < bytes; k += esize) tsr_race_read(p + k, line);
}
// The 32-bit word at byte `off` of the row whose address lane `src` supplied (elements of `esize` bytes).
inline unsigned tsr_row_word(const void* row, int src, unsigned off, int line, int esize) {
    const unsigned char* p = (const unsigned char*)__shfl_sync(0xffffffffu, (unsigned long long)row, src);
    tsr_mma_race(p + off, 4, (unsigned)esize, line);
    unsigned w;
    __builtin_memcpy(&w, p + off, 4);
    return w;
}
inline unsigned short tsr_row_half(const void* row, int src, unsigned k, int line) {
    const unsigned char* p = (const unsigned char*)__shfl_sync(0xffffffffu, (unsigned long long)row, src);
    tsr_mma_race(p + 2 * k, 2, 2, line);
    unsigned short h;
    __builtin_memcpy(&h, p + 2 * k, 2);
    return h;
}
#endif

// ldmatrix .x4 / .x2: matrix q (of 8 rows x 16 bytes) has its rows' addresses from lanes 8q ... 8q + 7;
// lane l receives the word l % 4 of row l / 4 of each matrix.
__device__ __forceinline__ void tsr_ldmatrix_x4(unsigned* r, const void* row, int tid, int line = 0,
                                                int esize = 2) {
#if defined(TESSERA_HOST)
    const unsigned lane = tsr_lane_of(tid);
    for (int q = 0; q < 4; ++q) r[q] = tsr_row_word(row, 8 * q + (int)(lane >> 2), 4 * (lane & 3), line, esize);
#else
    (void)tid;
    (void)line;
    (void)esize;
    const unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 { %0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
#endif
}
__device__ __forceinline__ void tsr_ldmatrix_x2(unsigned* r, const void* row, int tid, int line = 0,
                                                int esize = 2) {
#if defined(TESSERA_HOST)
    const unsigned lane = tsr_lane_of(tid);
    for (int q = 0; q < 2; ++q) r[q] = tsr_row_word(row, 8 * q + (int)(lane >> 2), 4 * (lane & 3), line, esize);
#else
    (void)tid;
    (void)line;
    (void)esize;
    const unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 { %0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
#endif
}
// .trans (16-bit elements): lane l receives elements l / 4 of rows 2 (l % 4) and 2 (l % 4) + 1.
__device__ __forceinline__ void tsr_ldmatrix_x4_trans(unsigned* r, const void* row, int tid, int line = 0) {
#if defined(TESSERA_HOST)
    const unsigned lane = tsr_lane_of(tid), g = lane >> 2, t = lane & 3;
    for (int q = 0; q < 4; ++q) {
        const unsigned lo = tsr_row_half(row, 8 * q + (int)(2 * t), g, line);
        const unsigned hi = tsr_row_half(row, 8 * q + (int)(2 * t + 1), g, line);
        r[q] = lo | (hi << 16);
    }
#else
    (void)tid;
    (void)line;
    const unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 { %0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
#endif
}
__device__ __forceinline__ void tsr_ldmatrix_x2_trans(unsigned* r, const void* row, int tid, int line = 0) {
#if defined(TESSERA_HOST)
    const unsigned lane = tsr_lane_of(tid), g = lane >> 2, t = lane & 3;
    for (int q = 0; q < 2; ++q) {
        const unsigned lo = tsr_row_half(row, 8 * q + (int)(2 * t), g, line);
        const unsigned hi = tsr_row_half(row, 8 * q + (int)(2 * t + 1), g, line);
        r[q] = lo | (hi << 16);
    }
#else
    (void)tid;
    (void)line;
    const unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 { %0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
#endif
}

// An f32 rounded to TF32 as the bits of an f32, what cvt.rna.tf32.f32 gives on sm_80 and later
// (FSETP.GEU |x|, +INF; @!P IADD 0x1000; LOP3 & 0xffffe000): a finite value to the nearest value
// with 10 fraction bits, ties away from zero (half an ulp added to the magnitude carries into the
// exponent where it must: a denormal up to the smallest normal, the largest values to infinity);
// infinity and NaN are not rounded but lose their low 13 bits too, so a NaN whose payload lies
// only in those bits becomes an infinity of its sign.
__device__ __forceinline__ unsigned tsr_tf32(float x) {
#if defined(TESSERA_HOST)
    unsigned u;
    __builtin_memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u += 0x1000u;
    return u & 0xffffe000u;
#else
    unsigned u;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(u) : "f"(x));
    return u;
#endif
}
// Four bytes gathered from a column of an 8-bit array (B[K, N] for i8/u8: k = 4t ... 4t + 3).
__device__ __forceinline__ unsigned tsr_pack_bytes(const unsigned char* p, unsigned stride, int line) {
    return (unsigned)tsr_mma_elem(p, line) | ((unsigned)tsr_mma_elem(p + stride, line) << 8) |
           ((unsigned)tsr_mma_elem(p + 2 * stride, line) << 16) | ((unsigned)tsr_mma_elem(p + 3 * stride, line) << 24);
}

// Per-lane operand loads where ldmatrix cannot serve (32-bit elements, 8-bit columns). `p` points
// at the operand tile's first element, `s` is the row stride in elements.
__device__ __forceinline__ void tsr_load_a_tf32(unsigned* a, const float* p, unsigned s, int tid, int line = 0) {
    const unsigned lane = tsr_lane_of(tid), g = lane >> 2, t = lane & 3;
    a[0] = tsr_tf32(tsr_mma_elem(&p[g * s + t], line));
    a[1] = tsr_tf32(tsr_mma_elem(&p[(g + 8) * s + t], line));
    a[2] = tsr_tf32(tsr_mma_elem(&p[g * s + t + 4], line));
    a[3] = tsr_tf32(tsr_mma_elem(&p[(g + 8) * s + t + 4], line));
}
__device__ __forceinline__ void tsr_load_b_tf32(unsigned* b, const float* p, unsigned s, int tid,  // B[K, N]
                                                int line = 0) {
    const unsigned lane = tsr_lane_of(tid), g = lane >> 2, t = lane & 3;
    b[0] = tsr_tf32(tsr_mma_elem(&p[t * s + g], line));
    b[1] = tsr_tf32(tsr_mma_elem(&p[(t + 4) * s + g], line));
}
__device__ __forceinline__ void tsr_load_bt_tf32(unsigned* b, const float* p, unsigned s, int tid,  // Bt[N, K]
                                                 int line = 0) {
    const unsigned lane = tsr_lane_of(tid), g = lane >> 2, t = lane & 3;
    b[0] = tsr_tf32(tsr_mma_elem(&p[g * s + t], line));
    b[1] = tsr_tf32(tsr_mma_elem(&p[g * s + t + 4], line));
}
__device__ __forceinline__ void tsr_load_b_8bit(unsigned* b, const void* p0, unsigned s, int tid,  // B[K, N]
                                                int line = 0) {
    const unsigned lane = tsr_lane_of(tid), g = lane >> 2, t = lane & 3;
    const unsigned char* p = (const unsigned char*)p0;
    b[0] = tsr_pack_bytes(p + 4 * t * s + g, s, line);
    b[1] = tsr_pack_bytes(p + (16 + 4 * t) * s + g, s, line);
}

// B for an A from an operand fragment (lir/frag_layout.py `pair_k`): the A register's k positions
// are the fragment's column pairs, so B's rows are read in that order. TF32 (k8): k positions t and
// t + 4 are rows 2t and 2t + 1; 8-bit (k32): positions 4t ... 4t + 3 are rows 2t, 2t + 1, 2t + 8,
// 2t + 9 (16 more for b[1]).
__device__ __forceinline__ void tsr_load_b_tf32_pairs(unsigned* b, const float* p, unsigned s, int tid,  // B[K, N]
                                                      int line = 0) {
    const unsigned lane = tsr_lane_of(tid), g = lane >> 2, t = lane & 3;
    b[0] = tsr_tf32(tsr_mma_elem(&p[2 * t * s + g], line));
    b[1] = tsr_tf32(tsr_mma_elem(&p[(2 * t + 1) * s + g], line));
}
__device__ __forceinline__ void tsr_load_bt_tf32_pairs(unsigned* b, const float* p, unsigned s, int tid,  // Bt[N, K]
                                                       int line = 0) {
    const unsigned lane = tsr_lane_of(tid), g = lane >> 2, t = lane & 3;
    b[0] = tsr_tf32(tsr_mma_elem(&p[g * s + 2 * t], line));
    b[1] = tsr_tf32(tsr_mma_elem(&p[g * s + 2 * t + 1], line));
}
__device__ __forceinline__ void tsr_load_b_8bit_pairs(unsigned* b, const void* p0, unsigned s, int tid,  // B[K, N]
                                                      int line = 0) {
    const unsigned lane = tsr_lane_of(tid), g = lane >> 2, t = lane & 3;
    const unsigned char* p = (const unsigned char*)p0 + 2 * t * s + g;
    for (int h = 0; h < 2; ++h) {
        const unsigned char* q = p + 16 * h * s;
        b[h] = (unsigned)tsr_mma_elem(q, line) | ((unsigned)tsr_mma_elem(q + s, line) << 8) |
               ((unsigned)tsr_mma_elem(q + 8 * s, line) << 16) | ((unsigned)tsr_mma_elem(q + 9 * s, line) << 24);
    }
}
__device__ __forceinline__ void tsr_load_bt_8bit_pairs(unsigned* b, const void* p0, unsigned s, int tid,  // Bt[N, K]
                                                       int line = 0) {
    const unsigned lane = tsr_lane_of(tid), g = lane >> 2, t = lane & 3;
    const unsigned char* p = (const unsigned char*)p0 + g * s + 2 * t;
    for (int h = 0; h < 2; ++h) {
        const unsigned char* q = p + 16 * h;
        const unsigned short lo = tsr_mma_elem((const unsigned short*)q, line);
        const unsigned short hi = tsr_mma_elem((const unsigned short*)(q + 8), line);
        b[h] = (unsigned)lo | ((unsigned)hi << 16);
    }
}

#if defined(TESSERA_HOST)
// One mma.sync on the CPU: lane (g, t) gathers the A registers of lanes 4g ... 4g + 3 (rows g and
// g + 8, all of k) and the B registers of lanes 4 (2t) + q and 4 (2t + 1) + q (columns 2t and
// 2t + 1), then computes its four elements of D. E elements per register, decoded by `dec` (B's by
// `dec_b`: the 8-bit kinds may mix signedness).
template <class Acc, int E, class Dec, class DecB = Dec>
inline void tsr_mma_host(Acc* d, const unsigned* a, const unsigned* b, int tid, Dec dec, DecB dec_b) {
    const unsigned lane = tsr_lane_of(tid), g = lane >> 2, t = lane & 3;
    const unsigned long long a01 = (unsigned long long)a[0] | ((unsigned long long)a[1] << 32);
    const unsigned long long a23 = (unsigned long long)a[2] | ((unsigned long long)a[3] << 32);
    const unsigned long long b01 = (unsigned long long)b[0] | ((unsigned long long)b[1] << 32);
    Acc acc[4] = {d[0], d[1], d[2], d[3]};
    for (int q = 0; q < 4; ++q) {
        const unsigned long long x01 = __shfl_sync(0xffffffffu, a01, (int)(4 * g) + q);
        const unsigned long long x23 = __shfl_sync(0xffffffffu, a23, (int)(4 * g) + q);
        const unsigned long long y0 = __shfl_sync(0xffffffffu, b01, (int)(4 * (2 * t)) + q);
        const unsigned long long y1 = __shfl_sync(0xffffffffu, b01, (int)(4 * (2 * t + 1)) + q);
        const unsigned ar[4] = {(unsigned)x01, (unsigned)(x01 >> 32), (unsigned)x23, (unsigned)(x23 >> 32)};
        const unsigned br[2][2] = { {(unsigned)y0, (unsigned)(y0 >> 32)}, {(unsigned)y1, (unsigned)(y1 >> 32)}};
        for (int h = 0; h < 2; ++h) {      // first and second half of this lane group's k
            for (int e = 0; e < E; ++e) {
                const auto lo = dec(ar[2 * h], e), hi = dec(ar[2 * h + 1], e);
                const auto c0 = dec_b(br[0][h], e), c1 = dec_b(br[1][h], e);
                acc[0] += lo * c0;
                acc[1] += lo * c1;
                acc[2] += hi * c0;
                acc[3] += hi * c1;
            }
        }
    }
    for (int r = 0; r < 4; ++r) d[r] = acc[r];
}
inline float tsr_dec_f16(unsigned w, int e) { return __half2float(__ushort_as_half((unsigned short)(w >> (16 * e)))); }
inline float tsr_dec_bf16(unsigned w, int e) {
    return __bfloat162float(__ushort_as_bfloat16((unsigned short)(w >> (16 * e))));
}
inline float tsr_dec_tf32(unsigned w, int) { float f; __builtin_memcpy(&f, &w, 4); return f; }
inline long long tsr_dec_s8(unsigned w, int e) { return (long long)(signed char)(w >> (8 * e)); }
inline long long tsr_dec_u8(unsigned w, int e) { return (long long)(unsigned char)(w >> (8 * e)); }
#endif

// d += a @ b for one m16 x n8 tile (d: 4 accumulators, a: 4 registers, b: 2 registers).
__device__ __forceinline__ void tsr_mma_m16n8k16_f16(float* d, const unsigned* a, const unsigned* b, int tid) {
#if defined(TESSERA_HOST)
    tsr_mma_host<float, 2>(d, a, b, tid, tsr_dec_f16, tsr_dec_f16);
#else
    (void)tid;
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 { %0, %1, %2, %3}, { %4, %5, %6, %7}, "
                 "{ %8, %9}, { %0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
__device__ __forceinline__ void tsr_mma_m16n8k16_bf16(float* d, const unsigned* a, const unsigned* b, int tid) {
#if defined(TESSERA_HOST)
    tsr_mma_host<float, 2>(d, a, b, tid, tsr_dec_bf16, tsr_dec_bf16);
#else
    (void)tid;
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 { %0, %1, %2, %3}, { %4, %5, %6, %7}, "
                 "{ %8, %9}, { %0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
__device__ __forceinline__ void tsr_mma_m16n8k8_tf32(float* d, const unsigned* a, const unsigned* b, int tid) {
#if defined(TESSERA_HOST)
    tsr_mma_host<float, 1>(d, a, b, tid, tsr_dec_tf32, tsr_dec_tf32);
#else
    (void)tid;
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 { %0, %1, %2, %3}, { %4, %5, %6, %7}, "
                 "{ %8, %9}, { %0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
// 8-bit integers, exact (the sums wrap modulo 2**32 as the hardware's do without .satfinite); A and
// B may differ in signedness (.s8.u8 and .u8.s8, as the PTX ISA allows).
#if defined(TESSERA_HOST)
#define TSR_MMA_8BIT(NAME, PTX, DA, DB)                                                                  \
    __device__ __forceinline__ void NAME(int* d, const unsigned* a, const unsigned* b, int tid) {        \
        long long acc[4] = {d[0], d[1], d[2], d[3]};                                                      \
        tsr_mma_host<long long, 4>(acc, a, b, tid, DA, DB);                                               \
        for (int r = 0; r < 4; ++r) d[r] = (int)(unsigned)(unsigned long long)acc[r];                     \
    }
#else
#define TSR_MMA_8BIT(NAME, PTX, DA, DB)                                                                  \
    __device__ __forceinline__ void NAME(int* d, const unsigned* a, const unsigned* b, int tid) {        \
        (void)tid;                                                                                        \
        asm volatile("mma.sync.aligned.m16n8k32.row.col.s32." PTX ".s32 { %0, %1, %2, %3}, "             \
                     "{ %4, %5, %6, %7}, { %8, %9}, { %0, %1, %2, %3};\n"                                 \
                     : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])                                     \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));                 \
    }
#endif
TSR_MMA_8BIT(tsr_mma_m16n8k32_s8, "s8.s8", tsr_dec_s8, tsr_dec_s8)
TSR_MMA_8BIT(tsr_mma_m16n8k32_u8, "u8.u8", tsr_dec_u8, tsr_dec_u8)
TSR_MMA_8BIT(tsr_mma_m16n8k32_s8u8, "s8.u8", tsr_dec_s8, tsr_dec_u8)
TSR_MMA_8BIT(tsr_mma_m16n8k32_u8s8, "u8.s8", tsr_dec_u8, tsr_dec_s8)
#undef TSR_MMA_8BIT
