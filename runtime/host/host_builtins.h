// host_builtins.h -- part of the CPU backend's prelude: CUDA built-ins bound to the engine
// (threadIdx, barriers, shuffles, printf, the race detector's hooks).
// Included only by tessera_host.h (in order); see there for the design.
#pragma once

// ===========================================================================
// 8. CUDA built-ins bound to the engine
// ===========================================================================

namespace tsr {
namespace detail {
inline const uint3& cur_thread_idx() { return fiber_tile()->tid; }
inline const uint3& cur_block_idx() { return fiber_worker()->block_idx; }
inline const dim3& cur_block_dim() { return fiber_worker()->block_dim; }
inline const dim3& cur_grid_dim() { return fiber_worker()->grid_dim; }

template <class T>
inline unsigned long long to_bits(T v) {
  static_assert(sizeof(T) <= 8 && __is_trivially_copyable(T), "shuffle of a type wider than 8 bytes");
  unsigned long long u = 0;
  __builtin_memcpy(&u, &v, sizeof(T));
  return u;
}
template <class T>
inline T from_bits(unsigned long long u) {
  T v;
  __builtin_memcpy(&v, &u, sizeof(T));
  return v;
}
inline unsigned shfl_c(int width, bool up) {
  return (static_cast<unsigned>(32 - width) << 8) | (up ? 0u : 0x1fu);
}
}  // namespace detail
}  // namespace tsr

#define threadIdx (::tsr::detail::cur_thread_idx())
#define blockIdx (::tsr::detail::cur_block_idx())
#define blockDim (::tsr::detail::cur_block_dim())
#define gridDim (::tsr::detail::cur_grid_dim())

namespace tsr {
namespace detail {
// The running fiber's worker and tile are computed once per kernel activation (const calls).
inline unsigned long long sync_threads(int pred) { return barrier_arrive(fiber_worker(), fiber_tile(), pred); }
inline unsigned long long sync_warp(unsigned mask, unsigned char op, unsigned long long val, int b, unsigned c) {
  return warp_op(fiber_worker(), fiber_tile(), mask, op, val, b, c);
}
// The lanes of the calling tile's warp that take part in an operation over `mask`.
inline unsigned warp_need(unsigned mask) {
  const Tile* t = fiber_tile();
  return (mask | (1u << t->lane)) & fiber_worker()->warps[t->warp].live;
}
}  // namespace detail
}  // namespace tsr

[[noreturn]] inline void __trap() { tsr_host_fail(nullptr, 0, "__trap() called"); }
[[noreturn]] inline void __brkpt() { tsr_host_fail(nullptr, 0, "__brkpt() called"); }
// Lets the other tiles of the group run, so a spin-wait on a flag that
// another tile of the same group sets can make progress.
inline void __nanosleep(unsigned int) { tsr::detail::yield_current(tsr::detail::fiber_worker()); }
inline long long clock64() { return tsr::detail::clock_ns(); }
inline long long clock() { return tsr::detail::clock_ns(); }
#define printf tsr_rt_printf

// Shared-memory race detector (check_bounds builds only): code compiled with check_bounds
// passes every shared-memory element access through these; see engine.cpp.
template <class T> inline T* tsr_race_read(T* p, int line) { tsr::detail::race_access(p, false, line); return p; }
template <class T> inline T* tsr_race_write(T* p, int line) { tsr::detail::race_access(p, true, line); return p; }
template <class T> inline T* tsr_race_atomic(T* p, int line) { tsr::detail::race_atomic(p, line); return p; }

inline void __syncthreads() { tsr::detail::sync_threads(0); }
inline int __syncthreads_count(int pred) { return static_cast<int>(tsr::detail::sync_threads(pred) & 0xffffffffu); }
inline int __syncthreads_and(int pred) {
  const unsigned long long r = tsr::detail::sync_threads(pred);
  return (r & 0xffffffffu) == (r >> 32);
}
inline int __syncthreads_or(int pred) { return (tsr::detail::sync_threads(pred) & 0xffffffffu) != 0; }

inline void __syncwarp(unsigned int mask = 0xffffffffu) {
  tsr::detail::sync_warp(mask, tsr::detail::kWarpSync, 0, 0, 0);
}
// The lanes of the warp that have not returned.  (On the GPU it is the lanes
// converged at this point; here lanes run ahead to their next warp operation,
// so lanes that have returned from the kernel are already gone.)
inline unsigned int __activemask() {
  return tsr::detail::fiber_worker()->warps[tsr::detail::fiber_tile()->warp].live;
}
inline unsigned int __ballot_sync(unsigned int mask, int pred) {
  return static_cast<unsigned int>(tsr::detail::sync_warp(mask, tsr::detail::kWarpVote, pred != 0, 0, 0));
}
inline int __any_sync(unsigned int mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned int mask, int pred) {
  return __ballot_sync(mask, pred) == tsr::detail::warp_need(mask);
}
inline int __uni_sync(unsigned int mask, int pred) {
  const unsigned b = __ballot_sync(mask, pred);
  return b == 0 || b == tsr::detail::warp_need(mask);
}

template <class T>
inline T __shfl_sync(unsigned int mask, T var, int src_lane, int width = warpSize) {
  using namespace tsr::detail;
  return from_bits<T>(sync_warp(mask, kWarpIdx, to_bits(var), src_lane, shfl_c(width, false)));
}
template <class T>
inline T __shfl_up_sync(unsigned int mask, T var, unsigned int delta, int width = warpSize) {
  using namespace tsr::detail;
  return from_bits<T>(sync_warp(mask, kWarpUp, to_bits(var), static_cast<int>(delta), shfl_c(width, true)));
}
template <class T>
inline T __shfl_down_sync(unsigned int mask, T var, unsigned int delta, int width = warpSize) {
  using namespace tsr::detail;
  return from_bits<T>(sync_warp(mask, kWarpDown, to_bits(var), static_cast<int>(delta), shfl_c(width, false)));
}
template <class T>
inline T __shfl_xor_sync(unsigned int mask, T var, int lane_mask, int width = warpSize) {
  using namespace tsr::detail;
  return from_bits<T>(sync_warp(mask, kWarpXor, to_bits(var), lane_mask, shfl_c(width, false)));
}
