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

#include "host_types.h"
#include "host_half.h"
#include "host_math.h"
#include "host_atomics.h"
#include "host_fiber_switch.h"
#include "host_engine.h"
#include "host_scheduler.h"
#include "host_builtins.h"
#include "host_launch.h"

#pragma GCC visibility pop

#endif  // TESSERA_HOST
