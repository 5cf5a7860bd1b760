// host_half.h -- part of the CPU backend's prelude: __half and __nv_bfloat16 with bit-exact rounding.
// Included only by tessera_host.h (in order); see there for the design.
#pragma once

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

inline uint32_t f32_bits(float f) { uint32_t u; __builtin_memcpy(&u, &f, 4); return u; }
inline float bits_f32(uint32_t u) { float f; __builtin_memcpy(&f, &u, 4); return f; }
inline uint64_t f64_bits(double d) { uint64_t u; __builtin_memcpy(&u, &d, 8); return u; }
inline double bits_f64(uint64_t u) { double d; __builtin_memcpy(&d, &u, 8); return d; }

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
  if (static_cast<double>(f) == d || isnan(d) || isinf(f)) return f;
  uint32_t u = f32_bits(f);
  if (fabs(static_cast<double>(f)) > fabs(d)) --u;  // truncate toward zero
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
  const double r = ldexp(static_cast<double>(a), shift);
  return neg ? -r : r;
}
inline double u64_to_f64_odd(unsigned long long a) {
  int shift = 0;
  bool sticky = false;
  while (a >> 53) { sticky |= (a & 1u); a >>= 1; ++shift; }
  if (sticky) a |= 1u;
  return ldexp(static_cast<double>(a), shift);
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
static_assert(__is_trivial(__half) && __is_trivial(__nv_bfloat16), "trivial");

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
inline __nv_bfloat16 __ull2bfloat16_rn(unsigned long long v) { return __nv_bfloat16(v); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
inline short __bfloat16_as_short(__nv_bfloat16 b) { return static_cast<short>(b.__x); }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16(__nv_bfloat16_raw{u}); }
inline __nv_bfloat16 __short_as_bfloat16(short s) {
  return __nv_bfloat16(__nv_bfloat16_raw{static_cast<unsigned short>(s)});
}

// Pairs, for the vector path of map kernels, which computes f16/bf16 + - * two at a time with the
// GPU's correctly rounded add.rn/sub.rn/mul.rn .f16x2/.bf16x2. Here each half is computed in float
// and rounded once: the same result (float has at least 2p + 2 bits of either format's p).
struct alignas(4) __half2 { __half x, y; };
struct alignas(4) __nv_bfloat162 { __nv_bfloat16 x, y; };
#define TSR_PAIR_OPS(P, H, SPLAT)                                                               \
  inline P SPLAT(float f) { P r; r.x = H(f); r.y = r.x; return r; }                             \
  inline P __hadd2_rn(P a, P b) { P r; r.x = H(float(a.x) + float(b.x)); r.y = H(float(a.y) + float(b.y)); return r; } \
  inline P __hsub2_rn(P a, P b) { P r; r.x = H(float(a.x) - float(b.x)); r.y = H(float(a.y) - float(b.y)); return r; } \
  inline P __hmul2_rn(P a, P b) { P r; r.x = H(float(a.x) * float(b.x)); r.y = H(float(a.y) * float(b.y)); return r; } \
  inline P __hneg2(P a) { P r; r.x = H(-float(a.x)); r.y = H(-float(a.y)); return r; }
TSR_PAIR_OPS(__half2, __half, __float2half2_rn)
TSR_PAIR_OPS(__nv_bfloat162, __nv_bfloat16, __float2bfloat162_rn)
#undef TSR_PAIR_OPS

namespace tsr {
namespace detail {
// Saturating float -> int conversions as the GPU's cvt.*i.s32.f32 do them:
// NaN gives 0, out-of-range values clamp.
// The range of an integer type (what std::numeric_limits gives, without <limits>).
template <class I>
struct int_range {
  static constexpr bool is_signed = static_cast<I>(-1) < static_cast<I>(0);
  static constexpr I max = is_signed ? static_cast<I>(~0ull >> (65 - 8 * sizeof(I))) : static_cast<I>(~0ull);
  static constexpr I min = is_signed ? static_cast<I>(-max - 1) : static_cast<I>(0);
};
template <class I>
inline I sat_cvt(double v) {
  if (isnan(v)) return 0;
  constexpr double lo = static_cast<double>(int_range<I>::min);
  constexpr double hi = static_cast<double>(int_range<I>::max);
  if (v <= lo) return int_range<I>::min;
  if (v >= hi) return int_range<I>::max;
  return static_cast<I>(v);
}
}  // namespace detail
}  // namespace tsr

inline int __half2int_rz(__half h) { return tsr::detail::sat_cvt<int>(truncf(float(h))); }
inline int __half2int_rn(__half h) { return tsr::detail::sat_cvt<int>(nearbyintf(float(h))); }
inline int __bfloat162int_rz(__nv_bfloat16 b) { return tsr::detail::sat_cvt<int>(truncf(float(b))); }
inline int __bfloat162int_rn(__nv_bfloat16 b) { return tsr::detail::sat_cvt<int>(nearbyintf(float(b))); }

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
      s = nextafter(s, err > 0 ? __builtin_inf() : -__builtin_inf());                                   \
    return H(s);                                                                               \
  }
#define __half_raw_INF 0x7c00u
#define __nv_bfloat16_raw_INF 0x7f80u
TSR_HALF_OPS(__half, __half_raw)
TSR_HALF_OPS(__nv_bfloat16, __nv_bfloat16_raw)
#undef __half_raw_INF
#undef __nv_bfloat16_raw_INF
#undef TSR_HALF_OPS
