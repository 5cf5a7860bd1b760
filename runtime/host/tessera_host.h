// tessera_host.h -- the CPU backend's prelude.
//
// The CPU backend compiles the very CUDA C text that Tessera emits for NVRTC,
// with this header force-included:
//
//   c++ -std=c++17 -O2 -fPIC -shared -pthread -DTESSERA_HOST
//       -include tessera_host.h wrapper.cpp
//
// It emulates the subset of CUDA that emitted code uses and runs kernels with
// GPU semantics: each thread block ("group") runs all of its threads ("tiles")
// as user-space fibers on one OS thread, so `__shared__` is `thread_local`,
// `__syncthreads()` and warp-synchronous operations are scheduling points, and
// groups run in parallel on several OS threads, so atomics are real atomics.
//
// Sections:
//    1. Includes and qualifier macros
//    2. Built-in vector types, uint3 and dim3
//    3. __half and __nv_bfloat16 (bit-exact round-to-nearest-even)
//    4. Math and integer intrinsics CUDA has and the host lacks
//    5. Atomics and memory fences
//    6. Fiber context switch (x86-64 and aarch64 assembly, no system call)
//    7. Execution engine: launch state, stacks, the per-group scheduler
//    8. CUDA built-ins bound to the engine (threadIdx, barriers, shuffles, ...)
//    9. Launch entry point: tsr_launch_config and tsr::launch
//
// Everything here is `inline` (one header, compiled into each kernel .so) and
// has hidden visibility, so two kernel libraries loaded into one process never
// share or interpose each other's runtime.

#pragma once

#ifndef TESSERA_HOST
#error "tessera_host.h is the CPU backend's prelude: compile with -DTESSERA_HOST"
#else

// ===========================================================================
// 1. Includes and qualifier macros
// ===========================================================================
// All system headers come first: the qualifier macros below (`__noinline__`
// in particular) must not leak into them.

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cmath>
#include <limits>
#include <new>
#include <type_traits>
#include <unordered_map>
#include <utility>

#pragma GCC visibility push(hidden)

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __grid_constant__
#define __align__(n) __attribute__((aligned(n)))
#define __constant__
#define __managed__
// One instance per group: the group's fibers all run on one OS thread and a
// worker thread runs one group at a time.  Like the GPU, shared memory is not
// cleared between groups.
#define __shared__ static thread_local
// `__restrict__` is a GCC/Clang keyword already.

// Dynamic shared memory.  The compiler emits, at block scope inside the kernel,
//     TSR_DYNAMIC_SMEM(name);
// which on the device expands to
//     extern __shared__ __align__(16) unsigned char name[]
// and here gives `name` as an `unsigned char*` to the group's buffer of the
// launch's dynamic_smem_bytes (aligned to 128 bytes).
#define TSR_DYNAMIC_SMEM(name) unsigned char* const name = ::tsr::dynamic_smem()

static constexpr int warpSize = 32;

// ===========================================================================
// 2. Built-in vector types, uint3 and dim3
// ===========================================================================
// Same members and alignment as CUDA's vector_types.h: 1 and 3 components are
// aligned like the element, 2 components to twice it, 4 components to four
// times it but at most 16 bytes.

#define TSR_VEC1(T, N)                                                              \
  struct __attribute__((aligned(sizeof(T)))) N##1 { T x; };                         \
  inline N##1 make_##N##1(T x) { N##1 r; r.x = x; return r; }
#define TSR_VEC2(T, N)                                                              \
  struct __attribute__((aligned(2 * sizeof(T)))) N##2 { T x, y; };                  \
  inline N##2 make_##N##2(T x, T y) { N##2 r; r.x = x; r.y = y; return r; }
#define TSR_VEC3(T, N)                                                              \
  struct N##3 { T x, y, z; };                                                       \
  inline N##3 make_##N##3(T x, T y, T z) { N##3 r; r.x = x; r.y = y; r.z = z; return r; }
#define TSR_VEC4(T, N)                                                              \
  struct __attribute__((aligned(4 * sizeof(T) < 16 ? 4 * sizeof(T) : 16))) N##4 {   \
    T x, y, z, w;                                                                   \
  };                                                                                \
  inline N##4 make_##N##4(T x, T y, T z, T w) {                                     \
    N##4 r; r.x = x; r.y = y; r.z = z; r.w = w; return r;                           \
  }
#define TSR_VEC_ALL(T, N) TSR_VEC1(T, N) TSR_VEC2(T, N) TSR_VEC3(T, N) TSR_VEC4(T, N)

TSR_VEC_ALL(signed char, char)
TSR_VEC_ALL(unsigned char, uchar)
TSR_VEC_ALL(short, short)
TSR_VEC_ALL(unsigned short, ushort)
TSR_VEC_ALL(int, int)
TSR_VEC_ALL(unsigned int, uint)
TSR_VEC_ALL(long, long)
TSR_VEC_ALL(unsigned long, ulong)
TSR_VEC_ALL(long long, longlong)
TSR_VEC_ALL(unsigned long long, ulonglong)
TSR_VEC_ALL(float, float)
TSR_VEC_ALL(double, double)

#undef TSR_VEC_ALL
#undef TSR_VEC4
#undef TSR_VEC3
#undef TSR_VEC2
#undef TSR_VEC1

static_assert(alignof(float4) == 16 && sizeof(float4) == 16, "float4 layout");
static_assert(alignof(double2) == 16 && alignof(longlong2) == 16, "16-byte vectors");
static_assert(alignof(float2) == 8 && alignof(uint3) == 4, "vector alignment");

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

// ===========================================================================
// 3. __half and __nv_bfloat16
// ===========================================================================
// 16-bit storage types.  float <-> half and float <-> bfloat16 round to
// nearest even exactly as the GPU's cvt.rn instructions do, with subnormals
// and infinities; NaN keeps its sign and the top of its payload (as numpy's
// float16 does; the GPU may return its canonical NaN instead).  Arithmetic on
// them is done in float and rounded once, which is exact: float has more than
// 2p+2 bits for both formats, so the double rounding is innocuous.

namespace tsr {
namespace detail {

inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
inline uint64_t f64_bits(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }
inline double bits_f64(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }

inline uint16_t f32_to_f16_bits(float f) {
  const uint32_t x = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) {  // Inf or NaN
    if (a == 0x7f800000u) return sign | 0x7c00u;
    uint16_t h = static_cast<uint16_t>(0x7c00u | ((a & 0x007fffffu) >> 13));
    if (h == 0x7c00u) h = 0x7c01u;  // payload only in the low bits: stay a NaN
    return sign | h;
  }
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // rounds to infinity (65520 and up)
  if (a < 0x38800000u) {                       // below 2^-14: subnormal half or zero
    if (a <= 0x33000000u) return sign;         // at most 2^-25 rounds to (signed) zero
    const uint32_t e = a >> 23;                 // 102 .. 112
    const uint32_t m = (a & 0x007fffffu) | 0x00800000u;
    const uint32_t shift = 126u - e;            // 14 .. 24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;  // may carry into the smallest normal
    return sign | static_cast<uint16_t>(r);
  }
  // Normal: rebias the exponent (127 -> 15) and round off 13 mantissa bits;
  // a carry out of the mantissa correctly bumps the exponent.
  uint32_t r = (a - 0x38000000u) >> 13;
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return sign | static_cast<uint16_t>(r);
}

inline float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  if (e == 0x1fu) return bits_f32(sign | 0x7f800000u | (m << 13));
  if (e != 0) return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
  if (m == 0) return bits_f32(sign);
  // Subnormal half: normalise into a float.
  uint32_t exp = 113u;
  while (!(m & 0x400u)) { m <<= 1; --exp; }
  return bits_f32(sign | (exp << 23) | ((m & 0x3ffu) << 13));
}

inline uint16_t f32_to_bf16_bits(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {  // NaN: truncate the payload, stay a NaN
    uint16_t b = static_cast<uint16_t>(x >> 16);
    if ((b & 0x7fu) == 0) b |= 1u;
    return b;
  }
  // Round to nearest even on the low 16 bits; a carry reaches the exponent and
  // turns the largest finite values into infinity, as it should.
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

inline float bf16_bits_to_f32(uint16_t b) { return bits_f32(static_cast<uint32_t>(b) << 16); }

// double -> float rounding to odd: a later round-to-nearest-even to a format
// of at most 22 bits (half, bfloat16) then gives the correctly rounded result.
inline float f64_to_f32_odd(double d) {
  float f = static_cast<float>(d);
  if (static_cast<double>(f) == d || std::isnan(d) || std::isinf(f)) return f;
  uint32_t u = f32_bits(f);
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) --u;  // truncate toward zero
  return bits_f32(u | 1u);
}

// long long -> double rounding to odd (exact below 2^53).
inline double i64_to_f64_odd(long long v) {
  const bool neg = v < 0;
  unsigned long long a = neg ? 0ull - static_cast<unsigned long long>(v) : static_cast<unsigned long long>(v);
  int shift = 0;
  bool sticky = false;
  while (a >> 53) { sticky |= (a & 1u); a >>= 1; ++shift; }
  if (sticky) a |= 1u;
  const double r = std::ldexp(static_cast<double>(a), shift);
  return neg ? -r : r;
}
inline double u64_to_f64_odd(unsigned long long a) {
  int shift = 0;
  bool sticky = false;
  while (a >> 53) { sticky |= (a & 1u); a >>= 1; ++shift; }
  if (sticky) a |= 1u;
  return std::ldexp(static_cast<double>(a), shift);
}

}  // namespace detail
}  // namespace tsr

struct __half_raw { unsigned short x; };
struct __nv_bfloat16_raw { unsigned short x; };

struct __half {
  unsigned short __x;
  __half() = default;  // trivial, so `__shared__ __half s[N]` needs no constructor
  constexpr __half(const __half_raw& r) : __x(r.x) {}
  __half(float f) : __x(tsr::detail::f32_to_f16_bits(f)) {}
  __half(double d) : __x(tsr::detail::f32_to_f16_bits(tsr::detail::f64_to_f32_odd(d))) {}
  __half(int v) : __x(tsr::detail::f32_to_f16_bits(static_cast<float>(v))) {}
  __half(unsigned int v) : __x(tsr::detail::f32_to_f16_bits(static_cast<float>(v))) {}
  __half(short v) : __x(tsr::detail::f32_to_f16_bits(static_cast<float>(v))) {}
  __half(unsigned short v) : __x(tsr::detail::f32_to_f16_bits(static_cast<float>(v))) {}
  __half(long long v)
      : __x(tsr::detail::f32_to_f16_bits(tsr::detail::f64_to_f32_odd(tsr::detail::i64_to_f64_odd(v)))) {}
  __half(unsigned long long v)
      : __x(tsr::detail::f32_to_f16_bits(tsr::detail::f64_to_f32_odd(tsr::detail::u64_to_f64_odd(v)))) {}
  operator float() const { return tsr::detail::f16_bits_to_f32(__x); }
  operator __half_raw() const { return __half_raw{__x}; }
};

struct __nv_bfloat16 {
  unsigned short __x;
  __nv_bfloat16() = default;
  constexpr __nv_bfloat16(const __nv_bfloat16_raw& r) : __x(r.x) {}
  __nv_bfloat16(float f) : __x(tsr::detail::f32_to_bf16_bits(f)) {}
  __nv_bfloat16(double d) : __x(tsr::detail::f32_to_bf16_bits(tsr::detail::f64_to_f32_odd(d))) {}
  __nv_bfloat16(int v)
      : __x(tsr::detail::f32_to_bf16_bits(tsr::detail::f64_to_f32_odd(static_cast<double>(v)))) {}
  __nv_bfloat16(unsigned int v)
      : __x(tsr::detail::f32_to_bf16_bits(tsr::detail::f64_to_f32_odd(static_cast<double>(v)))) {}
  __nv_bfloat16(short v) : __x(tsr::detail::f32_to_bf16_bits(static_cast<float>(v))) {}
  __nv_bfloat16(unsigned short v) : __x(tsr::detail::f32_to_bf16_bits(static_cast<float>(v))) {}
  __nv_bfloat16(long long v)
      : __x(tsr::detail::f32_to_bf16_bits(tsr::detail::f64_to_f32_odd(tsr::detail::i64_to_f64_odd(v)))) {}
  __nv_bfloat16(unsigned long long v)
      : __x(tsr::detail::f32_to_bf16_bits(tsr::detail::f64_to_f32_odd(tsr::detail::u64_to_f64_odd(v)))) {}
  operator float() const { return tsr::detail::bf16_bits_to_f32(__x); }
  operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }
};
typedef __half half;
typedef __nv_bfloat16 nv_bfloat16;

static_assert(sizeof(__half) == 2 && sizeof(__nv_bfloat16) == 2, "16-bit storage");
static_assert(std::is_trivial<__half>::value && std::is_trivial<__nv_bfloat16>::value, "trivial");

// Conversions (cuda_fp16.h / cuda_bf16.h names).
inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline float __half2float(__half h) { return float(h); }
inline __half __double2half(double d) { return __half(d); }
inline __half __int2half_rn(int v) { return __half(v); }
inline __half __uint2half_rn(unsigned int v) { return __half(v); }
inline __half __short2half_rn(short v) { return __half(v); }
inline __half __ushort2half_rn(unsigned short v) { return __half(v); }
inline __half __ll2half_rn(long long v) { return __half(v); }
inline __half __ull2half_rn(unsigned long long v) { return __half(v); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline short __half_as_short(__half h) { return static_cast<short>(h.__x); }
inline __half __ushort_as_half(unsigned short u) { return __half(__half_raw{u}); }
inline __half __short_as_half(short s) { return __half(__half_raw{static_cast<unsigned short>(s)}); }

inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 b) { return float(b); }
inline __nv_bfloat16 __double2bfloat16(double d) { return __nv_bfloat16(d); }
inline __nv_bfloat16 __int2bfloat16_rn(int v) { return __nv_bfloat16(v); }
inline __nv_bfloat16 __uint2bfloat16_rn(unsigned int v) { return __nv_bfloat16(v); }
inline __nv_bfloat16 __ll2bfloat16_rn(long long v) { return __nv_bfloat16(v); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
inline short __bfloat16_as_short(__nv_bfloat16 b) { return static_cast<short>(b.__x); }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16(__nv_bfloat16_raw{u}); }
inline __nv_bfloat16 __short_as_bfloat16(short s) {
  return __nv_bfloat16(__nv_bfloat16_raw{static_cast<unsigned short>(s)});
}

namespace tsr {
namespace detail {
// Saturating float -> int conversions as the GPU's cvt.*i.s32.f32 do them:
// NaN gives 0, out-of-range values clamp.
template <class I>
inline I sat_cvt(double v) {
  if (std::isnan(v)) return 0;
  constexpr double lo = static_cast<double>(std::numeric_limits<I>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<I>::max());
  if (v <= lo) return std::numeric_limits<I>::min();
  if (v >= hi) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}
}  // namespace detail
}  // namespace tsr

inline int __half2int_rz(__half h) { return tsr::detail::sat_cvt<int>(std::trunc(float(h))); }
inline int __half2int_rn(__half h) { return tsr::detail::sat_cvt<int>(std::nearbyint(float(h))); }
inline int __bfloat162int_rz(__nv_bfloat16 b) { return tsr::detail::sat_cvt<int>(std::trunc(float(b))); }
inline int __bfloat162int_rn(__nv_bfloat16 b) { return tsr::detail::sat_cvt<int>(std::nearbyint(float(b))); }

// Arithmetic: computed in float, rounded once (exact, see above).  Negation
// and absolute value only touch the sign bit, as on the GPU.
#define TSR_HALF_OPS(H, RAW)                                                                   \
  inline H operator+(const H& a, const H& b) { return H(float(a) + float(b)); }                \
  inline H operator-(const H& a, const H& b) { return H(float(a) - float(b)); }                \
  inline H operator*(const H& a, const H& b) { return H(float(a) * float(b)); }                \
  inline H operator/(const H& a, const H& b) { return H(float(a) / float(b)); }                \
  inline H& operator+=(H& a, const H& b) { return a = a + b; }                                 \
  inline H& operator-=(H& a, const H& b) { return a = a - b; }                                 \
  inline H& operator*=(H& a, const H& b) { return a = a * b; }                                 \
  inline H& operator/=(H& a, const H& b) { return a = a / b; }                                 \
  inline H operator+(const H& a) { return a; }                                                 \
  inline H operator-(const H& a) { return H(RAW{static_cast<unsigned short>(a.__x ^ 0x8000u)}); } \
  inline bool operator==(const H& a, const H& b) { return float(a) == float(b); }              \
  inline bool operator!=(const H& a, const H& b) { return float(a) != float(b); }              \
  inline bool operator<(const H& a, const H& b) { return float(a) < float(b); }                \
  inline bool operator<=(const H& a, const H& b) { return float(a) <= float(b); }              \
  inline bool operator>(const H& a, const H& b) { return float(a) > float(b); }                \
  inline bool operator>=(const H& a, const H& b) { return float(a) >= float(b); }              \
  inline H __hadd(H a, H b) { return a + b; }                                                  \
  inline H __hsub(H a, H b) { return a - b; }                                                  \
  inline H __hmul(H a, H b) { return a * b; }                                                  \
  inline H __hdiv(H a, H b) { return a / b; }                                                  \
  inline H __hneg(H a) { return -a; }                                                          \
  inline H __habs(H a) { return H(RAW{static_cast<unsigned short>(a.__x & 0x7fffu)}); }        \
  inline H __hmin(H a, H b) { return H(fminf(float(a), float(b))); }                           \
  inline H __hmax(H a, H b) { return H(fmaxf(float(a), float(b))); }                           \
  inline bool __heq(H a, H b) { return a == b; }                                               \
  inline bool __hne(H a, H b) { return a != b; }                                               \
  inline bool __hlt(H a, H b) { return a < b; }                                                \
  inline bool __hle(H a, H b) { return a <= b; }                                               \
  inline bool __hgt(H a, H b) { return a > b; }                                                \
  inline bool __hge(H a, H b) { return a >= b; }                                               \
  inline bool __hisnan(H a) { return (a.__x & 0x7fffu) > (RAW##_INF); }                        \
  inline int __hisinf(H a) {                                                                   \
    return (a.__x & 0x7fffu) == (RAW##_INF) ? ((a.__x & 0x8000u) ? -1 : 1) : 0;                \
  }                                                                                            \
  inline H __hfma(H a, H b, H c) { /* a*b is exact in double; round c + a*b to odd, then once */ \
    const double p = double(float(a)) * double(float(b)), q = double(float(c));               \
    double s = p + q;                                                                          \
    const double bb = s - p, err = (p - (s - bb)) + (q - bb); /* TwoSum: s + err == p + q */   \
    if (err != 0 && !(tsr::detail::f64_bits(s) & 1u))                                          \
      s = std::nextafter(s, err > 0 ? INFINITY : -INFINITY);                                   \
    return H(s);                                                                               \
  }
#define __half_raw_INF 0x7c00u
#define __nv_bfloat16_raw_INF 0x7f80u
TSR_HALF_OPS(__half, __half_raw)
TSR_HALF_OPS(__nv_bfloat16, __nv_bfloat16_raw)
#undef __half_raw_INF
#undef __nv_bfloat16_raw_INF
#undef TSR_HALF_OPS

// ===========================================================================
// 4. Math and integer intrinsics CUDA has and the host lacks
// ===========================================================================
// <math.h> already brings the C functions and the float/double overloads of
// sqrt, exp, fabs, ... into the global namespace, as CUDA has them.  Fast
// approximate intrinsics (__expf, __fdividef, ...) map to the accurate ones.

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
inline double rcbrt(double x) { return 1.0 / cbrt(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float fdividef(float a, float b) { return a / b; }
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return powf(10.0f, x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __powf(float a, float b) { return powf(a, b); }
inline void __sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
inline float __saturatef(float x) { return x >= 1.0f ? 1.0f : (x > 0.0f ? x : 0.0f); }  // NaN -> 0
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __drcp_rn(double a) { return 1.0 / a; }
inline double __dsqrt_rn(double a) { return sqrt(a); }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
#if !defined(__GLIBC__) || !(__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 41))
// C23 names glibc 2.41 declares itself.
inline float sinpif(float x) { return static_cast<float>(sin(M_PI * static_cast<double>(x))); }
inline float cospif(float x) { return static_cast<float>(cos(M_PI * static_cast<double>(x))); }
inline double sinpi(double x) { return sin(M_PI * x); }
inline double cospi(double x) { return cos(M_PI * x); }
#endif
inline void sincospif(float x, float* s, float* c) { *s = sinpif(x); *c = cospif(x); }
inline void sincospi(double x, double* s, double* c) { *s = sinpi(x); *c = cospi(x); }

// CUDA's min/max are overloaded functions, mixed signed/unsigned included.
#define TSR_MINMAX(R, A, B)                                                                \
  inline R min(A a, B b) { return static_cast<R>(a) < static_cast<R>(b) ? static_cast<R>(a) : static_cast<R>(b); } \
  inline R max(A a, B b) { return static_cast<R>(a) > static_cast<R>(b) ? static_cast<R>(a) : static_cast<R>(b); }
TSR_MINMAX(int, int, int)
TSR_MINMAX(unsigned int, unsigned int, unsigned int)
TSR_MINMAX(unsigned int, int, unsigned int)
TSR_MINMAX(unsigned int, unsigned int, int)
TSR_MINMAX(long, long, long)
TSR_MINMAX(unsigned long, unsigned long, unsigned long)
TSR_MINMAX(unsigned long, long, unsigned long)
TSR_MINMAX(unsigned long, unsigned long, long)
TSR_MINMAX(long long, long long, long long)
TSR_MINMAX(unsigned long long, unsigned long long, unsigned long long)
TSR_MINMAX(unsigned long long, long long, unsigned long long)
TSR_MINMAX(unsigned long long, unsigned long long, long long)
#undef TSR_MINMAX
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline double min(float a, double b) { return fmin(a, b); }
inline double max(float a, double b) { return fmax(a, b); }
inline double min(double a, float b) { return fmin(a, b); }
inline double max(double a, float b) { return fmax(a, b); }
inline unsigned int umin(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline unsigned int umax(unsigned int a, unsigned int b) { return a > b ? a : b; }
inline long long llmin(long long a, long long b) { return a < b ? a : b; }
inline long long llmax(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long ullmin(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long ullmax(unsigned long long a, unsigned long long b) { return a > b ? a : b; }

// Bit reinterpretation.
inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
inline unsigned int __float_as_uint(float f) { unsigned int i; memcpy(&i, &f, 4); return i; }
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned int i) { float f; memcpy(&f, &i, 4); return f; }
inline long long __double_as_longlong(double d) { long long i; memcpy(&i, &d, 8); return i; }
inline double __longlong_as_double(long long i) { double d; memcpy(&d, &i, 8); return d; }
inline int __double2hiint(double d) { return static_cast<int>(tsr::detail::f64_bits(d) >> 32); }
inline int __double2loint(double d) { return static_cast<int>(tsr::detail::f64_bits(d) & 0xffffffffu); }
inline double __hiloint2double(int hi, int lo) {
  return tsr::detail::bits_f64((static_cast<uint64_t>(static_cast<uint32_t>(hi)) << 32) | static_cast<uint32_t>(lo));
}

// Conversions with an explicit rounding mode; out-of-range values saturate
// and NaN gives 0, as the GPU's cvt does.
#define TSR_CVT(NAME, FROM, TO, ROUND) \
  inline TO NAME(FROM v) { return tsr::detail::sat_cvt<TO>(ROUND(static_cast<double>(v))); }
TSR_CVT(__float2int_rn, float, int, std::nearbyint)
TSR_CVT(__float2int_rz, float, int, std::trunc)
TSR_CVT(__float2int_ru, float, int, std::ceil)
TSR_CVT(__float2int_rd, float, int, std::floor)
TSR_CVT(__float2uint_rn, float, unsigned int, std::nearbyint)
TSR_CVT(__float2uint_rz, float, unsigned int, std::trunc)
TSR_CVT(__float2uint_ru, float, unsigned int, std::ceil)
TSR_CVT(__float2uint_rd, float, unsigned int, std::floor)
TSR_CVT(__float2ll_rn, float, long long, std::nearbyint)
TSR_CVT(__float2ll_rz, float, long long, std::trunc)
TSR_CVT(__float2ull_rz, float, unsigned long long, std::trunc)
TSR_CVT(__double2int_rn, double, int, std::nearbyint)
TSR_CVT(__double2int_rz, double, int, std::trunc)
TSR_CVT(__double2uint_rz, double, unsigned int, std::trunc)
TSR_CVT(__double2ll_rn, double, long long, std::nearbyint)
TSR_CVT(__double2ll_rz, double, long long, std::trunc)
#undef TSR_CVT
inline float __int2float_rn(int v) { return static_cast<float>(v); }
inline float __uint2float_rn(unsigned int v) { return static_cast<float>(v); }
inline float __ll2float_rn(long long v) { return static_cast<float>(v); }
inline float __ull2float_rn(unsigned long long v) { return static_cast<float>(v); }
inline double __int2double_rn(int v) { return static_cast<double>(v); }
inline double __ll2double_rn(long long v) { return static_cast<double>(v); }
inline float __double2float_rn(double v) { return static_cast<float>(v); }

// Integer intrinsics.
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz(static_cast<unsigned int>(x)) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll(static_cast<unsigned long long>(x)) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned int __brev(unsigned int x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  return __builtin_bswap32(x);
}
inline unsigned long long __brevll(unsigned long long x) {
  return (static_cast<unsigned long long>(__brev(static_cast<unsigned int>(x))) << 32) |
         __brev(static_cast<unsigned int>(x >> 32));
}
inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
  const unsigned long long v = (static_cast<unsigned long long>(y) << 32) | x;
  unsigned int r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<unsigned int>((v >> (((s >> (4 * i)) & 7u) * 8)) & 0xffu) << (8 * i);
  return r;
}
inline unsigned int __funnelshift_l(unsigned int lo, unsigned int hi, unsigned int s) {
  return static_cast<unsigned int>((((static_cast<unsigned long long>(hi) << 32) | lo) << (s & 31u)) >> 32);
}
inline unsigned int __funnelshift_lc(unsigned int lo, unsigned int hi, unsigned int s) {
  return static_cast<unsigned int>((((static_cast<unsigned long long>(hi) << 32) | lo) << (s < 32u ? s : 32u)) >> 32);
}
inline unsigned int __funnelshift_r(unsigned int lo, unsigned int hi, unsigned int s) {
  return static_cast<unsigned int>(((static_cast<unsigned long long>(hi) << 32) | lo) >> (s & 31u));
}
inline unsigned int __funnelshift_rc(unsigned int lo, unsigned int hi, unsigned int s) {
  return static_cast<unsigned int>(((static_cast<unsigned long long>(hi) << 32) | lo) >> (s < 32u ? s : 32u));
}
inline int __mulhi(int a, int b) { return static_cast<int>((static_cast<long long>(a) * b) >> 32); }
inline unsigned int __umulhi(unsigned int a, unsigned int b) {
  return static_cast<unsigned int>((static_cast<unsigned long long>(a) * b) >> 32);
}
inline long long __mul64hi(long long a, long long b) {
  return static_cast<long long>((static_cast<__int128>(a) * b) >> 64);
}
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}
inline int __mul24(int a, int b) {
  return static_cast<int>(static_cast<unsigned int>((a << 8) >> 8) * static_cast<unsigned int>((b << 8) >> 8));
}
inline unsigned int __umul24(unsigned int a, unsigned int b) { return (a & 0xffffffu) * (b & 0xffffffu); }
inline int __hadd(int a, int b) { return static_cast<int>((static_cast<long long>(a) + b) >> 1); }
inline int __rhadd(int a, int b) { return static_cast<int>((static_cast<long long>(a) + b + 1) >> 1); }
inline unsigned int __uhadd(unsigned int a, unsigned int b) {
  return static_cast<unsigned int>((static_cast<unsigned long long>(a) + b) >> 1);
}
inline unsigned int __urhadd(unsigned int a, unsigned int b) {
  return static_cast<unsigned int>((static_cast<unsigned long long>(a) + b + 1) >> 1);
}
inline unsigned int __sad(int a, int b, unsigned int c) {
  return c + static_cast<unsigned int>(a > b ? static_cast<long long>(a) - b : static_cast<long long>(b) - a);
}
inline unsigned int __usad(unsigned int a, unsigned int b, unsigned int c) { return c + (a > b ? a - b : b - a); }

// Cache-hinted loads and stores are plain memory accesses here.
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline T __ldcv(const T* p) { return *const_cast<const volatile T*>(p); }
template <class T> inline void __stwb(T* p, T v) { *p = v; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }

// Asynchronous copies (cuda_pipeline_primitives.h) complete at once here.
inline void __pipeline_memcpy_async(void* dst, const void* src, size_t size, size_t zfill = 0) {
  memcpy(dst, src, size - zfill);
  if (zfill) memset(static_cast<unsigned char*>(dst) + (size - zfill), 0, zfill);
}
inline void __pipeline_commit() {}
inline void __pipeline_wait_prior(size_t) {}

inline long long clock64() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO: no system call
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

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

// ===========================================================================
// 6. Fiber context switch
// ===========================================================================
// tsr_ctx_switch_v1(save, to): push the callee-saved registers and the
// floating-point control state on the current stack, store the stack pointer
// in *save, load `to` as the stack pointer and pop the same frame from it.
// No system call (ucontext's swapcontext calls sigprocmask on every switch).
// A new fiber's stack holds a frame whose return address is the trampoline,
// which calls entry(arg) with the two values planted in callee-saved registers.
// The symbols are weak and hidden: one copy per library, however many
// translation units include this header.

extern "C" void tsr_ctx_switch_v1(void** save_sp, void* to_sp);
extern "C" void tsr_fiber_trampoline_v1();

#if defined(__x86_64__)
// Frame (from the saved rsp up): mxcsr|x87cw, r15, r14, r13, r12, rbx, rbp, return address.
__asm__(
    ".pushsection .text\n"
    ".weak tsr_ctx_switch_v1\n"
    ".hidden tsr_ctx_switch_v1\n"
    ".type tsr_ctx_switch_v1,@function\n"
    ".p2align 4\n"
    "tsr_ctx_switch_v1:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  subq $8, %rsp\n"
    "  stmxcsr (%rsp)\n"
    "  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n"
    "  fldcw 4(%rsp)\n"
    "  addq $8, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size tsr_ctx_switch_v1, .-tsr_ctx_switch_v1\n"
    ".weak tsr_fiber_trampoline_v1\n"
    ".hidden tsr_fiber_trampoline_v1\n"
    ".type tsr_fiber_trampoline_v1,@function\n"
    ".p2align 4\n"
    "tsr_fiber_trampoline_v1:\n"
    "  .cfi_startproc\n"
    "  .cfi_undefined rip\n"  // the outermost frame of a fiber: unwinding stops here
    "  movq %r12, %rdi\n"
    "  callq *%r13\n"
    "  ud2\n"
    "  .cfi_endproc\n"
    ".size tsr_fiber_trampoline_v1, .-tsr_fiber_trampoline_v1\n"
    ".popsection\n");

namespace tsr {
namespace detail {
constexpr size_t kSwitchFrameWords = 8;
// Plant a frame below `top` (16-byte aligned) that switches into entry(arg).
inline void* make_fiber_frame(unsigned char* top, void (*entry)(void*), void* arg, uint64_t fpstate) {
  void** sp = reinterpret_cast<void**>(top - 16 - kSwitchFrameWords * sizeof(void*));
  sp[0] = reinterpret_cast<void*>(fpstate);
  sp[1] = nullptr;                                  // r15
  sp[2] = nullptr;                                  // r14
  sp[3] = reinterpret_cast<void*>(entry);           // r13
  sp[4] = arg;                                      // r12
  sp[5] = nullptr;                                  // rbx
  sp[6] = nullptr;                                  // rbp
  sp[7] = reinterpret_cast<void*>(&tsr_fiber_trampoline_v1);
  return sp;  // after `ret` the trampoline runs with rsp == top - 16, 16-byte aligned
}
inline uint64_t current_fpstate() {
  uint32_t mxcsr;
  uint16_t cw;
  __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
  __asm__ volatile("fnstcw %0" : "=m"(cw));
  return static_cast<uint64_t>(mxcsr) | (static_cast<uint64_t>(cw) << 32);
}
}  // namespace detail
}  // namespace tsr

#elif defined(__aarch64__)
// Frame (176 bytes from the saved sp): x19..x28, x29, x30 (lr), d8..d15, fpcr.
__asm__(
    ".pushsection .text\n"
    ".weak tsr_ctx_switch_v1\n"
    ".hidden tsr_ctx_switch_v1\n"
    ".type tsr_ctx_switch_v1,%function\n"
    ".p2align 4\n"
    "tsr_ctx_switch_v1:\n"
    "  sub sp, sp, #176\n"
    "  stp x19, x20, [sp, #0]\n"
    "  stp x21, x22, [sp, #16]\n"
    "  stp x23, x24, [sp, #32]\n"
    "  stp x25, x26, [sp, #48]\n"
    "  stp x27, x28, [sp, #64]\n"
    "  stp x29, x30, [sp, #80]\n"
    "  stp d8, d9, [sp, #96]\n"
    "  stp d10, d11, [sp, #112]\n"
    "  stp d12, d13, [sp, #128]\n"
    "  stp d14, d15, [sp, #144]\n"
    "  mrs x9, fpcr\n"
    "  str x9, [sp, #160]\n"
    "  mov x9, sp\n"
    "  str x9, [x0]\n"
    "  mov sp, x1\n"
    "  ldp x19, x20, [sp, #0]\n"
    "  ldp x21, x22, [sp, #16]\n"
    "  ldp x23, x24, [sp, #32]\n"
    "  ldp x25, x26, [sp, #48]\n"
    "  ldp x27, x28, [sp, #64]\n"
    "  ldp x29, x30, [sp, #80]\n"
    "  ldp d8, d9, [sp, #96]\n"
    "  ldp d10, d11, [sp, #112]\n"
    "  ldp d12, d13, [sp, #128]\n"
    "  ldp d14, d15, [sp, #144]\n"
    "  ldr x9, [sp, #160]\n"
    "  msr fpcr, x9\n"
    "  add sp, sp, #176\n"
    "  ret\n"
    ".size tsr_ctx_switch_v1, .-tsr_ctx_switch_v1\n"
    ".weak tsr_fiber_trampoline_v1\n"
    ".hidden tsr_fiber_trampoline_v1\n"
    ".type tsr_fiber_trampoline_v1,%function\n"
    ".p2align 4\n"
    "tsr_fiber_trampoline_v1:\n"
    "  .cfi_startproc\n"
    "  .cfi_undefined x30\n"
    "  mov x0, x19\n"
    "  blr x20\n"
    "  brk #0x3e8\n"
    "  .cfi_endproc\n"
    ".size tsr_fiber_trampoline_v1, .-tsr_fiber_trampoline_v1\n"
    ".popsection\n");

namespace tsr {
namespace detail {
constexpr size_t kSwitchFrameWords = 22;  // 176 bytes
inline void* make_fiber_frame(unsigned char* top, void (*entry)(void*), void* arg, uint64_t fpstate) {
  void** sp = reinterpret_cast<void**>(top - 16 - kSwitchFrameWords * sizeof(void*));
  for (size_t i = 0; i < kSwitchFrameWords; ++i) sp[i] = nullptr;
  sp[0] = arg;                                              // x19
  sp[1] = reinterpret_cast<void*>(entry);                   // x20
  sp[11] = reinterpret_cast<void*>(&tsr_fiber_trampoline_v1);  // x30
  sp[20] = reinterpret_cast<void*>(fpstate);                // fpcr
  return sp;
}
inline uint64_t current_fpstate() {
  uint64_t fpcr;
  __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
  return fpcr;
}
}  // namespace detail
}  // namespace tsr

#else
#error "tessera_host.h: the fiber context switch supports x86-64 and aarch64 only"
#endif

// ===========================================================================
// 7. Execution engine
// ===========================================================================
// A launch claims groups from an atomic counter on `num_threads` worker
// threads (the caller's thread is worker 0).  A worker runs one group at a
// time: it plants a fiber frame for each tile and switches into tile 0.  From
// then on tiles switch *directly* to one another: a tile that blocks (at a
// barrier, a warp-synchronous operation or __nanosleep) pops the next tile
// from the group's FIFO ready queue and switches to it, so each barrier costs
// one switch per tile.  When the last live tile arrives at a barrier, it moves
// every waiter to the ready queue in arrival order and carries on; the others
// resume round robin.  Tiles that returned from the kernel no longer take
// part in barriers or warp operations (as on sm_70+).  If a tile blocks while
// the ready queue is empty the group can never progress: that is a deadlock
// and fails the launch.  The last tile to finish switches back to the
// worker's own context, which starts the next group.
//
// A failure (tsr_host_fail, __trap, deadlock) records the first message of
// the launch and raises a flag; the failing fiber switches back to its worker
// and is abandoned, every other fiber that reaches a scheduling point does
// the same, and workers start no more groups.

namespace tsr {
namespace detail {

enum : unsigned char { kTileReady, kTileBarrier, kTileWarp, kTileDone };
enum : unsigned char { kWarpSync, kWarpIdx, kWarpUp, kWarpDown, kWarpXor, kWarpVote };

constexpr size_t kDefaultFiberStack = 64 * 1024;

struct Tile {
  void* sp;              // saved stack pointer while switched out
  uint3 tid;             // threadIdx
  unsigned index;        // linear id: x + y*bx + z*bx*by
  unsigned lane, warp;
  unsigned char state;
  unsigned char op;      // pending warp-synchronous operation
  unsigned need;         // lanes taking part in it
  int b;                 // its lane / delta / xor mask
  unsigned c;            // its PTX clamp/segment operand
  unsigned long long val, result;
};

struct Warp {
  unsigned live;         // lanes that exist and have not returned
  unsigned arrived;      // lanes waiting in a warp-synchronous operation
};

struct Launch {
  void (*invoke)(void*);
  void* body;
  const char* kernel_name;
  unsigned grid[3], block[3];
  unsigned long long ngroups;
  unsigned ntiles;
  size_t dyn_bytes;
  size_t stack_bytes;
  unsigned long long next_group;  // atomic
  int failed;                     // atomic
  char* err;
  int errlen;
};

struct StackArena {
  unsigned char* base;
  size_t map_bytes, slot_bytes, stack_bytes;
  unsigned count;
  StackArena* next;
  // Stack tops are staggered by 64 bytes per tile (up to 4 KiB) so that the
  // tiles' hot frames do not all fall into the same L1 cache set.
  unsigned char* top(unsigned i) const {
    return base + static_cast<size_t>(i + 1) * slot_bytes - static_cast<size_t>(i % 64u) * 64u;
  }
};

struct Worker {
  Launch* launch;
  Tile* cur;                  // the running tile
  Tile* tiles;
  Warp* warps;
  unsigned* ready;            // FIFO ring of tile indices
  unsigned* bar_wait;         // tiles waiting at the barrier, in arrival order
  unsigned ntiles, nwarps;
  unsigned rhead, rcount;
  unsigned live;              // tiles that have not returned
  unsigned bar_arrived, bar_pred, nwait;
  uint3 block_idx;
  dim3 block_dim, grid_dim;
  void* main_sp;              // the worker's own context
  unsigned char* dyn_smem;
  StackArena* arena;
  uint64_t fpstate;
  unsigned long long epoch;   // barrier intervals since the worker started (race detector)
  void* race;                 // shadow of shared memory for the race detector, or null
  void (*race_free)(void*);
};

inline thread_local Worker* t_worker = nullptr;

// A fiber never migrates between OS threads, and the tile it runs never
// changes, so for code running in a fiber these two are constant: declaring
// them `const` (and out of line, so GCC keeps the attribute) lets the
// compiler compute them once per kernel activation instead of reloading the
// thread-local after every scheduling point (a __tls_get_addr call each in a
// shared library).  Only code that runs inside a fiber may call them.
__attribute__((const, noinline)) inline Worker* fiber_worker() { return t_worker; }
__attribute__((const, noinline)) inline Tile* fiber_tile() { return t_worker->cur; }

// --- Fiber stacks ----------------------------------------------------------
// One arena of `count` stacks per worker, each with a PROT_NONE guard page
// below it.  Arenas are pooled per library and reused across launches, so
// the mmap/mprotect system calls are paid once, not per group or launch.

struct ArenaPool {
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  StackArena* free_list = nullptr;
  unsigned nfree = 0;
  ~ArenaPool() {
    while (free_list) {
      StackArena* a = free_list;
      free_list = a->next;
      munmap(a->base, a->map_bytes);
      delete a;
    }
  }
};
inline ArenaPool& arena_pool() {
  static ArenaPool pool;
  return pool;
}

inline size_t page_size() {
  static const size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return p;
}

inline StackArena* acquire_arena(unsigned count, size_t stack_bytes) {
  ArenaPool& pool = arena_pool();
  pthread_mutex_lock(&pool.mu);
  StackArena** best = nullptr;
  for (StackArena** p = &pool.free_list; *p; p = &(*p)->next)
    if ((*p)->stack_bytes == stack_bytes && (*p)->count >= count && (!best || (*p)->count < (*best)->count))
      best = p;
  if (best) {
    StackArena* a = *best;
    *best = a->next;
    --pool.nfree;
    pthread_mutex_unlock(&pool.mu);
    return a;
  }
  pthread_mutex_unlock(&pool.mu);
  const size_t guard = page_size();
  const size_t slot = guard + stack_bytes;
  const size_t bytes = slot * count;
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  for (unsigned i = 0; i < count; ++i) mprotect(static_cast<unsigned char*>(base) + i * slot, guard, PROT_NONE);
  StackArena* a = new (std::nothrow) StackArena{static_cast<unsigned char*>(base), bytes, slot, stack_bytes, count, nullptr};
  if (!a) munmap(base, bytes);
  return a;
}

inline void release_arena(StackArena* a) {
  if (!a) return;
  ArenaPool& pool = arena_pool();
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  const unsigned keep = static_cast<unsigned>(ncpu > 4 ? ncpu : 4);
  pthread_mutex_lock(&pool.mu);
  if (pool.nfree < keep) {
    a->next = pool.free_list;
    pool.free_list = a;
    ++pool.nfree;
    a = nullptr;
  }
  pthread_mutex_unlock(&pool.mu);
  if (a) {
    munmap(a->base, a->map_bytes);
    delete a;
  }
}

// --- Failure ---------------------------------------------------------------

inline bool launch_failed(const Launch* L) { return __atomic_load_n(&L->failed, __ATOMIC_RELAXED) != 0; }

// Record the first failure of the launch; later ones are dropped.
inline void record_failure(Launch* L, const char* msg) {
  int expected = 0;
  if (!__atomic_compare_exchange_n(&L->failed, &expected, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) return;
  if (L->err && L->errlen > 0) {
    const size_t n = strnlen(msg, static_cast<size_t>(L->errlen) - 1);
    memcpy(L->err, msg, n);
    L->err[n] = '\0';
  }
}

// Leave the current fiber for good: back to the worker, which sees the flag.
[[noreturn]] inline void abandon_fiber(Worker* w, Tile* t) {
  tsr_ctx_switch_v1(&t->sp, w->main_sp);
  __builtin_unreachable();
}

[[noreturn]] inline void fail_in_fiber(Worker* w, const char* kernel, int line, const char* message) {
  Tile* t = w->cur;
  char buf[1024];
  const char* name = kernel ? kernel : (w->launch->kernel_name ? w->launch->kernel_name : "kernel");
  char where[32] = "";
  if (line > 0) snprintf(where, sizeof where, ":%d", line);
  snprintf(buf, sizeof buf, "%s%s: %s (block (%u, %u, %u), thread (%u, %u, %u))", name, where, message,
           w->block_idx.x, w->block_idx.y, w->block_idx.z, t->tid.x, t->tid.y, t->tid.z);
  record_failure(w->launch, buf);
  abandon_fiber(w, t);
}

[[noreturn]] inline void deadlock(Worker* w, Tile* t) {
  unsigned at_bar = 0, at_warp = 0, done = 0;
  for (unsigned i = 0; i < w->ntiles; ++i) {
    at_bar += w->tiles[i].state == kTileBarrier;
    at_warp += w->tiles[i].state == kTileWarp;
    done += w->tiles[i].state == kTileDone;
  }
  // The blocking tile has set its own state already.
  char buf[512];
  const char* name = w->launch->kernel_name;
  snprintf(buf, sizeof buf,
           "deadlock: %s%sblock (%u, %u, %u) of %u threads: %u wait at __syncthreads, %u wait at a "
           "warp-synchronous operation (__shfl*_sync/__syncwarp/vote) for lanes that never arrive, "
           "%u have returned",
           name ? name : "", name ? ", " : "", w->block_idx.x, w->block_idx.y, w->block_idx.z, w->ntiles,
           at_bar, at_warp, done);
  record_failure(w->launch, buf);
  abandon_fiber(w, t);
}

// --- Ready queue and switching ----------------------------------------------

inline void push_ready(Worker* w, unsigned idx) {
  unsigned pos = w->rhead + w->rcount;
  if (pos >= w->ntiles) pos -= w->ntiles;
  w->ready[pos] = idx;
  ++w->rcount;
}

inline Tile* pop_ready(Worker* w) {
  Tile* t = &w->tiles[w->ready[w->rhead]];
  if (++w->rhead == w->ntiles) w->rhead = 0;
  --w->rcount;
  return t;
}

// The current tile `t` has set its state and cannot continue: run the next.
inline void block_current(Worker* w, Tile* t) {
  if (launch_failed(w->launch)) abandon_fiber(w, t);
  if (w->rcount == 0) deadlock(w, t);
  Tile* next = pop_ready(w);
  w->cur = next;
  tsr_ctx_switch_v1(&t->sp, next->sp);
  // Resumed: whoever switched here set w->cur = t.
}

// --- Barrier ----------------------------------------------------------------
// The result handed to each participant: (participants << 32) | count of
// non-zero predicates, which __syncthreads_count/_and/_or decode.

inline void barrier_release(Worker* w) {
  const unsigned long long r = (static_cast<unsigned long long>(w->bar_arrived) << 32) | w->bar_pred;
  for (unsigned i = 0; i < w->nwait; ++i) {
    Tile* t = &w->tiles[w->bar_wait[i]];
    t->result = r;
    t->state = kTileReady;
    push_ready(w, t->index);
  }
  w->nwait = 0;
  w->bar_arrived = 0;
  w->bar_pred = 0;
  ++w->epoch;  // a new barrier interval: earlier shared accesses cannot race with later ones
}

inline unsigned long long barrier_arrive(int pred) {
  Worker* w = fiber_worker();
  Tile* t = fiber_tile();
  w->bar_pred += (pred != 0);
  if (++w->bar_arrived == w->live) {
    const unsigned long long r = (static_cast<unsigned long long>(w->bar_arrived) << 32) | w->bar_pred;
    barrier_release(w);
    return r;
  }
  t->state = kTileBarrier;
  w->bar_wait[w->nwait++] = t->index;
  block_current(w, t);
  return t->result;
}

// --- Warp-synchronous operations -----------------------------------------------
// Each lane posts its operation and value in its Tile and waits until every
// live lane named in the mask has arrived.  The lane that completes the set
// computes every participant's result (so no second rendezvous is needed:
// a lane can post a new value only after it has been released), then wakes
// the others.  Shuffle source lanes follow PTX shfl.sync exactly.

inline unsigned long long shuffle_result(const Tile* base, const Tile& t, unsigned need) {
  const int lane = static_cast<int>(t.lane);
  const int bval = t.b & 31;
  const int seg = static_cast<int>((t.c >> 8) & 31u);
  const int cval = static_cast<int>(t.c & 31u);
  const int max_lane = (lane & seg) | (cval & ~seg);
  const int min_lane = lane & seg;
  int j = lane;
  bool in_range = false;
  switch (t.op) {
    case kWarpUp: j = lane - bval; in_range = j >= max_lane; break;
    case kWarpDown: j = lane + bval; in_range = j <= max_lane; break;
    case kWarpXor: j = lane ^ bval; in_range = j <= max_lane; break;
    case kWarpIdx: j = min_lane | (bval & ~seg); in_range = j <= max_lane; break;
    default: break;
  }
  if (!in_range) j = lane;  // out of the segment: own value, as on the GPU
  if (j != lane && ((need >> j) & 1u)) return base[j].val;
  return t.val;  // a source lane that does not take part gives the own value
}

inline void warp_complete(Worker* w, unsigned wi, unsigned need, const Tile* self) {
  Tile* base = &w->tiles[static_cast<size_t>(wi) * 32];
  unsigned ballot = 0;
  for (unsigned m = need; m; m &= m - 1) {
    const unsigned l = static_cast<unsigned>(__builtin_ctz(m));
    if (base[l].op == kWarpVote && base[l].val) ballot |= 1u << l;
  }
  for (unsigned m = need; m; m &= m - 1) {
    Tile& t = base[__builtin_ctz(m)];
    t.result = t.op == kWarpVote ? ballot : (t.op == kWarpSync ? 0 : shuffle_result(base, t, need));
  }
  w->warps[wi].arrived &= ~need;
  for (unsigned m = need; m; m &= m - 1) {
    Tile& t = base[__builtin_ctz(m)];
    if (&t != self) {
      t.state = kTileReady;
      push_ready(w, t.index);
    }
  }
}

// A lane returned: sets of waiting lanes that only lacked it may complete.
inline void warp_recheck(Worker* w, unsigned wi) {
  Warp& wp = w->warps[wi];
  const Tile* base = &w->tiles[static_cast<size_t>(wi) * 32];
  for (unsigned m = wp.arrived; m; m &= m - 1) {
    const unsigned l = static_cast<unsigned>(__builtin_ctz(m));
    if (!((wp.arrived >> l) & 1u)) continue;  // completed meanwhile
    const unsigned need = base[l].need & wp.live;
    if ((wp.arrived & need) == need) warp_complete(w, wi, need, nullptr);
  }
}

inline unsigned long long warp_op(unsigned mask, unsigned char op, unsigned long long val, int b, unsigned c) {
  Worker* w = fiber_worker();
  Tile* t = fiber_tile();
  Warp& wp = w->warps[t->warp];
  const unsigned bit = 1u << t->lane;
  const unsigned need = (mask | bit) & wp.live;
  t->op = op;
  t->val = val;
  t->b = b;
  t->c = c;
  t->need = need;
  wp.arrived |= bit;
  if ((wp.arrived & need) == need) {
    warp_complete(w, t->warp, need, t);
    return t->result;
  }
  t->state = kTileWarp;
  block_current(w, t);
  return t->result;
}

inline void yield_current() {
  Worker* w = t_worker;
  if (!w || w->rcount == 0) return;
  Tile* t = w->cur;
  t->state = kTileReady;
  push_ready(w, t->index);
  block_current(w, t);
}

// --- Tile lifetime ------------------------------------------------------------

[[noreturn]] inline void tile_exit(Worker* w) {
  Tile* t = w->cur;
  t->state = kTileDone;
  --w->live;
  Warp& wp = w->warps[t->warp];
  wp.live &= ~(1u << t->lane);
  if (wp.arrived) warp_recheck(w, t->warp);
  if (w->bar_arrived && w->bar_arrived == w->live) barrier_release(w);
  if (launch_failed(w->launch)) abandon_fiber(w, t);
  if (w->rcount == 0) {
    if (w->live == 0) abandon_fiber(w, t);  // group finished: back to the worker
    deadlock(w, t);
  }
  Tile* next = pop_ready(w);
  w->cur = next;
  tsr_ctx_switch_v1(&t->sp, next->sp);
  __builtin_unreachable();
}

inline void fiber_main(void* arg) {
  Worker* w = static_cast<Worker*>(arg);
  try {
    w->launch->invoke(w->launch->body);
  } catch (...) {
    fail_in_fiber(w, nullptr, 0, "a C++ exception escaped the kernel");
  }
  tile_exit(t_worker);
}

// --- Worker -------------------------------------------------------------------

inline void start_group(Worker* w, unsigned long long g) {
  const Launch* L = w->launch;
  ++w->epoch;  // a new group: nothing it does races with the previous group on this worker
  w->block_idx.x = static_cast<unsigned>(g % L->grid[0]);
  w->block_idx.y = static_cast<unsigned>((g / L->grid[0]) % L->grid[1]);
  w->block_idx.z = static_cast<unsigned>(g / (static_cast<unsigned long long>(L->grid[0]) * L->grid[1]));
  for (unsigned i = 0; i < w->ntiles; ++i) {
    Tile& t = w->tiles[i];
    t.state = kTileReady;
    t.sp = make_fiber_frame(w->arena->top(i), &fiber_main, w, w->fpstate);
    if (i) w->ready[i - 1] = i;
  }
  for (unsigned i = 0; i < w->nwarps; ++i) {
    const unsigned lanes = w->ntiles - i * 32 >= 32 ? 32 : w->ntiles - i * 32;
    w->warps[i].live = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u;
    w->warps[i].arrived = 0;
  }
  w->rhead = 0;
  w->rcount = w->ntiles - 1;
  w->live = w->ntiles;
  w->bar_arrived = w->bar_pred = w->nwait = 0;
}

inline bool worker_init(Worker* w, Launch* L) {
  memset(static_cast<void*>(w), 0, sizeof *w);
  w->launch = L;
  const unsigned n = L->ntiles;
  w->ntiles = n;
  w->nwarps = (n + 31) / 32;
  w->block_dim = dim3(L->block[0], L->block[1], L->block[2]);
  w->grid_dim = dim3(L->grid[0], L->grid[1], L->grid[2]);
  w->tiles = static_cast<Tile*>(calloc(static_cast<size_t>(w->nwarps) * 32, sizeof(Tile)));
  w->warps = static_cast<Warp*>(calloc(w->nwarps, sizeof(Warp)));
  w->ready = static_cast<unsigned*>(calloc(n, sizeof(unsigned)));
  w->bar_wait = static_cast<unsigned*>(calloc(n, sizeof(unsigned)));
  const size_t dyn = (L->dyn_bytes + 127) / 128 * 128;
  w->dyn_smem = static_cast<unsigned char*>(aligned_alloc(128, dyn ? dyn : 128));
  w->arena = acquire_arena(n, L->stack_bytes);
  if (!w->tiles || !w->warps || !w->ready || !w->bar_wait || !w->dyn_smem || !w->arena) return false;
  const unsigned bx = L->block[0], by = L->block[1];
  for (unsigned i = 0; i < n; ++i) {
    Tile& t = w->tiles[i];
    t.index = i;
    t.tid.x = i % bx;
    t.tid.y = (i / bx) % by;
    t.tid.z = i / (bx * by);
    t.lane = i & 31u;
    t.warp = i >> 5;
  }
  return true;
}

inline void worker_free(Worker* w) {
  free(w->tiles);
  free(w->warps);
  free(w->ready);
  free(w->bar_wait);
  free(w->dyn_smem);
  release_arena(w->arena);
  if (w->race != nullptr) w->race_free(w->race);
}

inline void worker_run(Launch* L) {
  Worker w;
  if (!worker_init(&w, L)) {
    record_failure(L, "out of memory: cannot allocate the tiles' fiber stacks or shared memory");
    worker_free(&w);
    return;
  }
  w.fpstate = current_fpstate();
  Worker* saved = t_worker;
  t_worker = &w;
  for (;;) {
    if (launch_failed(L)) break;
    const unsigned long long g = __atomic_fetch_add(&L->next_group, 1ull, __ATOMIC_RELAXED);
    if (g >= L->ngroups) break;
    start_group(&w, g);
    w.cur = &w.tiles[0];
    tsr_ctx_switch_v1(&w.main_sp, w.tiles[0].sp);
  }
  t_worker = saved;
  worker_free(&w);
}

inline void* worker_thread(void* arg) {
  worker_run(static_cast<Launch*>(arg));
  return nullptr;
}

}  // namespace detail

inline unsigned char* dynamic_smem() { return detail::fiber_worker()->dyn_smem; }

}  // namespace tsr

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
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a type wider than 8 bytes");
  unsigned long long u = 0;
  memcpy(&u, &v, sizeof(T));
  return u;
}
template <class T>
inline T from_bits(unsigned long long u) {
  T v;
  memcpy(&v, &u, sizeof(T));
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

// Failure hook: records the first failure of the launch as
//   "<kernel>[:<line>]: <message> (block (x, y, z), thread (x, y, z))"
// stops the launch and makes it return a nonzero status.  Never returns.
[[noreturn]] inline void tsr_host_fail(const char* kernel, int line, const char* message) {
  tsr::detail::Worker* w = tsr::detail::t_worker;
  if (!w || !w->cur) {
    fprintf(stderr, "tessera: %s:%d: %s (outside a kernel launch)\n", kernel ? kernel : "?", line, message);
    abort();
  }
  tsr::detail::fail_in_fiber(w, kernel, line, message);
}

[[noreturn]] inline void __trap() { tsr_host_fail(nullptr, 0, "__trap() called"); }
[[noreturn]] inline void __brkpt() { tsr_host_fail(nullptr, 0, "__brkpt() called"); }
// Lets the other tiles of the group run, so a spin-wait on a flag that
// another tile of the same group sets can make progress.
inline void __nanosleep(unsigned int) { tsr::detail::yield_current(); }


// --- Shared-memory race detector (check_bounds builds only) ---------------------
// Code compiled with check_bounds passes every shared-memory element access
// through tsr_race_read/tsr_race_write. Within one barrier interval of a group
// (an epoch), an element touched by two different tiles, at least one of them
// writing, is a data race; atomics do not go through here. The shadow keeps,
// per byte address, the epoch, the last writer and one reader (or "many").
namespace tsr { namespace detail {
struct RaceShadow {
  unsigned long long epoch;
  int writer, wline;
  int reader, rline;
};
using RaceMap = std::unordered_map<uintptr_t, RaceShadow>;

[[noreturn]] inline void race_fail(Worker* w, int line_a, int tile_a, int line_b, int tile_b, bool write_a,
                                   bool write_b) {
  char msg[256];
  snprintf(msg, sizeof msg,
           "shared-memory data race: tile %d %s it at line %d and tile %d %s it at line %d with no tbarrier() between",
           tile_a, write_a ? "writes" : "reads", line_a, tile_b, write_b ? "writes" : "reads", line_b);
  (void)w;
  tsr_host_fail(w->launch->kernel_name, line_b, msg);
}

inline void race_access(const void* p, bool write, int line) {
  Worker* w = fiber_worker();
  if (w->race == nullptr) {
    w->race = new RaceMap();
    w->race_free = [](void* m) { delete static_cast<RaceMap*>(m); };
  }
  RaceMap& map = *static_cast<RaceMap*>(w->race);
  const int me = static_cast<int>(fiber_tile()->index);
  RaceShadow& s = map[reinterpret_cast<uintptr_t>(p)];
  if (s.epoch != w->epoch) s = RaceShadow{w->epoch, -1, 0, -1, 0};
  if (s.writer >= 0 && s.writer != me) race_fail(w, s.wline, s.writer, line, me, true, write);
  if (write) {
    if (s.reader == -2 || (s.reader >= 0 && s.reader != me)) {
      race_fail(w, s.rline, s.reader == -2 ? -1 : s.reader, line, me, false, true);
    }
    s.writer = me;
    s.wline = line;
  } else if (s.reader == -1 || s.reader == me) {
    s.reader = me;
    s.rline = line;
  } else {
    s.reader = -2;  // several readers: only a later write can race
    s.rline = line;
  }
}
}}  // namespace tsr::detail

template <class T> inline T* tsr_race_read(T* p, int line) { tsr::detail::race_access(p, false, line); return p; }
template <class T> inline T* tsr_race_write(T* p, int line) { tsr::detail::race_access(p, true, line); return p; }

inline void __syncthreads() { tsr::detail::barrier_arrive(0); }
inline int __syncthreads_count(int pred) {
  return static_cast<int>(tsr::detail::barrier_arrive(pred) & 0xffffffffu);
}
inline int __syncthreads_and(int pred) {
  const unsigned long long r = tsr::detail::barrier_arrive(pred);
  return (r & 0xffffffffu) == (r >> 32);
}
inline int __syncthreads_or(int pred) { return (tsr::detail::barrier_arrive(pred) & 0xffffffffu) != 0; }

inline void __syncwarp(unsigned int mask = 0xffffffffu) { tsr::detail::warp_op(mask, tsr::detail::kWarpSync, 0, 0, 0); }
// The lanes of the warp that have not returned.  (On the GPU it is the lanes
// converged at this point; here lanes run ahead to their next warp operation,
// so lanes that have returned from the kernel are already gone.)
inline unsigned int __activemask() {
  const tsr::detail::Worker* w = tsr::detail::fiber_worker();
  return w->warps[tsr::detail::fiber_tile()->warp].live;
}
inline unsigned int __ballot_sync(unsigned int mask, int pred) {
  return static_cast<unsigned int>(tsr::detail::warp_op(mask, tsr::detail::kWarpVote, pred != 0, 0, 0));
}
inline int __any_sync(unsigned int mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned int mask, int pred) {
  const tsr::detail::Worker* w = tsr::detail::fiber_worker();
  const unsigned need = (mask | (1u << tsr::detail::fiber_tile()->lane)) & w->warps[tsr::detail::fiber_tile()->warp].live;
  return __ballot_sync(mask, pred) == need;
}
inline int __uni_sync(unsigned int mask, int pred) {
  const unsigned b = __ballot_sync(mask, pred);
  const tsr::detail::Worker* w = tsr::detail::fiber_worker();
  const unsigned need = (mask | (1u << tsr::detail::fiber_tile()->lane)) & w->warps[tsr::detail::fiber_tile()->warp].live;
  return b == 0 || b == need;
}

template <class T>
inline T __shfl_sync(unsigned int mask, T var, int src_lane, int width = warpSize) {
  using namespace tsr::detail;
  return from_bits<T>(warp_op(mask, kWarpIdx, to_bits(var), src_lane, shfl_c(width, false)));
}
template <class T>
inline T __shfl_up_sync(unsigned int mask, T var, unsigned int delta, int width = warpSize) {
  using namespace tsr::detail;
  return from_bits<T>(warp_op(mask, kWarpUp, to_bits(var), static_cast<int>(delta), shfl_c(width, true)));
}
template <class T>
inline T __shfl_down_sync(unsigned int mask, T var, unsigned int delta, int width = warpSize) {
  using namespace tsr::detail;
  return from_bits<T>(warp_op(mask, kWarpDown, to_bits(var), static_cast<int>(delta), shfl_c(width, false)));
}
template <class T>
inline T __shfl_xor_sync(unsigned int mask, T var, int lane_mask, int width = warpSize) {
  using namespace tsr::detail;
  return from_bits<T>(warp_op(mask, kWarpXor, to_bits(var), lane_mask, shfl_c(width, false)));
}

// ===========================================================================
// 9. Launch entry point
// ===========================================================================
// Per-kernel wrappers (generated by tessera.runtime.host_build's callers) look like
//
//   #include "kernel.cu"
//   extern "C" int tsr_launch_sum_reduce(const tsr_launch_config* cfg, void** args) {
//     const float* x = *(const float* const*)args[0]; ...
//     return tsr::launch(cfg, [=] { sum_reduce(x, out, n); });
//   }
//
// Status: 0 success; 1 the kernel failed (tsr_host_fail, __trap, deadlock,
// out of memory); 2 invalid launch configuration.  On failure error_buf holds
// the message (NUL-terminated, truncated to error_buf_len - 1 bytes).
// num_threads <= 0 means one worker per online CPU; fiber_stack_bytes 0
// means 64 KiB.  stdout is flushed before the launch returns.

// Default visibility: GCC gives a function the visibility of its parameter
// types, and the wrappers taking a tsr_launch_config* must be exported.
#pragma GCC visibility push(default)
extern "C" {
struct tsr_launch_config {
  unsigned grid[3];
  unsigned block[3];
  unsigned long long dynamic_smem_bytes;
  int num_threads;
  unsigned long long fiber_stack_bytes;
  char* error_buf;
  int error_buf_len;
};
}
#pragma GCC visibility pop

namespace tsr {
namespace detail {

inline int config_error(const tsr_launch_config* cfg, const char* msg) {
  if (cfg->error_buf && cfg->error_buf_len > 0) snprintf(cfg->error_buf, static_cast<size_t>(cfg->error_buf_len), "%s", msg);
  return 2;
}

inline int launch_erased(const tsr_launch_config* cfg, const char* kernel_name, void (*invoke)(void*), void* body) {
  if (cfg->error_buf && cfg->error_buf_len > 0) cfg->error_buf[0] = '\0';
  const unsigned* g = cfg->grid;
  const unsigned* b = cfg->block;
  char msg[256];
  if (!g[0] || !g[1] || !g[2] || !b[0] || !b[1] || !b[2] || g[1] > 65535 || g[2] > 65535 || b[0] > 1024 ||
      b[1] > 1024 || b[2] > 64 || static_cast<unsigned long long>(b[0]) * b[1] * b[2] > 1024) {
    snprintf(msg, sizeof msg,
             "invalid launch configuration: grid (%u, %u, %u), block (%u, %u, %u) "
             "(a block has at most 1024 threads, block.z <= 64, grid.y and grid.z <= 65535, none 0)",
             g[0], g[1], g[2], b[0], b[1], b[2]);
    return config_error(cfg, msg);
  }
  Launch L;
  memset(static_cast<void*>(&L), 0, sizeof L);
  L.invoke = invoke;
  L.body = body;
  L.kernel_name = kernel_name;
  for (int i = 0; i < 3; ++i) {
    L.grid[i] = g[i];
    L.block[i] = b[i];
  }
  L.ngroups = static_cast<unsigned long long>(g[0]) * g[1] * g[2];
  L.ntiles = b[0] * b[1] * b[2];
  L.dyn_bytes = static_cast<size_t>(cfg->dynamic_smem_bytes);
  const size_t page = page_size();
  size_t stack = cfg->fiber_stack_bytes ? static_cast<size_t>(cfg->fiber_stack_bytes) : kDefaultFiberStack;
  if (stack < 16 * 1024) stack = 16 * 1024;
  L.stack_bytes = (stack + page - 1) / page * page;
  L.err = cfg->error_buf;
  L.errlen = cfg->error_buf_len;

  long nthreads = cfg->num_threads > 0 ? cfg->num_threads : sysconf(_SC_NPROCESSORS_ONLN);
  if (nthreads < 1) nthreads = 1;
  if (static_cast<unsigned long long>(nthreads) > L.ngroups) nthreads = static_cast<long>(L.ngroups);
  if (nthreads > 256) nthreads = 256;

  pthread_t threads[256];
  long started = 0;
  for (long i = 1; i < nthreads; ++i) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1 << 20);
    if (pthread_create(&threads[started], &attr, &worker_thread, &L) == 0) ++started;
    pthread_attr_destroy(&attr);
  }
  worker_run(&L);  // the caller's thread is worker 0
  for (long i = 0; i < started; ++i) pthread_join(threads[i], nullptr);
  fflush(stdout);
  return launch_failed(&L) ? 1 : 0;
}

}  // namespace detail

// Run `kernel_body` (a callable that calls the __global__ function) once per
// thread of every block.  Returns 0 on success (see the status codes above).
template <class F>
inline int launch(const tsr_launch_config* cfg, F&& kernel_body, const char* kernel_name = nullptr) {
  using Fn = typename std::remove_reference<F>::type;
  return detail::launch_erased(
      cfg, kernel_name, [](void* p) { (*static_cast<Fn*>(p))(); },
      const_cast<void*>(static_cast<const void*>(__builtin_addressof(kernel_body))));
}

}  // namespace tsr

#pragma GCC visibility pop

#endif  // TESSERA_HOST
