// host_math.h -- part of the CPU backend's prelude: math and integer intrinsics CUDA has and the host lacks.
// Included only by tessera_host.h (in order); see there for the design.
#pragma once

// ===========================================================================
// 4. Math and integer intrinsics CUDA has and the host lacks
// ===========================================================================
// The C math functions are declared in host_libm.h.  Fast approximate intrinsics (__expf,
// __fdividef, ...) map to the accurate ones.

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
// In double, then rounded: sinpi(x) is not sin(pi * x) computed in float.
inline double sinpi(double x) { return sin(3.141592653589793238 * x); }
inline double cospi(double x) { return cos(3.141592653589793238 * x); }
inline float sinpif(float x) { return static_cast<float>(sinpi(static_cast<double>(x))); }
inline float cospif(float x) { return static_cast<float>(cospi(static_cast<double>(x))); }
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
inline int __float_as_int(float f) { int i; __builtin_memcpy(&i, &f, 4); return i; }
inline unsigned int __float_as_uint(float f) { unsigned int i; __builtin_memcpy(&i, &f, 4); return i; }
inline float __int_as_float(int i) { float f; __builtin_memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned int i) { float f; __builtin_memcpy(&f, &i, 4); return f; }
inline long long __double_as_longlong(double d) { long long i; __builtin_memcpy(&i, &d, 8); return i; }
inline double __longlong_as_double(long long i) { double d; __builtin_memcpy(&d, &i, 8); return d; }
inline int __double2hiint(double d) { return static_cast<int>(tsr::detail::f64_bits(d) >> 32); }
inline int __double2loint(double d) { return static_cast<int>(tsr::detail::f64_bits(d) & 0xffffffffu); }
inline double __hiloint2double(int hi, int lo) {
  return tsr::detail::bits_f64((static_cast<uint64_t>(static_cast<uint32_t>(hi)) << 32) | static_cast<uint32_t>(lo));
}

// Conversions with an explicit rounding mode; out-of-range values saturate
// and NaN gives 0, as the GPU's cvt does.
#define TSR_CVT(NAME, FROM, TO, ROUND) \
  inline TO NAME(FROM v) { return tsr::detail::sat_cvt<TO>(ROUND(static_cast<double>(v))); }
TSR_CVT(__float2int_rn, float, int, nearbyint)
TSR_CVT(__float2int_rz, float, int, trunc)
TSR_CVT(__float2int_ru, float, int, ceil)
TSR_CVT(__float2int_rd, float, int, floor)
TSR_CVT(__float2uint_rn, float, unsigned int, nearbyint)
TSR_CVT(__float2uint_rz, float, unsigned int, trunc)
TSR_CVT(__float2uint_ru, float, unsigned int, ceil)
TSR_CVT(__float2uint_rd, float, unsigned int, floor)
TSR_CVT(__float2ll_rn, float, long long, nearbyint)
TSR_CVT(__float2ll_rz, float, long long, trunc)
TSR_CVT(__float2ull_rz, float, unsigned long long, trunc)
TSR_CVT(__double2int_rn, double, int, nearbyint)
TSR_CVT(__double2int_rz, double, int, trunc)
TSR_CVT(__double2uint_rz, double, unsigned int, trunc)
TSR_CVT(__double2ll_rn, double, long long, nearbyint)
TSR_CVT(__double2ll_rz, double, long long, trunc)
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
  __builtin_memcpy(dst, src, size - zfill);
  if (zfill) __builtin_memset(static_cast<unsigned char*>(dst) + (size - zfill), 0, zfill);
}
inline void __pipeline_commit() {}
inline void __pipeline_wait_prior(size_t) {}
