// host_tma.h -- part of the CPU backend's prelude: bulk tensor copies (cp.async.bulk.tensor) and
// mbarriers (sm_90a, spec section 16), emulated per group with the PTX ISA's semantics.
// Included only by tessera_host.h (in order); see there for the design.
//
// An mbarrier counts the arrivals its current phase still waits for and the transaction bytes
// (tx-count): `mbarrier.arrive.expect_tx` adds the bytes a copy will bring, then arrives; a copy
// completes its bytes on the barrier when it lands; the phase completes when both counts are
// zero, and the next phase starts with the init count of arrivals. `try_wait.parity(p)` succeeds
// once the phase of parity p has completed (the current phase's parity differs from p).
// A copy (the box of a tensor, zero outside the tensor) is kept in flight on its barrier and
// lands, reading the tensor then, when a tile first waits on that barrier: a tile that reads the
// destination without waiting sees the old contents, as on the GPU.  A waiting tile that cannot
// see its phase complete lets the others run (tile 0 may not have issued the copy yet).
// A swizzled box (tensor map swizzle of 32, 64 or 128 bytes, for the arrays a warpgroup MMA reads)
// lands with the 16-byte chunk c of each 128-byte line L of the box (counted from the destination,
// which the compiler places on a multiple of the pattern's repeat) at chunk c ^ (L mod (mode / 16)),
// the PTX ISA's "Swizzling Modes".
// In check_bounds builds (line > 0) the race detector marks a copy's bytes in flight from its
// issue to its landing, so a read of a stage whose barrier has not completed is reported.
#pragma once

// ===========================================================================
// 10. Bulk tensor copies and mbarriers
// ===========================================================================

// The GPU's kernels take a tensor map per copied tensor; here the calls pass the tensor's pointer
// and shape instead, and the kernels take no such parameter.
struct tsr_tensor_map {};
#define TSR_TMAP_PARAM(name)
#define TSR_TMAP_ARG(name) nullptr
#define TSR_DYNAMIC_SMEM_TMA(name) TSR_DYNAMIC_SMEM(name)

namespace tsr {
namespace detail {
constexpr unsigned kMbarFlight = 8;  // copies in flight per barrier (the compiler issues at most 8 a stage)

struct TmaBox {  // one bulk tensor copy in flight; per dimension innermost first
  const unsigned char* base;
  unsigned char* dst;
  long long dims[5];
  int coords[5], box[5];
  int elem, line;
  int swizzle;  // bytes: 0, 32, 64 or 128
};

// Where byte `offset` of the box's dense row-major image lands, from the destination.
inline long long tma_swizzled(const TmaBox& c, long long offset) {
  if (c.swizzle == 0) return offset;
  return offset ^ (((offset >> 7) & (c.swizzle / 16 - 1)) << 4);
}
}  // namespace detail
}  // namespace tsr

struct tsr_mbarrier {
  unsigned phase;     // phases completed: the current phase's parity is phase & 1
  unsigned expected;  // arrivals a phase waits for (the init count)
  unsigned pending;   // arrivals the current phase still waits for
  long long tx;       // transaction bytes it still waits for
  unsigned nflight;
  tsr::detail::TmaBox flight[tsr::detail::kMbarFlight];
};

inline void tsr_mbar_init(tsr_mbarrier* bar, unsigned count) {
  bar->phase = 0;
  bar->expected = bar->pending = count;
  bar->tx = 0;
  bar->nflight = 0;
}
inline void tsr_mbar_init_fence() {}

namespace tsr {
namespace detail {
// Calls f(offset in the box, element offset in the tensor or -1 outside) per element, in the
// box's row-major order (the destination is the box, dense).
template <class F>
inline void tma_each(const TmaBox& c, F f) {
  const long long n = 1LL * c.box[0] * c.box[1] * c.box[2] * c.box[3] * c.box[4];
  for (long long i = 0; i < n; ++i) {
    long long rest = i, at = 0, stride = 1;
    bool in = true;
    for (int k = 0; k < 5; ++k) {
      const long long x = c.coords[k] + rest % c.box[k];
      rest /= c.box[k];
      in = in && x >= 0 && x < c.dims[k];
      at += x * stride;
      stride *= c.dims[k];
    }
    f(i, in ? at : -1);
  }
}

// The race detector's view of a copy: each element of its destination, pending or landed.
inline void tma_race(const TmaBox& c, bool land) {
  AsyncCopy r{};
  r.line = c.line;
  r.bytes = r.elem_bytes = static_cast<unsigned short>(c.elem);
  tma_each(c, [&](long long i, long long) {
    r.dst = c.dst + tma_swizzled(c, i * c.elem);
    if (land) race_async_land(r);
    else race_async_issue(r);
  });
}

// The copy lands: the box's bytes from the tensor (zero outside it), then complete_tx.
inline void tma_land(tsr_mbarrier* bar, const TmaBox& c) {
  if (c.line > 0) tma_race(c, true);
  tma_each(c, [&](long long i, long long at) {
    unsigned char* d = c.dst + tma_swizzled(c, i * c.elem);
    if (at < 0) __builtin_memset(d, 0, c.elem);
    else __builtin_memcpy(d, c.base + at * c.elem, c.elem);
  });
  bar->tx -= 1LL * c.box[0] * c.box[1] * c.box[2] * c.box[3] * c.box[4] * c.elem;
}

inline void mbar_complete(tsr_mbarrier* bar) {
  if (bar->pending == 0 && bar->tx == 0) {
    ++bar->phase;
    bar->pending = bar->expected;
  }
}
}  // namespace detail
}  // namespace tsr

namespace tsr {
namespace detail {
// mbarrier.arrive.expect_tx of the box's bytes and the start of its copy (it lands at a wait).
inline void tma_issue(tsr_mbarrier* bar, const TmaBox& box) {
  if (bar->nflight == kMbarFlight) tsr_host_fail(nullptr, box.line, "more bulk copies in flight on one mbarrier than 8");
  TmaBox& c = bar->flight[bar->nflight++];
  c = box;
  bar->tx += 1LL * c.box[0] * c.box[1] * c.box[2] * c.box[3] * c.box[4] * c.elem;  // expect-tx, then arrive-on
  if (c.line > 0) tma_race(c, false);
  --bar->pending;
  mbar_complete(bar);
}

// One try of mbarrier.try_wait.parity: what is in flight lands (time passes), and whether the
// phase of parity `parity` has completed.
inline bool mbar_try_wait(tsr_mbarrier* bar, unsigned parity) {
  for (unsigned i = 0; i < bar->nflight; ++i) tma_land(bar, bar->flight[i]);
  bar->nflight = 0;
  mbar_complete(bar);
  return (bar->phase & 1u) != (parity & 1u);
}
}  // namespace detail
}  // namespace tsr

// One thread: arrive on `bar` expecting the box's bytes, and start copying the B0 x B1 x ... box
// (innermost first) at coordinates c0.. of the tensor at `base` with dimensions d0.. (innermost
// first) into `dst`, swizzled in mode SWZ (bytes; 0: dense).
template <class T, int R, int B0, int B1, int B2, int B3, int B4, int SWZ = 0>
inline void tsr_tma_load(const tsr_tensor_map*, tsr_mbarrier* bar, T* dst, const T* base, long long d0, long long d1,
                         long long d2, long long d3, long long d4, int c0, int c1, int c2, int c3, int c4, int line) {
  static_assert(R >= 2 && R <= 5, "a bulk tensor copy has 2 to 5 dimensions");
  static_assert(SWZ == 0 || B0 * static_cast<int>(sizeof(T)) <= SWZ, "a swizzled box's inner extent is at most the span");
  tsr::detail::tma_issue(bar, tsr::detail::TmaBox{reinterpret_cast<const unsigned char*>(base),
                                                  reinterpret_cast<unsigned char*>(dst), {d0, d1, d2, d3, d4},
                                                  {c0, c1, c2, c3, c4}, {B0, B1, B2, B3, B4},
                                                  static_cast<int>(sizeof(T)), line, SWZ});
}

// Every tile: wait until the phase of `bar` whose parity is `parity` has completed; a tile that
// cannot see it complete lets the others run.
inline void tsr_mbar_wait(tsr_mbarrier* bar, unsigned parity) {
  using namespace tsr::detail;
  Worker* w = fiber_worker();
  while (!mbar_try_wait(bar, parity)) {
    if (w->rcount == 0) deadlock(w, fiber_tile());
    yield_current(w);
  }
}
