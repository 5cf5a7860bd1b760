// engine.cpp -- the CPU backend's execution engine: fibers, the per-group scheduler, launches
// (threads, waiting, cancellation), signal handling, printf, the shared-memory race detector
// and the slow paths of asynchronous copies.  Compiled once per C++ compiler (and cached) by
// tessera.runtime.host.build, and linked into every kernel library; the kernel translation
// unit reaches it through the declarations in host_abi.h.  Unlike the kernel translation unit,
// it includes the system headers it needs.

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <new>

#pragma GCC visibility push(hidden)

#include "host_types.h"
#include "host_abi.h"
#include "host_fiber_switch.h"
#include "host_engine.h"
#include "host_sync.h"
#include "host_signals.h"

// The kernel library's largest stack need: the sum of every frame of its kernel translation
// unit (an upper bound for any call chain without recursion), from -fstack-usage.  Defined by
// a small assembler file generated at build time (tessera.runtime.host.frames).
extern "C" const unsigned long long tsr_frames__bytes;

namespace tsr {
namespace detail {

thread_local Worker* t_worker __attribute__((tls_model("local-dynamic"))) = nullptr;  // as declared (host_engine.h)

Worker* fiber_worker() noexcept { return t_worker; }
Tile* fiber_tile() noexcept { return t_worker->cur; }

long long clock_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO: no system call
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// --- Shared-memory race detector (check_bounds builds only) ---------------------
// Within one barrier interval of a group (an epoch), an element touched by two different
// tiles, at least one of them writing, is a data race; an atomic update counts as a write that
// does not race with another tile's atomic update of the element (race_atomic). The shadow keeps,
// per element address, the epoch, the last writer, up to two different readers and up to two
// different tiles that updated it atomically, and the asynchronous copy into the element that has not landed: touching the element before
// it lands is a race whichever tile does it, and a barrier does not end it (it does not
// complete a cp.async), so that mark outlives the epoch.
struct RaceShadow {
  unsigned long long epoch;
  int writer, wline;
  int reader, rline;    // the first reader (-1: none)
  int reader2, rline2;  // a second, different reader (-1: none); more readers need not be kept
  int atomic, aline;    // the first tile that updated it atomically (-1: none)
  int atomic2, aline2;  // a second, different one (-1: none)
  int async_tile, async_line;  // the pending copy's tile and .tsr line; async_line 0: none
};

// The shadows by element address: open addressing with linear probing in a power-of-two table
// kept at most half full (std::unordered_map's header alone added a quarter to the engine's
// compile time, which a first launch with an empty cache waits for). Address 0 marks a free slot.
class RaceMap {
 public:
  RaceMap() = default;
  RaceMap(const RaceMap&) = delete;
  RaceMap& operator=(const RaceMap&) = delete;
  ~RaceMap() { free(slots_); }

  // The shadow of `key`, zero-initialized when new.
  RaceShadow& operator[](uintptr_t key) {
    if (2 * (used_ + 1) > cap_) grow();
    Slot* s = probe(slots_, cap_, key);
    if (s->key == 0) {
      s->key = key;
      ++used_;
    }
    return s->value;
  }
  RaceShadow* find(uintptr_t key) {
    if (cap_ == 0) return nullptr;
    Slot* s = probe(slots_, cap_, key);
    return s->key == key ? &s->value : nullptr;
  }

 private:
  struct Slot {
    uintptr_t key;
    RaceShadow value;
  };
  static Slot* probe(Slot* slots, size_t cap, uintptr_t key) {
    size_t i = static_cast<size_t>((key >> 1) * 0x9E3779B97F4A7C15ull) & (cap - 1);
    while (slots[i].key != 0 && slots[i].key != key) i = (i + 1) & (cap - 1);
    return &slots[i];
  }
  void grow() {
    const size_t cap = cap_ ? cap_ * 2 : 1024;
    Slot* slots = static_cast<Slot*>(calloc(cap, sizeof(Slot)));
    if (!slots) {
      fputs("tessera: out of memory in the shared-memory race detector\n", stderr);
      abort();  // as std::unordered_map's bad_alloc would have ended the process
    }
    for (size_t i = 0; i < cap_; ++i)
      if (slots_[i].key != 0) *probe(slots, cap, slots_[i].key) = slots_[i];
    free(slots_);
    slots_ = slots;
    cap_ = cap;
  }
  Slot* slots_ = nullptr;
  size_t cap_ = 0, used_ = 0;
};

// The element's shadow, with its barrier-interval part reset if the interval is a new one.
RaceShadow& race_shadow(Worker* w, const void* p) {
  if (w->race == nullptr) {
    // malloc and placement new, not `new`: the engine needs nothing from libstdc++ (see
    // build.py's _link, LEAN_LINK).
    void* mem = malloc(sizeof(RaceMap));
    if (!mem) {
      fputs("tessera: out of memory in the shared-memory race detector\n", stderr);
      abort();
    }
    w->race = new (mem) RaceMap();
  }
  RaceShadow& s = (*static_cast<RaceMap*>(w->race))[reinterpret_cast<uintptr_t>(p)];
  if (s.epoch != w->epoch) s = RaceShadow{w->epoch, -1, 0, -1, 0, -1, 0, -1, 0, -1, 0, s.async_tile, s.async_line};
  return s;
}

// What a tile does to an element, in a race's message.
const char* const READS = "reads";
const char* const WRITES = "writes";
const char* const UPDATES = "atomically updates";

[[noreturn]] void race_fail(Worker* w, int line_a, int tile_a, int line_b, int tile_b, const char* does_a,
                            const char* does_b) {
  char msg[256];
  snprintf(msg, sizeof msg,
           "shared-memory data race: tile %d %s it at line %d and tile %d %s it at line %d with no tbarrier() between",
           tile_a, does_a, line_a, tile_b, does_b, line_b);
  fail_in_fiber(w, w->launch->kernel_name, line_b, msg);
}

// Tile `tile` `does` (reads, writes, ...) at `line` an element with a copy pending (`s`).
[[noreturn]] void async_race_fail(Worker* w, int tile, const char* does, int line, const RaceShadow& s) {
  char msg[320];
  snprintf(msg, sizeof msg,
           "shared-memory data race: tile %d %s it at line %d while the asynchronous copy (tcopy_async) into it "
           "that tile %d started at line %d is in flight: no twait has completed it",
           tile, does, line, s.async_tile, s.async_line);
  fail_in_fiber(w, w->launch->kernel_name, line, msg);
}

// Whether an access by tile `me` (`does`: READS, WRITES or UPDATES) conflicts with the other
// accesses of the epoch. Of two different readers (atomic updaters), at least one is not `me`.
void race_check(Worker* w, const RaceShadow& s, int me, const char* does, int line) {
  if (s.writer >= 0 && s.writer != me) race_fail(w, s.wline, s.writer, line, me, WRITES, does);
  if (does != UPDATES) {
    if (s.atomic >= 0 && s.atomic != me) race_fail(w, s.aline, s.atomic, line, me, UPDATES, does);
    if (s.atomic2 >= 0 && s.atomic2 != me) race_fail(w, s.aline2, s.atomic2, line, me, UPDATES, does);
  }
  if (does == READS) return;
  if (s.reader >= 0 && s.reader != me) race_fail(w, s.rline, s.reader, line, me, READS, does);
  if (s.reader2 >= 0 && s.reader2 != me) race_fail(w, s.rline2, s.reader2, line, me, READS, does);
}

void race_access(const void* p, bool write, int line) {
  Worker* w = fiber_worker();
  EngineSection engine(w);  // the map allocates
  ensure_stack(w, 16 * 1024);
  const int me = static_cast<int>(fiber_tile()->index);
  RaceShadow& s = race_shadow(w, p);
  if (s.async_line) async_race_fail(w, me, write ? WRITES : READS, line, s);
  race_check(w, s, me, write ? WRITES : READS, line);
  if (write) {
    s.writer = me;
    s.wline = line;
  } else if (s.reader == -1 || s.reader == me) {
    s.reader = me;
    s.rline = line;
  } else if (s.reader2 == -1 || s.reader2 == me) {
    s.reader2 = me;  // several readers: only a later write can race
    s.rline2 = line;
  }
}

// An atomic update (atomic_add and the others on shared memory): a write that races with another
// tile's plain read or write of the element in the epoch, but not with its atomic updates.
void race_atomic(const void* p, int line) {
  Worker* w = fiber_worker();
  EngineSection engine(w);  // the map allocates
  ensure_stack(w, 16 * 1024);
  const int me = static_cast<int>(fiber_tile()->index);
  RaceShadow& s = race_shadow(w, p);
  if (s.async_line) async_race_fail(w, me, UPDATES, line, s);
  race_check(w, s, me, UPDATES, line);
  if (s.atomic == -1 || s.atomic == me) {
    s.atomic = me;
    s.aline = line;
  } else if (s.atomic2 == -1 || s.atomic2 == me) {
    s.atomic2 = me;
    s.aline2 = line;
  }
}

// Issuing a copy writes each of its elements (so it races with the epoch's other accesses)
// and marks them pending until it lands.
void race_async_issue(const AsyncCopy& c) {
  Worker* w = fiber_worker();
  EngineSection engine(w);  // the map allocates
  ensure_stack(w, 16 * 1024);
  const int me = static_cast<int>(fiber_tile()->index);
  for (unsigned k = 0; k < c.bytes; k += c.elem_bytes) {
    RaceShadow& s = race_shadow(w, c.dst + k);
    if (s.async_line) async_race_fail(w, me, "starts another asynchronous copy into", c.line, s);
    race_check(w, s, me, WRITES, c.line);
    s.async_tile = me;
    s.async_line = c.line;
  }
}

// Landing ends the mark and is a write by the issuing tile in the current epoch: another tile
// that reads the element before the next barrier races with it.
void race_async_land(const AsyncCopy& c) {
  Worker* w = fiber_worker();
  EngineSection engine(w);
  ensure_stack(w, 16 * 1024);
  const int me = static_cast<int>(fiber_tile()->index);
  for (unsigned k = 0; k < c.bytes; k += c.elem_bytes) {
    RaceShadow& s = race_shadow(w, c.dst + k);
    s.async_line = 0;
    s.writer = me;
    s.wline = c.line;
  }
}

// A copy dropped unlanded (its group ended) leaves no mark behind for the next group.
void race_async_drop(Worker* w, const AsyncCopy& c) {
  RaceMap& map = *static_cast<RaceMap*>(w->race);
  for (unsigned k = 0; k < c.bytes; k += c.elem_bytes) {
    RaceShadow* s = map.find(reinterpret_cast<uintptr_t>(c.dst + k));
    if (s) s->async_line = 0;
  }
}

inline void race_free(Worker* w) {
  if (RaceMap* map = static_cast<RaceMap*>(w->race)) {
    map->~RaceMap();
    free(map);
  }
}

// --- Asynchronous copies (host_async.h) -----------------------------------------
// The rings of all of a worker's tiles live in one arena, `async_cap` records per tile, so a
// launch allocates a few times per worker, never per copy or per group.

constexpr unsigned kAsyncInitialCap = 16;
constexpr size_t kAsyncArenaLimit = size_t(1) << 30;  // 1 GiB of pending copies is a runaway kernel

// A tile's ring is full: double every tile's ring, moving its records to the front in order.
void async_grow(Worker* w) {
  EngineSection engine(w);  // malloc takes a lock
  ensure_stack(w, 16 * 1024);
  const unsigned cap = w->async_cap ? 2 * w->async_cap : kAsyncInitialCap;
  const size_t bytes = static_cast<size_t>(cap) * w->ntiles * sizeof(AsyncCopy);
  AsyncCopy* arena = bytes <= kAsyncArenaLimit ? static_cast<AsyncCopy*>(malloc(bytes)) : nullptr;
  if (!arena) {
    fail_in_fiber(w, nullptr, 0, "out of memory: too many pending asynchronous copies (tcopy_async with no twait?)");
  }
  for (unsigned i = 0; i < w->ntiles; ++i) {
    AsyncQueue& q = w->async[i];
    AsyncCopy* ring = arena + static_cast<size_t>(i) * cap;
    const unsigned n = q.tail - q.head;
    for (unsigned k = 0; k < n; ++k) ring[k] = q.buf[(q.head + k) & (w->async_cap - 1)];
    q.buf = ring;
    q.head = 0;
    q.tail = n;
  }
  free(w->async_arena);
  w->async_arena = arena;
  w->async_cap = cap;
}

// Copies tile i left pending when its group ended are dropped: nothing waits for them.
inline void async_reset(Worker* w, unsigned i) {
  AsyncQueue& q = w->async[i];
  for (unsigned k = q.head; k != q.tail; ++k) {
    const AsyncCopy& c = q.buf[k & (w->async_cap - 1)];
    if (c.line > 0) race_async_drop(w, c);
  }
  q.head = q.tail = q.committed = 0;
}

}  // namespace detail
}  // namespace tsr

#include "host_scheduler.h"
#include "host_pool.h"

namespace tsr {
namespace detail {

// --- Launches -------------------------------------------------------------------

inline timespec after_ms(long ms) {
  timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  t.tv_sec += ms / 1000;
  t.tv_nsec += (ms % 1000) * 1000000L;
  if (t.tv_nsec >= 1000000000L) {
    ++t.tv_sec;
    t.tv_nsec -= 1000000000L;
  }
  return t;
}

// Cancels the launch when timeout_ms pass before it finishes.
void* watchdog_thread(void* arg) {
  Launch* L = static_cast<Launch*>(arg);
  const timespec deadline = after_ms(L->timeout_ms);
  pthread_mutex_lock(&L->mu);
  while (!L->finished && pthread_cond_timedwait(&L->done, &L->mu, &deadline) == 0) {
  }
  const bool late = !L->finished;
  pthread_mutex_unlock(&L->mu);
  if (late) cancel_launch(L, kCancelTimeout);
  return nullptr;
}

// The launch's message for the caller (Python reads it after a failed launch).
inline void report_error(const tsr_launch_config* cfg, const char* msg) {
  if (cfg->error_buf && cfg->error_buf_len > 0)
    snprintf(cfg->error_buf, static_cast<size_t>(cfg->error_buf_len), "%s", msg);
}

inline int config_error(const tsr_launch_config* cfg, const char* msg) {
  report_error(cfg, msg);
  return kLaunchInvalid;
}

inline size_t stack_bytes_for(const tsr_launch_config* cfg) {
  size_t stack = kDefaultFiberStack;
  const size_t frames = static_cast<size_t>(tsr_frames__bytes) + kStackMargin;
  if (frames > stack) stack = frames;
  if (cfg->fiber_stack_bytes > stack) stack = static_cast<size_t>(cfg->fiber_stack_bytes);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (stack + page - 1) / page * page;
}

int launch_run(const tsr_launch_config* cfg, const char* kernel_name, void (*invoke)(void*), void* body,
               int regions) {
  if (cfg->error_buf && cfg->error_buf_len > 0) cfg->error_buf[0] = '\0';
  // With kWatchSigint, tsr_sigint_watch_v1 has put this library's SIGINT handler in front, where
  // it stays; when something has replaced it since (Python's signal.signal), the launch does not
  // start, and the runtime watches again (host_signals.h).
  if ((cfg->flags & kWatchSigint) && !sigint_in_front()) return kLaunchNotWatched;
  const unsigned* g = cfg->grid;
  const unsigned* b = cfg->block;
  if (!g[0] || !g[1] || !g[2] || !b[0] || !b[1] || !b[2] || g[1] > 65535 || g[2] > 65535 || b[0] > 1024 ||
      b[1] > 1024 || b[2] > 64 || static_cast<unsigned long long>(b[0]) * b[1] * b[2] > 1024) {
    char msg[256];
    snprintf(msg, sizeof msg,
             "invalid launch configuration: grid (%u, %u, %u), block (%u, %u, %u) "
             "(a block has at most 1024 threads, block.z <= 64, grid.y and grid.z <= 65535, none 0)",
             g[0], g[1], g[2], b[0], b[1], b[2]);
    return config_error(cfg, msg);
  }
  Launch L;
  memset(static_cast<void*>(&L), 0, sizeof L);
  L.invoke = invoke;
  L.body = body;
  L.kernel_name = kernel_name;
  L.regions = regions != 0;
  for (int i = 0; i < 3; ++i) {
    L.grid[i] = g[i];
    L.block[i] = b[i];
  }
  L.ngroups = static_cast<unsigned long long>(g[0]) * g[1] * g[2];
  L.ntiles = b[0] * b[1] * b[2];
  L.dyn_bytes = static_cast<size_t>(cfg->dynamic_smem_bytes);
  L.stack_bytes = stack_bytes_for(cfg);
  L.caller = pthread_self();
  L.timeout_ms = cfg->timeout_ms;

  long nthreads = cfg->num_threads > 0 ? cfg->num_threads : online_cpus();
  if (nthreads < 1) nthreads = 1;
  if (static_cast<unsigned long long>(nthreads) > L.ngroups) nthreads = static_cast<long>(L.ngroups);
  if (nthreads > static_cast<long>(kMaxWorkers)) nthreads = kMaxWorkers;

  WatchSlot* watched = nullptr;
  if (cfg->flags & kWatchSigint) {
    watched = watch(&L);
    // A Ctrl-C between tsr_sigint_watch_v1 and here: the launch is over before it starts.
    if (__atomic_load_n(&g_sigint_count, __ATOMIC_SEQ_CST) != cfg->sigint_seen) cancel_launch(&L, kCancelInterrupt);
  }
  pthread_t watchdog;
  bool has_watchdog = false;
  if (L.timeout_ms) {
    pthread_mutex_init(&L.mu, nullptr);
    pthread_cond_init(&L.done, nullptr);
    BlockSignals blocked;
    has_watchdog = pthread_create(&watchdog, nullptr, &watchdog_thread, &L) == 0;
  }
  L.helpers = static_cast<unsigned>(nthreads - 1);
  run_groups(&L);
  if (L.timeout_ms) {
    pthread_mutex_lock(&L.mu);
    L.finished = true;
    pthread_cond_broadcast(&L.done);
    pthread_mutex_unlock(&L.mu);
    if (has_watchdog) pthread_join(watchdog, nullptr);
    pthread_mutex_destroy(&L.mu);
    pthread_cond_destroy(&L.done);
  }
  unwatch(watched);
  release_workers(&L);
  fflush(stdout);
  const int why = __atomic_load_n(&L.flags.cancelled, __ATOMIC_SEQ_CST);
  if (!launch_failed(&L)) return kLaunchOk;
  report_error(cfg, L.err);
  return why == kCancelInterrupt ? kLaunchInterrupted : why == kCancelTimeout ? kLaunchTimedOut : kLaunchFailed;
}

}  // namespace detail
}  // namespace tsr

// Failure hook of the emitted code (see host_abi.h).
[[noreturn]] void tsr_host_fail(const char* kernel, int line, const char* message) {
  tsr::detail::Worker* w = tsr::detail::t_worker;
  if (!w || !w->cur) {
    fprintf(stderr, "tessera: %s:%d: %s (outside a kernel launch)\n", kernel ? kernel : "?", line, message);
    abort();
  }
  tsr::detail::fail_in_fiber(w, kernel, line, message);
}

// Formats on the fiber's stack (no lock), then writes with stdio's lock held only by a fiber
// that cannot be abandoned meanwhile.  Output longer than the buffer is truncated, as CUDA's
// printf buffer truncates.
extern "C" int tsr_rt_printf(const char* format, ...) {
  using namespace tsr::detail;
  Worker* w = t_worker;
  EngineSection engine(w);
  if (w && w->cur) ensure_stack(w, 24 * 1024);
  char buf[2048];
  va_list ap;
  va_start(ap, format);
  const int n = vsnprintf(buf, sizeof buf, format, ap);
  va_end(ap);
  if (n > 0) fwrite(buf, 1, static_cast<size_t>(n) < sizeof buf ? static_cast<size_t>(n) : sizeof buf - 1, stdout);
  return n;
}

#pragma GCC visibility pop

// Called by the runtime (runtime/host/library.py) on a library it has not launched recently: its pooled
// worker threads and fiber stacks go.
TSR_EXPORT void tsr_trim_arenas_v1() {
  tsr::detail::pool_trim();
  tsr::detail::trim_arenas();
}

// Before a launch with kWatchSigint (runtime/host/launch.py): this library's SIGINT handler in
// front, where it stays until unwatched (before another library's goes in front); the count it
// returns goes into tsr_launch_config::sigint_seen. Later launches read the count at the address
// tsr_sigint_counter_v1 gives (no call).
TSR_EXPORT unsigned tsr_sigint_watch_v1() { return tsr::detail::watch_sigint(); }
TSR_EXPORT void tsr_sigint_unwatch_v1() { tsr::detail::unwatch_sigint(); }
TSR_EXPORT const unsigned* tsr_sigint_counter_v1() { return &tsr::detail::g_sigint_count; }

