// tessera_host.h -- the CPU backend's prelude for the kernel translation unit.
//
// The CPU backend compiles the very CUDA C text that Tessera emits for NVRTC, with this
// header force-included (see tessera.runtime.host.build):
//
//   c++ -std=c++17 -O2 -fPIC -fvisibility=hidden -DTESSERA_HOST -include tessera_host.h
//       -c wrapper.cpp                      (wrapper.cpp does #include "kernel.cu")
//   c++ -shared wrapper.o engine.o frames.s (engine.o: engine.cpp, built once and cached)
//
// It emulates the subset of CUDA that emitted code uses and runs kernels with GPU semantics:
// each thread block ("group") runs all of its threads ("tiles") as user-space fibers on one
// OS thread, so `__shared__` is `thread_local`, `__syncthreads()` and warp-synchronous
// operations are scheduling points, and groups run in parallel on several OS threads, so
// atomics are real atomics.  The fibers, the scheduler, launches and signal handling live in
// engine.cpp.
//
// This translation unit includes no system header: nothing of the C or C++ library (EOF,
// M_PI, stdout, errno, time(), index(), std::...) is in scope of the emitted code, so no user
// name can collide with it.  The names this prelude does declare are CUDA's own, or start
// with `tsr`, or contain `__`; the compiler renames user names that would clash with them
// (tessera/transpile/names.py).  The kernel functions have hidden visibility: only the
// tsr_launch_* entry points leave the library.
//
// Sections:
//    1. Qualifier macros
//    2. Fixed-width integers, built-in vector types, uint3 and dim3   (host_types.h)
//    3. __half and __nv_bfloat16 (bit-exact round-to-nearest-even)     (host_half.h)
//    4. The C math library and CUDA's math and integer intrinsics     (host_libm.h, host_math.h)
//    5. Atomics and memory fences                                      (host_atomics.h)
//    6. The engine's interface                                          (host_abi.h)
//    7. The scheduler's hot path: barriers, warp operations            (host_sync.h)
//    8. CUDA built-ins bound to the engine (threadIdx, barriers, ...)  (host_builtins.h)
//    9. Asynchronous copies into shared memory (cp.async)              (host_async.h)
//   10. Bulk tensor copies and mbarriers (sm_90a)                      (host_tma.h)
//   11. tsr::launch                                                     (host_launch.h)

#pragma once

#ifndef TESSERA_HOST
#error "tessera_host.h is the CPU backend's prelude: compile with -DTESSERA_HOST"
#else

// ===========================================================================
// 1. Qualifier macros
// ===========================================================================

#define __global__
#define __device__
#define __host__
// A hint only: GCC refuses always_inline on a recursive function, which NVRTC accepts (.tsr
// device functions may recurse); -O2 inlines the small helpers anyway.
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
// Before a region-mode kernel's name (transpile/cpu/regions.py): on x86-64, the kernel compiled twice,
// for AVX2 (8 floats or 4 doubles a vector, which its tile loops and a map kernel's steps vectorize to)
// and for the baseline (SSE2), and the first where the CPU has AVX2, picked once when the library
// loads (an ifunc): the same library and the same results on every machine, since both clones
// perform the same IEEE operations in the same order (no FMA: the target adds none and the kernel
// unit builds with -ffp-contract=off; no fast-math, so no reduction is reordered).
// GCC gives the symbols of the dispatch (the kernel's name, an ifunc, and its resolver) default
// visibility whatever -fvisibility or a visibility attribute says (GCC 12), which would export
// them: the first statement of a cloned kernel, TSR_HIDE_CLONES(name), hides both. (Clang names the
// resolver otherwise: it gets no clones.)
// Clones need ifunc, which glibc has and musl (Alpine) has not: the test is a header only glibc
// ships (__has_include includes nothing).
#if defined(__x86_64__) && defined(__ELF__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 6 && \
    defined(__has_include)
#if __has_include(<gnu/libc-version.h>)
#define TSR_CLONES_OK 1
#endif
#endif
#if defined(TSR_CLONES_OK)
#define TSR_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#define TSR_HIDE_CLONES(name) __asm__(".hidden " #name "\n\t.hidden " #name ".resolver")
#else
#define TSR_VECTOR_CLONES
#define TSR_HIDE_CLONES(name) static_cast<void>(0)
#endif
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
// launch's dynamic_smem_bytes (aligned to 1024 bytes, as the swizzled arrays of TSR_DYNAMIC_SMEM_1024 need).
#define TSR_DYNAMIC_SMEM(name) unsigned char* const name = ::tsr::detail::fiber_worker()->dyn_smem
#define TSR_DYNAMIC_SMEM_1024(name) TSR_DYNAMIC_SMEM(name)

static constexpr int warpSize = 32;

#include "host_types.h"
#include "host_libm.h"
#include "host_half.h"
#include "host_math.h"
#include "host_atomics.h"
#include "host_abi.h"
#include "host_sync.h"
#include "host_builtins.h"
#include "host_group_reduce.h"
#include "host_async.h"
#include "host_tma.h"
#include "host_launch.h"

#endif  // TESSERA_HOST
