// host_async.h -- part of the CPU backend's prelude: asynchronous copies into shared memory
// (cp.async, cp.async.commit_group, cp.async.wait_group), emulated per tile.
// Included only by tessera_host.h (in order); see there for the design.
//
// A copy takes its source bytes when it is issued and keeps them, pending, in the calling
// tile's queue (Worker::async); nothing reaches shared memory until a wait lands it, so a
// kernel that reads the destination too early sees the old contents, as on the GPU.  Copies
// still pending when the group ends are dropped (the engine's start_group).  Issuing and
// landing are inline: a record written to and read from a ring, with a call into the engine
// only to grow the rings or, in check_bounds builds (line > 0), for the race detector.
#pragma once

// ===========================================================================
// 9. Asynchronous copies into shared memory
// ===========================================================================

namespace tsr {
namespace detail {
inline AsyncQueue& async_queue(Worker* w) { return w->async[fiber_tile()->index]; }

// Constant-size copies: a few moves, no call into the C library.
inline void async_land(const AsyncCopy& c) {
  switch (c.bytes) {
    case 16: __builtin_memcpy(c.dst, c.data, 16); break;
    case 8: __builtin_memcpy(c.dst, c.data, 8); break;
    default: __builtin_memcpy(c.dst, c.data, 4); break;
  }
}
}  // namespace detail
}  // namespace tsr

// A shared-memory address as cp.async takes it (on the GPU a 32-bit shared-window offset).
typedef unsigned char* tsr_saddr;
inline tsr_saddr tsr_shared_addr(const void* p) { return static_cast<tsr_saddr>(const_cast<void*>(p)); }

// Starts copying BYTES bytes to `dst`: the first `src_bytes` (0..BYTES) from `src`, the rest
// zero; with src_bytes == 0 nothing is read.  The copy joins the tile's open commit group.
// For the race detector: line, the .tsr line (> 0 in check_bounds builds, else 0), and
// elem_bytes, the size of the destination's elements (it divides BYTES).
template <int BYTES>
inline void tsr_cp_async(tsr_saddr dst, const void* src, unsigned src_bytes, int elem_bytes, int line) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
  using namespace tsr::detail;
  Worker* w = fiber_worker();
  AsyncQueue& q = async_queue(w);
  if (q.tail - q.head == w->async_cap) async_grow(w);
  AsyncCopy& c = q.buf[q.tail & (w->async_cap - 1)];
  if (src_bytes == BYTES) {
    __builtin_memcpy(c.data, src, BYTES);
  } else {  // a partial copy (a tensor's edge): zero fill
    __builtin_memset(c.data, 0, BYTES);
    const unsigned char* s = static_cast<const unsigned char*>(src);
    for (unsigned i = 0; i < src_bytes; ++i) c.data[i] = s[i];
  }
  c.dst = dst;
  c.group = q.committed;
  c.line = line;
  c.bytes = BYTES;
  c.elem_bytes = static_cast<unsigned short>(elem_bytes);
  ++q.tail;
  if (line > 0) race_async_issue(c);
}

// Closes the tile's open commit group (an empty group counts too).
inline void tsr_cp_async_commit() { ++tsr::detail::async_queue(tsr::detail::fiber_worker()).committed; }

// Lands, in issue order, every copy of the tile's committed groups but the newest N.  Other
// tiles' copies are not waited for: a barrier after the wait makes the data the group's.
template <int N>
inline void tsr_cp_async_wait() {
  static_assert(N >= 0, "cp.async.wait_group takes a count of groups");
  using namespace tsr::detail;
  Worker* w = fiber_worker();
  AsyncQueue& q = async_queue(w);
  const unsigned mask = w->async_cap - 1;
  // Groups are numbered in issue order, so the copies to land are the oldest ones.
  unsigned i = q.head;
  for (; i != q.tail; ++i) {
    const AsyncCopy& c = q.buf[i & mask];
    if (q.committed - c.group <= static_cast<unsigned>(N)) break;
    if (c.line > 0) race_async_land(c);
    async_land(c);
  }
  q.head = i;
}
