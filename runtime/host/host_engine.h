// host_engine.h -- part of the CPU backend's engine (included only by engine.cpp): launch
// state, fiber stacks and failures.
//
// A launch claims groups from an atomic counter on `num_threads` worker threads.  A worker
// runs one group at a time: it plants a fiber frame for each tile and switches into tile 0.
// From then on tiles switch *directly* to one another: a tile that blocks (at a barrier, a
// warp-synchronous operation or __nanosleep) pops the next tile from the group's FIFO ready
// queue and switches to it, so each barrier costs one switch per tile.  When the last live
// tile arrives at a barrier, it moves every waiter to the ready queue in arrival order and
// carries on; the others resume round robin.  Tiles that returned from the kernel no longer
// take part in barriers or warp operations (as on sm_70+).  If a tile blocks while the ready
// queue is empty the group can never progress: that is a deadlock and fails the launch.  The
// last tile to finish switches back to the worker's own context, which starts the next group.
//
// A failure (tsr_host_fail, __trap, deadlock, stack overflow, cancellation) records the first
// message of the launch and raises a flag; the failing fiber switches back to its worker and
// is abandoned, every other fiber that reaches a scheduling point does the same, and workers
// start no more groups.
#pragma once

namespace tsr {
namespace detail {

constexpr size_t kDefaultFiberStack = 64 * 1024;
// Room on every fiber stack above the kernel's own frames, for the engine and the C library
// (printf, snprintf) that kernel code calls.
constexpr size_t kStackMargin = 32 * 1024;
// Below each stack: at least the guard size -fstack-clash-protection assumes (one 4 KiB page
// on x86-64, 64 KiB on aarch64), so that no frame can step over it.
#if defined(__aarch64__)
constexpr size_t kGuardBytes = 64 * 1024;
#else
constexpr size_t kGuardBytes = 4 * 1024;
#endif
constexpr unsigned kMaxWorkers = 256;
constexpr int kErrLen = 1024;

struct Launch {
  void (*invoke)(void*);
  void* body;                     // the wrapper's callable
  const char* kernel_name;
  unsigned grid[3], block[3];
  unsigned long long ngroups;
  unsigned ntiles;
  bool regions;                   // one fiber per group, which loops over the tiles (launch_regions)
  size_t dyn_bytes;
  size_t stack_bytes;
  // Each on a cache line of its own: every worker takes its groups from `next_group`, and reads
  // `flags` at every scheduling point (launch_failed), so a claim must not evict the flags.
  alignas(64) unsigned long long next_group;  // atomic
  alignas(64) LaunchFlags flags;
  alignas(64) char err[kErrLen];
  pthread_t caller;               // worker 0
  unsigned nthreads;              // atomic: the other workers started so far
  pthread_t threads[kMaxWorkers];
  // The caller's own (host_pool.h): the threads it may still start, whether they are the pool's
  // or its own, and when it starts them if it put that off (0: it did not, or it has).
  unsigned helpers;
  bool pooled, own;
  long long wake_at;
  // Its own threads (start_workers): how many have not left their groups yet, which the caller
  // waits for on `own_done`; it joins them only once nothing can cancel the launch any more.
  unsigned own_running;
  pthread_mutex_t own_mu;
  pthread_cond_t own_done;
  // The timeout watchdog waits on `done` until `finished` or the deadline.
  pthread_mutex_t mu;
  pthread_cond_t done;
  bool finished;
  unsigned timeout_ms;
};

// Slot 0 of an arena is the workers' alternate signal stack; slot i + 1 is tile i's stack.
// Every slot has a PROT_NONE guard below it.
struct StackArena {
  unsigned char* base;
  size_t map_bytes, slot_bytes, stack_bytes;
  unsigned count;  // tile stacks
  StackArena* next;
  unsigned char* slot(unsigned s) const { return base + static_cast<size_t>(s) * slot_bytes; }
  // Stack tops are staggered by 64 bytes per tile (up to 4 KiB) so that the
  // tiles' hot frames do not all fall into the same L1 cache set.
  unsigned char* top(unsigned i) const { return slot(i + 2) - static_cast<size_t>(i % 64u) * 64u; }
  unsigned char* guard(unsigned i) const { return slot(i + 1); }
  unsigned char* bottom(unsigned i) const { return slot(i + 1) + kGuardBytes; }
};

// local-dynamic: the variable is in this library (hidden), so no dynamic symbol is needed to find
// it; the general-dynamic model -Og picks would leave one in the library's table with gold.
extern thread_local Worker* t_worker __attribute__((tls_model("local-dynamic")));

// --- Fiber stacks ----------------------------------------------------------
// Arenas are pooled per library and reused across launches, so the mmap/mprotect system
// calls are paid once, not per group or launch.

struct ArenaPool {
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  StackArena* free_list = nullptr;
  unsigned nfree = 0;
};
inline ArenaPool& arena_pool() {
  static ArenaPool pool;  // never destroyed: a worker may still hold an arena at exit
  return pool;
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
  // An odd number of pages per slot: stacks a power of two apart would put every tile's hot
  // frames into the same few cache sets.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_t slot = kGuardBytes + stack_bytes;
  if ((slot / page) % 2 == 0) slot += page;
  const size_t bytes = slot * (count + 1);
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  for (unsigned i = 0; i <= count; ++i) mprotect(static_cast<unsigned char*>(base) + i * slot, kGuardBytes, PROT_NONE);
  StackArena* a = static_cast<StackArena*>(malloc(sizeof(StackArena)));  // not `new`: no libstdc++
  if (!a) {
    munmap(base, bytes);
    return nullptr;
  }
  *a = StackArena{static_cast<unsigned char*>(base), bytes, slot, stack_bytes, count, nullptr};
  return a;
}

inline long online_cpus() {
  // Reads /sys once. Not a function-local static with a dynamic initializer, whose guard is in
  // libstdc++: threads that race here each store the same value.
  static long n = 0;
  long v = __atomic_load_n(&n, __ATOMIC_RELAXED);
  if (v == 0) {
    v = sysconf(_SC_NPROCESSORS_ONLN);
    __atomic_store_n(&n, v, __ATOMIC_RELAXED);
  }
  return v;
}

// Unmaps the pooled stacks (a later launch maps new ones).  Every arena slot has its own guard,
// so an arena of n tiles is 2n + 2 memory mappings; the runtime trims the libraries it has not
// launched recently so that a process with many kernel libraries stays under the kernel's limit
// on mappings (vm.max_map_count).
inline void trim_arenas() {
  ArenaPool& pool = arena_pool();
  pthread_mutex_lock(&pool.mu);
  StackArena* list = pool.free_list;
  pool.free_list = nullptr;
  pool.nfree = 0;
  pthread_mutex_unlock(&pool.mu);
  while (list) {
    StackArena* next = list->next;
    munmap(list->base, list->map_bytes);
    free(list);
    list = next;
  }
}

inline void release_arena(StackArena* a) {
  if (!a) return;
  ArenaPool& pool = arena_pool();
  const long ncpu = online_cpus();
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
    free(a);
  }
}

// --- Failure ---------------------------------------------------------------

inline bool launch_failed(const Launch* L) { return __atomic_load_n(&L->flags.failed, __ATOMIC_RELAXED) != 0; }

// Record the first failure of the launch; later ones are dropped.
inline void record_failure(Launch* L, const char* msg) {
  int expected = 0;
  if (!__atomic_compare_exchange_n(&L->flags.failed, &expected, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) return;
  const size_t n = strnlen(msg, kErrLen - 1);
  memcpy(L->err, msg, n);
  L->err[n] = '\0';
}

[[noreturn]] inline void fail_in_fiber(Worker* w, const char* kernel, int line, const char* message) {
  w->in_kernel = 0;
  Tile* t = w->cur;
  char buf[kErrLen];
  const char* name = kernel ? kernel : (w->launch->kernel_name ? w->launch->kernel_name : "kernel");
  char where[32] = "";
  if (line > 0) snprintf(where, sizeof where, ":%d", line);
  snprintf(buf, sizeof buf, "%s%s: %s (block (%u, %u, %u), thread (%u, %u, %u))", name, where, message,
           w->block_idx.x, w->block_idx.y, w->block_idx.z, t->tid.x, t->tid.y, t->tid.z);
  record_failure(w->launch, buf);
  abandon_fiber(w, t);
}

[[noreturn]] void deadlock(Worker* w, Tile* t) {
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

// Fail the launch, rather than overflow the stack, when the running tile has less than
// `need` bytes of stack left (before calls into the C library, which must not be abandoned
// while they hold a lock).
inline void ensure_stack(Worker* w, size_t need) {
  const unsigned char* here = static_cast<const unsigned char*>(__builtin_frame_address(0));
  if (here < w->arena->bottom(w->cur->index) + need)
    fail_in_fiber(w, nullptr, 0, "stack overflow: the tile's stack is exhausted (deep recursion?)");
}

}  // namespace detail
}  // namespace tsr
