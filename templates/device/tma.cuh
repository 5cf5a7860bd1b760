// ---- bulk tensor copies and mbarriers (sm_90a, spec section 16) ----------------------------------
// A pipeline that the tensor memory accelerator feeds keeps one mbarrier per stage. One thread
// arrives on a stage's barrier expecting a box's bytes and starts `cp.async.bulk.tensor`, which
// completes the bytes on that barrier; every thread waits for the barrier's phase (its parity,
// tracked by the kernel) before reading the stage. The kernel receives one tensor map per copied
// tensor and box (TSR_TMAP_PARAM: a `const __grid_constant__` parameter that the runtime builds
// with cuTensorMapEncodeTiled; parts of a box outside the tensor read as zero). The calls also pass
// the tensor's pointer and shape, which the CPU backend's prelude (host_tma.h) uses to emulate the
// same functions; here they are unused.
#if !defined(TESSERA_HOST)
struct __align__(64) tsr_tensor_map {
    unsigned long long opaque[16];
};
typedef unsigned long long tsr_mbarrier;
#define TSR_TMAP_PARAM(name) , const __grid_constant__ tsr_tensor_map name
#define TSR_TMAP_ARG(name) (&name)
// Dynamic shared memory that bulk tensor copies write: on a 128-byte boundary.
#define TSR_DYNAMIC_SMEM_TMA(name) extern __shared__ __align__(128) unsigned char name[]

__device__ __forceinline__ void tsr_mbar_init(tsr_mbarrier* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(tsr_shared_addr(bar)), "r"(count) : "memory");
}
// Makes the initialized barriers visible to the tensor memory accelerator (a barrier follows).
__device__ __forceinline__ void tsr_mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Waits until the phase of `bar` whose parity is `parity` has completed.
__device__ __forceinline__ void tsr_mbar_wait(tsr_mbarrier* bar, unsigned parity) {
    const unsigned b = tsr_shared_addr(bar);
    unsigned done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(b), "r"(parity)
                     : "memory");
    } while (!done);
}
// One thread: a box of B0 x B1 x ... (innermost first) elements of the tensor `map` describes, from
// coordinates c0.. (innermost first, negative or past the end: zero), into `dst`, on `bar`. SWZ: the
// swizzle mode (bytes) the map was encoded with, 0 for none; the TMA then stores the 16-byte chunks
// of each 128-byte line of the box permuted (`dst` on a multiple of the pattern's repeat, 8 * SWZ).
template <class T, int R, int B0, int B1, int B2, int B3, int B4, int SWZ = 0>
__device__ __forceinline__ void tsr_tma_load(const tsr_tensor_map* map, tsr_mbarrier* bar, T* dst, const T*, long long,
                                             long long, long long, long long, long long, int c0, int c1, int c2, int c3,
                                             int c4, int) {
    static_assert(SWZ == 0 || B0 * (int)sizeof(T) <= SWZ, "a swizzled box's inner extent is at most the span");
    constexpr unsigned bytes = (unsigned)(B0 * B1 * B2 * B3 * B4) * (unsigned)sizeof(T);
    const unsigned b = tsr_shared_addr(bar), d = tsr_shared_addr(dst);
    // The stage was last read (and maybe written) through the generic proxy.
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(b), "r"(bytes) : "memory");
    if constexpr (R == 2) {
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(d), "l"(map), "r"(c0), "r"(c1), "r"(b) : "memory");
    } else if constexpr (R == 3) {
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(d), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(b)
                     : "memory");
    } else if constexpr (R == 4) {
        asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(d), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
                     "r"(b)
                     : "memory");
    } else {
        static_assert(R == 5, "a bulk tensor copy has 2 to 5 dimensions");
        asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n" ::"r"(d), "l"(map), "r"(c0), "r"(c1), "r"(c2),
                     "r"(c3), "r"(c4), "r"(b)
                     : "memory");
    }
}
#endif
