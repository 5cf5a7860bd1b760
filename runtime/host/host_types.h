// host_types.h -- part of the CPU backend's prelude: fixed-width integers, built-in vector
// types, uint3 and dim3.  Included by tessera_host.h (the kernel translation unit) and by
// engine.cpp; it uses no system header, and its typedefs spell the same types as the C
// library's, so both translation units agree.
#pragma once

typedef __SIZE_TYPE__ size_t;
typedef __PTRDIFF_TYPE__ ptrdiff_t;
typedef __INTPTR_TYPE__ intptr_t;
typedef __UINTPTR_TYPE__ uintptr_t;
typedef __INT8_TYPE__ int8_t;
typedef __INT16_TYPE__ int16_t;
typedef __INT32_TYPE__ int32_t;
typedef __INT64_TYPE__ int64_t;
typedef __UINT8_TYPE__ uint8_t;
typedef __UINT16_TYPE__ uint16_t;
typedef __UINT32_TYPE__ uint32_t;
typedef __UINT64_TYPE__ uint64_t;

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
