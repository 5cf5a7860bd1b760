// host_abi.h -- the interface between a kernel library's two translation units: the kernel
// (wrapper.cpp with kernel.cu, compiled with the thin prelude tessera_host.h) and the engine
// (engine.cpp: fibers, scheduler, launches, signals; compiled once per compiler and linked
// into every kernel library).  Included by both; it uses no system header.
//
// Everything here has hidden visibility: calls between the two translation units are direct
// calls inside one library, and two kernel libraries loaded into one process never share or
// interpose each other's engine.  Only the tsr_launch_* entry points are exported.
#pragma once

#define TSR_EXPORT extern "C" __attribute__((visibility("default")))

extern "C" {
// The launch request a wrapper `tsr_launch_<kernel>(cfg, args)` receives.
struct tsr_launch_config {
  unsigned grid[3];
  unsigned block[3];
  unsigned long long dynamic_smem_bytes;
  int num_threads;                      // <= 0: one worker per online CPU
  unsigned long long fiber_stack_bytes;  // a lower bound on each tile's stack; 0: from the frames
  char* error_buf;                      // the failure message, NUL-terminated
  int error_buf_len;
  int flags;                            // kWatchSigint: Ctrl-C cancels the launch
  unsigned timeout_ms;                  // > 0: cancel the launch after this long
  unsigned sigint_seen;                 // kWatchSigint: the SIGINT count read before the call
};
}

// Status of a launch entry point: 0 success; 1 the kernel failed (tsr_host_fail, __trap,
// deadlock, stack overflow, out of memory); 2 invalid launch configuration; 3 cancelled by
// SIGINT (kWatchSigint); 4 cancelled after timeout_ms; 5 not started: kWatchSigint, but this
// library's SIGINT handler is no longer in front (tsr_sigint_watch_v1 again, then launch again).
// The caller's thread is worker 0.
namespace tsr {
enum : int { kLaunchOk = 0, kLaunchFailed = 1, kLaunchInvalid = 2, kLaunchInterrupted = 3, kLaunchTimedOut = 4,
             kLaunchNotWatched = 5 };
enum : int { kWatchSigint = 1 };  // tsr_launch_config::flags
}  // namespace tsr

#pragma GCC visibility push(hidden)

namespace tsr {
namespace detail {

enum : unsigned char { kTileReady, kTileBarrier, kTileWarp, kTileDone };
enum : unsigned char { kWarpSync, kWarpIdx, kWarpUp, kWarpDown, kWarpXor, kWarpVote };

struct alignas(64) Tile {
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

static_assert(sizeof(Tile) == 64, "a tile is one cache line");

struct Warp {
  unsigned live;         // lanes that exist and have not returned
  unsigned arrived;      // lanes waiting in a warp-synchronous operation
};

struct Launch;
struct StackArena;

// One cp.async that has not landed (host_async.h).  The source bytes are taken when it is
// issued (global memory does not change while a kernel runs) and land at a twait.
struct AsyncCopy {
  unsigned char data[16];  // the first `bytes` are landed; zero past the source's bytes
  unsigned char* dst;
  unsigned group;          // the tile's commit count when it was issued: its commit group
  int line;                // its .tsr line for the race detector, or 0
  unsigned short bytes, elem_bytes;
};

// A tile's pending copies, in issue order: a ring, its slice of the worker's arena, holding
// records head .. tail - 1 (free-running counters, taken modulo Worker::async_cap).
struct AsyncQueue {
  AsyncCopy* buf;
  unsigned head, tail;
  unsigned committed;      // commit groups the tile has closed
};

// The part of a launch's state that the inline scheduler (host_sync.h) reads.
struct LaunchFlags {
  int failed;     // atomic: the launch has failed; fibers stop at their next scheduling point
  int cancelled;  // atomic: 0, or why it was cancelled (host_signals.h)
};

struct Worker {
  Launch* launch;
  LaunchFlags* flags;         // &launch->flags
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
  AsyncQueue* async;          // per tile: its pending cp.async copies
  AsyncCopy* async_arena;     // their records, `async_cap` per tile (0 or a power of two)
  unsigned async_cap;
  // 1 while a fiber runs kernel code, 0 in the engine (and between groups): a cancelled
  // launch may abandon a fiber asynchronously only in kernel code, which holds no lock.
  volatile unsigned char in_kernel;
};

// A fiber never migrates between OS threads and the tile it runs never changes, so for code
// running in a fiber these are constant: `const` lets the compiler compute them once per
// kernel activation.  Only code that runs inside a fiber may call them.
__attribute__((const)) Worker* fiber_worker() noexcept;
__attribute__((const)) Tile* fiber_tile() noexcept;

[[noreturn]] void deadlock(Worker* w, Tile* t);
void race_access(const void* p, bool write, int line);
void race_atomic(const void* p, int line);  // an atomic update of a shared element
// cp.async's slow paths (host_async.h): room for more records in every tile's queue; the race
// detector's view of a copy when it is issued and when it lands (line > 0 only).
void async_grow(Worker* w);
void race_async_issue(const AsyncCopy& c);
void race_async_land(const AsyncCopy& c);
long long clock_ns();
// `regions`: the kernel loops over the block's threads itself (tsr::launch_regions).
int launch_run(const tsr_launch_config* cfg, const char* kernel_name, void (*invoke)(void*), void* body,
               int regions);

inline bool launch_failed(const Worker* w) { return __atomic_load_n(&w->flags->failed, __ATOMIC_RELAXED) != 0; }

}  // namespace detail
}  // namespace tsr

// tsr_ctx_switch_v1(save, to): save the current context on its stack, store the stack
// pointer in *save, and resume the context saved at `to` (host_fiber_switch.h).
extern "C" void tsr_ctx_switch_v1(void** save_sp, void* to_sp) noexcept;

namespace tsr {
namespace detail {
// Leave the current fiber for good: back to the worker, which sees the flag.
[[noreturn]] inline void abandon_fiber(Worker* w, Tile* t) {
  w->in_kernel = 0;
  tsr_ctx_switch_v1(&t->sp, w->main_sp);
  __builtin_unreachable();
}
}  // namespace detail
}  // namespace tsr

// Records the first failure of the launch as
//   "<kernel>[:<line>]: <message> (block (x, y, z), thread (x, y, z))"
// stops the launch and makes it return a nonzero status.  Never returns.
[[noreturn]] void tsr_host_fail(const char* kernel, int line, const char* message);
// The kernel's printf: formats without taking a lock, then writes to stdout.
extern "C" int tsr_rt_printf(const char* format, ...) __attribute__((format(printf, 1, 2)));

#pragma GCC visibility pop

// The C library's snprintf (used by the device header), declared as <stdio.h> does.
extern "C" int snprintf(char* buf, size_t size, const char* format, ...) noexcept
    __attribute__((format(printf, 3, 4)));
