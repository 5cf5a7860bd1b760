// host_engine.h -- part of the CPU backend's prelude: the execution engine: launch state, fiber stacks, the per-group scheduler.
// Included only by tessera_host.h (in order); see there for the design.
#pragma once

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

}  // namespace detail
}  // namespace tsr
