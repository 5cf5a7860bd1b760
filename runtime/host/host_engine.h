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
