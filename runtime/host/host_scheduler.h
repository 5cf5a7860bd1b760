// host_scheduler.h -- part of the CPU backend's prelude: the per-group scheduler (ready queue,
// barriers, warp-synchronous operations, tile lifetime, the worker loop).
// Included only by tessera_host.h (in order), after host_engine.h.
#pragma once

namespace tsr {
namespace detail {

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
