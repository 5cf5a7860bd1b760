// ---- warpgroup MMA (wgmma.mma_async, sm_90a; spec section 16) -------------------------------
// Shared-memory matrix descriptors (the PTX ISA's "matrix descriptor": start address >> 4 in bits
// 0-13, leading byte offset >> 4 in 16-29, stride byte offset >> 4 in 32-45, the swizzle mode in
// 62-63: 1 = 128-byte, 2 = 64-byte, 3 = 32-byte), the fence / commit / wait of the asynchronous
// MMAs, and the CPU backend's emulation of one m64nNk instruction. The instructions themselves are
// printed per shape into the module (emit/wgmma_asm.py): each calls tsr_wgmma_host on the CPU.
// The emulation reads shared memory only through the descriptors, with the swizzle applied to the
// addresses as the hardware does (the arrays are 1024-byte aligned, lir/swizzle.py), so a wrong
// layout, descriptor or copy shows as a wrong result; its sums run in the order of the mma.sync
// emulation (device/mma.cuh), so that every target gives the same bits.

#if !defined(TESSERA_HOST)
// Dynamic shared memory holding swizzled arrays: on 1024 bytes, the 128-byte mode's repeat (the
// CPU backend's prelude aligns its dynamic shared memory so for every kernel).
#define TSR_DYNAMIC_SMEM_1024(name) extern __shared__ __align__(1024) unsigned char name[]
#endif

__device__ __forceinline__ unsigned long long tsr_wgmma_desc(const void* p, unsigned lbo, unsigned sbo,
                                                             unsigned layout) {
#if defined(TESSERA_HOST)
    const unsigned long long a = (unsigned long long)(size_t)p;
#else
    const unsigned long long a = (unsigned)__cvta_generic_to_shared(p);
#endif
    return ((a & 0x3FFFFull) >> 4) | ((unsigned long long)((lbo & 0x3FFFFu) >> 4) << 16) |
           ((unsigned long long)((sbo & 0x3FFFFu) >> 4) << 32) | ((unsigned long long)layout << 62);
}

// Keeps the compiler from moving accumulator accesses across the asynchronous MMAs.
template <int N>
__device__ __forceinline__ void tsr_wgmma_fence_operands(float* d) {
#if !defined(TESSERA_HOST)
#pragma unroll
    for (int e = 0; e < N; ++e) asm volatile("" : "+f"(d[e])::"memory");
#else
    (void)d;
#endif
}
template <int N>
__device__ __forceinline__ void tsr_wgmma_fence_operands(int* d) {
#if !defined(TESSERA_HOST)
#pragma unroll
    for (int e = 0; e < N; ++e) asm volatile("" : "+r"(d[e])::"memory");
#else
    (void)d;
#endif
}

// Before a group's MMAs: the shared-memory writes of the generic proxy (copies, stores) made
// visible to the MMAs' asynchronous proxy, then wgmma.fence (the accumulators' registers written).
__device__ __forceinline__ void tsr_wgmma_arrive() {
#if !defined(TESSERA_HOST)
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void tsr_wgmma_commit() {
#if !defined(TESSERA_HOST)
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void tsr_wgmma_wait() {
#if !defined(TESSERA_HOST)
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

#if defined(TESSERA_HOST)
// The bytes of one element of an operand read through descriptor `desc` (its start address is the
// low 18 bits of an address at most 256 KiB after `base`, the operand's first element): element
// (row r, byte b along the contiguous dimension). K-major (`mn` false): rows are M or N, 8-row
// groups `stride` bytes apart, b inside one swizzle-atom row. MN-major: rows are K (8-row groups
// `stride` apart), the contiguous M or N dimension in atoms of `mode` bytes `leading` bytes apart.
inline unsigned tsr_desc_read(unsigned long long desc, const void* base, bool mn, unsigned r, unsigned b,
                              unsigned esize, int line) {
    const unsigned long long pb = (unsigned long long)(size_t)base;
    const unsigned long long start = pb + ((((desc & 0x3FFFull) << 4) - (pb & 0x3FFFFull)) & 0x3FFFFull);
    const unsigned leading = (unsigned)((desc >> 16) & 0x3FFFu) << 4, stride = (unsigned)((desc >> 32) & 0x3FFFu) << 4;
    const unsigned layout = (unsigned)(desc >> 62), mode = layout == 1 ? 128u : layout == 2 ? 64u : 32u;
    unsigned long long a = start + (r / 8) * stride + (r % 8) * mode;
    a += mn ? (b / mode) * leading + b % mode : b;
    a ^= ((a >> 7) & (mode / 16 - 1)) << 4;  // the swizzle, on the address bits
    const unsigned char* p = (const unsigned char*)(size_t)a;
    tsr_mma_race(p, esize, esize, line);
    unsigned w = 0;
    __builtin_memcpy(&w, p, esize);
    return w;
}

// One wgmma.mma_async m64nNk (KI = the instruction's k) for this lane of its warpgroup: D is this
// lane's N / 2 accumulators (rows 16 (warp % 4) + g and + 8, columns 8 j + 2 t + {0, 1}). A from
// registers (`a`, the m16 layout of the warp's rows, gathered from the quad's lanes by shuffles as
// mma.sync's) or through descriptor `da`; B through `db` (`b_mn`: MN-major, B[K, N] rows of K).
template <class Acc, int E, int N, int KI, class Dec>
inline void tsr_wgmma_host(Acc* d, const unsigned* a, unsigned long long da, const void* pa, bool b_mn,
                           unsigned long long db, const void* pb, int tid, int line, unsigned esize, Dec dec) {
    const unsigned lane = tsr_lane_of(tid), g = lane >> 2, t = lane & 3, row0 = 16 * (((unsigned)tid >> 5) & 3);
    unsigned ar[4][4] = {};
    if (a != nullptr) {
        const unsigned long long a01 = (unsigned long long)a[0] | ((unsigned long long)a[1] << 32);
        const unsigned long long a23 = (unsigned long long)a[2] | ((unsigned long long)a[3] << 32);
        for (int q = 0; q < 4; ++q) {
            const unsigned long long x01 = __shfl_sync(0xffffffffu, a01, (int)(4 * g) + q);
            const unsigned long long x23 = __shfl_sync(0xffffffffu, a23, (int)(4 * g) + q);
            ar[q][0] = (unsigned)x01, ar[q][1] = (unsigned)(x01 >> 32), ar[q][2] = (unsigned)x23;
            ar[q][3] = (unsigned)(x23 >> 32);
        }
    }
    for (int j = 0; j < N / 8; ++j) {
        for (int h = 0; h < 2; ++h) {          // rows g and g + 8
            for (int c = 0; c < 2; ++c) {      // columns 2t and 2t + 1
                const unsigned row = row0 + g + 8 * h, col = 8 * j + 2 * t + c;
                Acc acc = d[4 * j + 2 * h + c];
                for (int q = 0; q < 4; ++q) {
                    for (int kh = 0; kh < 2; ++kh) {
                        for (int e = 0; e < E; ++e) {
                            const unsigned k = kh * (KI / 2) + q * E + e;
                            const auto x = a != nullptr ? dec(ar[q][2 * kh + h], e)
                                                        : dec(tsr_desc_read(da, pa, false, row, k * esize, esize, line), 0);
                            const auto y = b_mn ? dec(tsr_desc_read(db, pb, true, k, col * esize, esize, line), 0)
                                                : dec(tsr_desc_read(db, pb, false, col, k * esize, esize, line), 0);
                            acc += x * y;
                        }
                    }
                }
                d[4 * j + 2 * h + c] = acc;
            }
        }
    }
}
#endif
