// host_libm.h -- part of the CPU backend's prelude: the C math library, declared by hand.
// Included only by tessera_host.h (in order); see there for the design.
//
// The kernel translation unit includes no system header, so that no name of the C library
// (a macro such as EOF or M_PI, a function such as time or index) can collide with a user's
// name.  The math functions CUDA shares with C are declared here exactly as <math.h> declares
// them (extern "C", noexcept), so the compiler still treats them as builtins; the float
// overloads of the double names are C++ overloads, as CUDA (and <cmath>) have them.  Every
// name declared here is in the compiler's reserved set (tessera/transpile/names.py).
#pragma once

// Other arithmetic arguments promote as <cmath> promotes them: an integer to double, and a
// mixed float/double pair to double.
namespace tsr {
namespace detail {
template <class T> struct fp_arg { typedef double type; };  // integers
template <> struct fp_arg<float> { typedef float type; };
template <class A, class B> struct fp_args {
  typedef decltype(typename fp_arg<A>::type() + typename fp_arg<B>::type()) type;
};
template <bool, class T> struct enable_if {};
template <class T> struct enable_if<true, T> { typedef T type; };
template <class T> struct is_int { static constexpr bool value = false; };
#define TSR_IS_INT(T) template <> struct is_int<T> { static constexpr bool value = true; };
TSR_IS_INT(bool) TSR_IS_INT(char) TSR_IS_INT(signed char) TSR_IS_INT(unsigned char) TSR_IS_INT(short)
TSR_IS_INT(unsigned short) TSR_IS_INT(int) TSR_IS_INT(unsigned) TSR_IS_INT(long) TSR_IS_INT(unsigned long)
TSR_IS_INT(long long) TSR_IS_INT(unsigned long long)
#undef TSR_IS_INT
template <class A> struct is_num { static constexpr bool value = is_int<A>::value; };
template <> struct is_num<float> { static constexpr bool value = true; };
template <> struct is_num<double> { static constexpr bool value = true; };
}  // namespace detail
}  // namespace tsr

#define TSR_LIBM1(F)                                                                        \
  extern "C" double F(double) noexcept;                                                     \
  extern "C" float F##f(float) noexcept;                                                    \
  inline float F(float x) noexcept { return F##f(x); }                                      \
  template <class I>                                                                        \
  inline typename tsr::detail::enable_if<tsr::detail::is_int<I>::value, double>::type F(I x) noexcept { \
    return F(static_cast<double>(x));                                                       \
  }
#define TSR_LIBM2(F)                                                                        \
  extern "C" double F(double, double) noexcept;                                             \
  extern "C" float F##f(float, float) noexcept;                                             \
  inline float F(float x, float y) noexcept { return F##f(x, y); }                          \
  template <class A, class B>                                                               \
  inline typename tsr::detail::enable_if<tsr::detail::is_num<A>::value && tsr::detail::is_num<B>::value, \
                                         typename tsr::detail::fp_args<A, B>::type>::type   \
  F(A x, B y) noexcept {                                                                    \
    typedef typename tsr::detail::fp_args<A, B>::type T;                                    \
    return F(static_cast<T>(x), static_cast<T>(y));                                         \
  }
#define TSR_LIBM_ARG(F, A)                           \
  extern "C" double F(double, A) noexcept;           \
  extern "C" float F##f(float, A) noexcept;          \
  inline float F(float x, A a) noexcept { return F##f(x, a); }
#define TSR_LIBM_TO(R, F)                            \
  extern "C" R F(double) noexcept;                   \
  extern "C" R F##f(float) noexcept;                 \
  inline R F(float x) noexcept { return F##f(x); }

TSR_LIBM1(acos) TSR_LIBM1(asin) TSR_LIBM1(atan) TSR_LIBM1(cos) TSR_LIBM1(sin) TSR_LIBM1(tan)
TSR_LIBM1(acosh) TSR_LIBM1(asinh) TSR_LIBM1(atanh) TSR_LIBM1(cosh) TSR_LIBM1(sinh)
TSR_LIBM1(exp) TSR_LIBM1(exp2) TSR_LIBM1(exp10) TSR_LIBM1(expm1) TSR_LIBM1(log) TSR_LIBM1(log10)
TSR_LIBM1(log1p) TSR_LIBM1(log2) TSR_LIBM1(logb) TSR_LIBM1(cbrt) TSR_LIBM1(fabs) TSR_LIBM1(sqrt)
TSR_LIBM1(erf) TSR_LIBM1(erfc) TSR_LIBM1(lgamma) TSR_LIBM1(tgamma) TSR_LIBM1(ceil) TSR_LIBM1(floor)
TSR_LIBM1(nearbyint) TSR_LIBM1(rint) TSR_LIBM1(round) TSR_LIBM1(trunc) TSR_LIBM1(j0) TSR_LIBM1(j1)
TSR_LIBM1(y0) TSR_LIBM1(y1)
TSR_LIBM2(atan2) TSR_LIBM2(hypot) TSR_LIBM2(pow) TSR_LIBM2(fmod) TSR_LIBM2(remainder)
TSR_LIBM2(copysign) TSR_LIBM2(nextafter) TSR_LIBM2(fdim) TSR_LIBM2(fmax) TSR_LIBM2(fmin)
TSR_LIBM_ARG(ldexp, int) TSR_LIBM_ARG(scalbn, int) TSR_LIBM_ARG(scalbln, long)
TSR_LIBM_TO(int, ilogb) TSR_LIBM_TO(long, lrint) TSR_LIBM_TO(long long, llrint) TSR_LIBM_TO(long, lround)
TSR_LIBM_TO(long long, llround)

// tanhf is the prelude's own (the C library's is a call the host compiler cannot vectorize, and
// GELU-like map kernels spend their time in it): straight-line code with no branch, so that the
// loops that call it vectorize, in region and fiber mode alike (the same operations on every
// lane: the same results in both). It is within 0.5003 ulp of tanh over every float (checked
// exhaustively against the C library's double tanh), against CUDA's 2 ulp. tanh(x) = e / (e + 2)
// with e = expm1(2|x|) in double: 2|x| = k ln2 + r (|r| <= ln2 / 2; |x| clamped to 10, where tanh
// rounds to 1), expm1(r) by its Taylor series to r^9, e = 2^k (expm1(r) + 1) - 1, the sign and a
// NaN put back from the argument's bits.
namespace tsr {
namespace detail {
inline float tanh_f32(float x) noexcept {
  typedef unsigned long long u64;
  const unsigned xb = __builtin_bit_cast(unsigned, x);
  const unsigned ab = xb & 0x7fffffffu;
  const unsigned nan = -static_cast<unsigned>(ab > 0x7f800000u);  // all ones for a NaN
  const unsigned cb = ab < 0x41200000u ? ab : 0x41200000u;          // min(|x|, 10.0f), 10 for a NaN
  const double t = 2.0 * static_cast<double>(__builtin_bit_cast(float, cb));
  const double shift = 0x1.8p52;  // t / ln2 + shift: k in the low bits, rounded to nearest
  const double ks = t * 1.4426950408889634 + shift;
  const double kd = ks - shift;
  const double r = (t - kd * 0.6931471803691238) - kd * 1.9082149292705877e-10;  // ln2 in two parts
  double p = 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  const double em1_r = r + r * r * p;
  const u64 k = __builtin_bit_cast(u64, ks) - __builtin_bit_cast(u64, shift);
  const double scale = __builtin_bit_cast(double, (k + 1023) << 52);  // 2^k, 0 <= k <= 29
  const double em1 = scale * em1_r + (scale - 1.0);
  const unsigned out = __builtin_bit_cast(unsigned, static_cast<float>(em1 / (em1 + 2.0))) | (xb & 0x80000000u);
  return __builtin_bit_cast(float, (out & ~nan) | (xb & nan));  // masks, not a select: no branch
}
}  // namespace detail
}  // namespace tsr

extern "C" double tanh(double) noexcept;
inline float tanhf(float x) noexcept { return tsr::detail::tanh_f32(x); }
inline float tanh(float x) noexcept { return tsr::detail::tanh_f32(x); }
template <class I>
inline typename tsr::detail::enable_if<tsr::detail::is_int<I>::value, double>::type tanh(I x) noexcept {
  return tanh(static_cast<double>(x));
}

#undef TSR_LIBM_TO
#undef TSR_LIBM_ARG
#undef TSR_LIBM2
#undef TSR_LIBM1

extern "C" double fma(double, double, double) noexcept;
extern "C" float fmaf(float, float, float) noexcept;
inline float fma(float a, float b, float c) noexcept { return fmaf(a, b, c); }
extern "C" double frexp(double, int*) noexcept;
extern "C" float frexpf(float, int*) noexcept;
inline float frexp(float x, int* e) noexcept { return frexpf(x, e); }
extern "C" double modf(double, double*) noexcept;
extern "C" float modff(float, float*) noexcept;
inline float modf(float x, float* i) noexcept { return modff(x, i); }
extern "C" double remquo(double, double, int*) noexcept;
extern "C" float remquof(float, float, int*) noexcept;
inline float remquo(float x, float y, int* q) noexcept { return remquof(x, y, q); }
extern "C" double jn(int, double) noexcept;
extern "C" float jnf(int, float) noexcept;
extern "C" double yn(int, double) noexcept;
extern "C" float ynf(int, float) noexcept;
extern "C" double nan(const char*) noexcept;
extern "C" float nanf(const char*) noexcept;
inline void sincos(double x, double* s, double* c) noexcept { *s = sin(x); *c = cos(x); }
inline void sincosf(float x, float* s, float* c) noexcept { *s = sinf(x); *c = cosf(x); }
inline void sincos(float x, float* s, float* c) noexcept { sincosf(x, s, c); }

// Absolute values and classification (macros in C, overloads in C++ and CUDA).
// The most negative value wraps to itself, as on the GPU (negated in unsigned arithmetic).
inline int abs(int v) noexcept { return v < 0 ? static_cast<int>(0u - static_cast<unsigned>(v)) : v; }
inline long labs(long v) noexcept { return v < 0 ? static_cast<long>(0ul - static_cast<unsigned long>(v)) : v; }
inline long long llabs(long long v) noexcept {
  return v < 0 ? static_cast<long long>(0ull - static_cast<unsigned long long>(v)) : v;
}
inline long abs(long v) noexcept { return labs(v); }
inline long long abs(long long v) noexcept { return llabs(v); }
inline float abs(float v) noexcept { return fabsf(v); }
inline double abs(double v) noexcept { return fabs(v); }
inline bool isnan(float v) noexcept { return __builtin_isnan(v); }
inline bool isnan(double v) noexcept { return __builtin_isnan(v); }
inline bool isinf(float v) noexcept { return __builtin_isinf(v); }
inline bool isinf(double v) noexcept { return __builtin_isinf(v); }
inline bool isfinite(float v) noexcept { return __builtin_isfinite(v); }
inline bool isfinite(double v) noexcept { return __builtin_isfinite(v); }
inline bool signbit(float v) noexcept { return __builtin_signbit(v); }
inline bool signbit(double v) noexcept { return __builtin_signbit(v); }
