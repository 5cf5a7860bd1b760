// host_sync.h -- the group scheduler's hot path: the ready queue, barriers and
// warp-synchronous operations.  Included by both translation units (tessera_host.h and
// engine.cpp), so that a barrier or a shuffle in kernel code is inline code and one context
// switch, with no call into the engine; it uses no system header.
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
  if (launch_failed(w)) abandon_fiber(w, t);
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

// `w` and `t` are fiber_worker() and fiber_tile(), which kernel code computes once per
// activation (reloading w->cur here would wait on the store of the tile that switched to us).
inline unsigned long long barrier_arrive(Worker* w, Tile* t, int pred) {
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

inline unsigned long long warp_op(Worker* w, Tile* t, unsigned mask, unsigned char op, unsigned long long val, int b,
                                  unsigned c) {
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

inline void yield_current(Worker* w) {
  if (launch_failed(w)) abandon_fiber(w, w->cur);
  if (w->rcount == 0) return;
  Tile* t = w->cur;
  t->state = kTileReady;
  push_ready(w, t->index);
  block_current(w, t);
}

}  // namespace detail
}  // namespace tsr
