// host_scheduler.h -- part of the CPU backend's engine (included only by engine.cpp, after
// host_engine.h and host_sync.h): tile lifetime and the worker loop.
#pragma once

namespace tsr {
namespace detail {

// --- Tile lifetime ------------------------------------------------------------

[[noreturn]] inline void tile_exit(Worker* w) {
  Tile* t = w->cur;
  t->state = kTileDone;
  --w->live;
  Warp& wp = w->warps[t->warp];
  wp.live &= ~(1u << t->lane);
  if (wp.arrived) warp_recheck(w, t->warp);
  if (w->bar_arrived && w->bar_arrived == w->live) barrier_release(w);
  if (launch_failed(w)) abandon_fiber(w, t);
  if (w->rcount == 0) {
    if (w->live == 0) abandon_fiber(w, t);  // group finished: back to the worker
    deadlock(w, t);
  }
  Tile* next = pop_ready(w);
  w->cur = next;
  tsr_ctx_switch_v1(&t->sp, next->sp);
  __builtin_unreachable();
}

// Both translation units are built with -fno-exceptions (recipe.py): no exception can leave
// the kernel, so the engine needs nothing of libstdc++'s.
inline void fiber_main(void* arg) {
  Worker* w = static_cast<Worker*>(arg);
  enter_kernel(w);
  w->launch->invoke(w->launch->body);
  tile_exit(w);
}

// --- Worker -------------------------------------------------------------------

inline void start_group(Worker* w, unsigned long long g) {
  const Launch* L = w->launch;
  ++w->epoch;  // a new group: nothing it does races with the previous group on this worker
  w->block_idx.x = static_cast<unsigned>(g % L->grid[0]);
  w->block_idx.y = static_cast<unsigned>((g / L->grid[0]) % L->grid[1]);
  w->block_idx.z = static_cast<unsigned>(g / (static_cast<unsigned long long>(L->grid[0]) * L->grid[1]));
  const unsigned fibers = L->regions ? 1u : w->ntiles;
  for (unsigned i = 0; i < fibers; ++i) {
    Tile& t = w->tiles[i];
    t.state = kTileReady;
    async_reset(w, i);  // what the previous group on this worker left pending
    t.sp = make_fiber_frame(w->arena->top(i), &fiber_main, w, w->fpstate);
    if (i) w->ready[i - 1] = i;
  }
  for (unsigned i = 0; i < w->nwarps; ++i) {
    const unsigned lanes = w->ntiles - i * 32 >= 32 ? 32 : w->ntiles - i * 32;
    w->warps[i].live = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u;
    w->warps[i].arrived = 0;
  }
  if (L->regions) w->warps[0].live = 1u;  // tile 0's fiber is the only one
  w->rhead = 0;
  w->rcount = fibers - 1;
  w->live = fibers;
  w->bar_arrived = w->bar_pred = w->nwait = 0;
}

inline bool worker_init(Worker* w, Launch* L) {
  memset(static_cast<void*>(w), 0, sizeof *w);
  w->launch = L;
  w->flags = &L->flags;
  const unsigned n = L->ntiles;
  w->ntiles = n;
  w->nwarps = (n + 31) / 32;
  w->block_dim = dim3(L->block[0], L->block[1], L->block[2]);
  w->grid_dim = dim3(L->grid[0], L->grid[1], L->grid[2]);
  // One cache line per tile (Tile is 64 bytes): a switch touches only the two tiles' lines.
  const size_t tile_bytes = static_cast<size_t>(w->nwarps) * 32 * sizeof(Tile);
  w->tiles = static_cast<Tile*>(aligned_alloc(64, tile_bytes));
  if (w->tiles) memset(static_cast<void*>(w->tiles), 0, tile_bytes);
  w->warps = static_cast<Warp*>(calloc(w->nwarps, sizeof(Warp)));
  w->ready = static_cast<unsigned*>(calloc(n, sizeof(unsigned)));
  w->bar_wait = static_cast<unsigned*>(calloc(n, sizeof(unsigned)));
  w->async = static_cast<AsyncQueue*>(calloc(n, sizeof(AsyncQueue)));
  const size_t dyn = (L->dyn_bytes + 1023) / 1024 * 1024;  // 1024-aligned: swizzled arrays (wgmma) need it
  w->dyn_smem = static_cast<unsigned char*>(aligned_alloc(1024, dyn ? dyn : 1024));
  w->arena = acquire_arena(L->regions ? 1u : n, L->stack_bytes);  // region mode: tile 0's fiber only
  if (!w->tiles || !w->warps || !w->ready || !w->bar_wait || !w->async || !w->dyn_smem || !w->arena) return false;
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
  free(w->async);
  free(w->async_arena);
  free(w->dyn_smem);
  release_arena(w->arena);
  race_free(w);
}

// The next group for a worker to run, or L->ngroups when none is left (or the launch failed).
inline unsigned long long claim_group(Launch* L) {
  if (launch_failed(L)) return L->ngroups;
  const unsigned long long g = __atomic_fetch_add(&L->next_group, 1ull, __ATOMIC_RELAXED);
  return g < L->ngroups ? g : L->ngroups;
}

void start_helpers(Launch* L);  // host_pool.h

// Runs group `g` (claimed by this thread: a thread sets up a worker only once it has a group)
// and then every group it can claim; returns how many it ran.
inline unsigned long long worker_run(Launch* L, unsigned long long g) {
  Worker w;
  if (!worker_init(&w, L)) {
    record_failure(L, "out of memory: cannot allocate the tiles' fiber stacks or shared memory");
    worker_free(&w);
    return 0;
  }
  w.fpstate = current_fpstate();
  Worker* saved = t_worker;
  t_worker = &w;
  unsigned long long ran = 0;
  {
    SignalScope signals(&w);  // the guard pages and cancellation need this worker's signal state
    for (; g < L->ngroups; g = claim_group(L)) {
      start_group(&w, g);
      w.cur = &w.tiles[0];
      tsr_ctx_switch_v1(&w.main_sp, w.tiles[0].sp);
      w.cur = nullptr;
      ++ran;
      // Only the caller's worker sees a deadline (the launch has no other worker until it
      // passes); the clock is read after its 1st, 2nd, 4th, 8th ... group.
      if (L->wake_at && (ran & (ran - 1)) == 0 && clock_ns() >= L->wake_at) start_helpers(L);
    }
  }
  t_worker = saved;
  worker_free(&w);
  return ran;
}

}  // namespace detail
}  // namespace tsr
