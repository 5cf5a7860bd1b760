// host_atomics.h -- part of the CPU backend's prelude: atomics and memory fences.
// Included only by tessera_host.h (in order); see there for the design.
#pragma once

// ===========================================================================
// 5. Atomics and memory fences
// ===========================================================================
// Groups run in parallel on several OS threads, so these are real atomic
// read-modify-writes on the raw address.  CUDA atomics are relaxed; fences
// are sequentially consistent.  Each returns the old value.  The _block and
// _system scopes behave the same on the host.

namespace tsr {
namespace detail {
template <class T, class Op>
inline T atomic_update(T* addr, Op op) {
  T old;
  __atomic_load(addr, &old, __ATOMIC_RELAXED);
  T desired;
  do {
    desired = op(old);
  } while (!__atomic_compare_exchange(addr, &old, &desired, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  return old;
}
}  // namespace detail
}  // namespace tsr

#define TSR_ATOMIC_INT(T)                                                                               \
  inline T atomicAdd(T* a, T v) { return __atomic_fetch_add(a, v, __ATOMIC_RELAXED); }                  \
  inline T atomicExch(T* a, T v) { return __atomic_exchange_n(a, v, __ATOMIC_RELAXED); }                \
  inline T atomicMin(T* a, T v) { return tsr::detail::atomic_update(a, [v](T o) { return v < o ? v : o; }); } \
  inline T atomicMax(T* a, T v) { return tsr::detail::atomic_update(a, [v](T o) { return v > o ? v : o; }); } \
  inline T atomicAnd(T* a, T v) { return __atomic_fetch_and(a, v, __ATOMIC_RELAXED); }                  \
  inline T atomicOr(T* a, T v) { return __atomic_fetch_or(a, v, __ATOMIC_RELAXED); }                    \
  inline T atomicXor(T* a, T v) { return __atomic_fetch_xor(a, v, __ATOMIC_RELAXED); }                  \
  inline T atomicCAS(T* a, T compare, T v) {                                                            \
    __atomic_compare_exchange_n(a, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);             \
    return compare;                                                                                     \
  }
TSR_ATOMIC_INT(int)
TSR_ATOMIC_INT(unsigned int)
TSR_ATOMIC_INT(unsigned long long)
TSR_ATOMIC_INT(long long)
#undef TSR_ATOMIC_INT
inline int atomicSub(int* a, int v) { return __atomic_fetch_sub(a, v, __ATOMIC_RELAXED); }
inline unsigned int atomicSub(unsigned int* a, unsigned int v) { return __atomic_fetch_sub(a, v, __ATOMIC_RELAXED); }
inline unsigned int atomicInc(unsigned int* a, unsigned int limit) {
  return tsr::detail::atomic_update(a, [limit](unsigned int o) { return o >= limit ? 0u : o + 1u; });
}
inline unsigned int atomicDec(unsigned int* a, unsigned int limit) {
  return tsr::detail::atomic_update(a, [limit](unsigned int o) { return (o == 0u || o > limit) ? limit : o - 1u; });
}
inline unsigned short atomicCAS(unsigned short* a, unsigned short compare, unsigned short v) {
  __atomic_compare_exchange_n(a, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return compare;
}
inline float atomicAdd(float* a, float v) { return tsr::detail::atomic_update(a, [v](float o) { return o + v; }); }
inline double atomicAdd(double* a, double v) { return tsr::detail::atomic_update(a, [v](double o) { return o + v; }); }
inline float atomicExch(float* a, float v) { float old; __atomic_exchange(a, &v, &old, __ATOMIC_RELAXED); return old; }
inline double atomicExch(double* a, double v) { double old; __atomic_exchange(a, &v, &old, __ATOMIC_RELAXED); return old; }

#define TSR_ATOMIC_SCOPES(NAME)                                                                          \
  template <class... A> inline auto NAME##_block(A... a) -> decltype(NAME(a...)) { return NAME(a...); }  \
  template <class... A> inline auto NAME##_system(A... a) -> decltype(NAME(a...)) { return NAME(a...); }
TSR_ATOMIC_SCOPES(atomicAdd)
TSR_ATOMIC_SCOPES(atomicSub)
TSR_ATOMIC_SCOPES(atomicExch)
TSR_ATOMIC_SCOPES(atomicMin)
TSR_ATOMIC_SCOPES(atomicMax)
TSR_ATOMIC_SCOPES(atomicAnd)
TSR_ATOMIC_SCOPES(atomicOr)
TSR_ATOMIC_SCOPES(atomicXor)
TSR_ATOMIC_SCOPES(atomicCAS)
TSR_ATOMIC_SCOPES(atomicInc)
TSR_ATOMIC_SCOPES(atomicDec)
#undef TSR_ATOMIC_SCOPES

inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
