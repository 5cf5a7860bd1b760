// engine.cpp -- the CPU backend's execution engine: fibers, the per-group scheduler, launches
// (threads, waiting, cancellation), signal handling, printf and the shared-memory race
// detector.  Compiled once per C++ compiler (and cached) by tessera.runtime.host_build, and
// linked into every kernel library; the kernel translation unit reaches it through the
// declarations in host_abi.h.  Unlike the kernel translation unit, it includes the system
// headers it needs.

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
#include <unordered_map>

#pragma GCC visibility push(hidden)

#include "host_types.h"
#include "host_abi.h"
#include "host_fiber_switch.h"
#include "host_engine.h"
#include "host_sync.h"
#include "host_signals.h"

// The kernel library's largest stack need: the sum of every frame of its kernel translation
// unit (an upper bound for any call chain without recursion), from -fstack-usage.  Defined by
// a small assembler file generated at build time (tessera.runtime.host_frames).
extern "C" const unsigned long long tsr_frames__bytes;

namespace tsr {
namespace detail {

thread_local Worker* t_worker = nullptr;

Worker* fiber_worker() noexcept { return t_worker; }
Tile* fiber_tile() noexcept { return t_worker->cur; }

long long clock_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO: no system call
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// --- Shared-memory race detector (check_bounds builds only) ---------------------
// Within one barrier interval of a group (an epoch), an element touched by two different
// tiles, at least one of them writing, is a data race; atomics do not go through here. The
// shadow keeps, per byte address, the epoch, the last writer and one reader (or "many").
struct RaceShadow {
  unsigned long long epoch;
  int writer, wline;
  int reader, rline;
};
using RaceMap = std::unordered_map<uintptr_t, RaceShadow>;

[[noreturn]] void race_fail(Worker* w, int line_a, int tile_a, int line_b, int tile_b, bool write_a, bool write_b) {
  char msg[256];
  snprintf(msg, sizeof msg,
           "shared-memory data race: tile %d %s it at line %d and tile %d %s it at line %d with no tbarrier() between",
           tile_a, write_a ? "writes" : "reads", line_a, tile_b, write_b ? "writes" : "reads", line_b);
  fail_in_fiber(w, w->launch->kernel_name, line_b, msg);
}

void race_access(const void* p, bool write, int line) {
  Worker* w = fiber_worker();
  EngineSection engine(w);  // the map allocates
  ensure_stack(w, 16 * 1024);
  if (w->race == nullptr) w->race = new RaceMap();
  RaceMap& map = *static_cast<RaceMap*>(w->race);
  const int me = static_cast<int>(fiber_tile()->index);
  RaceShadow& s = map[reinterpret_cast<uintptr_t>(p)];
  if (s.epoch != w->epoch) s = RaceShadow{w->epoch, -1, 0, -1, 0};
  if (s.writer >= 0 && s.writer != me) race_fail(w, s.wline, s.writer, line, me, true, write);
  if (write) {
    if (s.reader == -2 || (s.reader >= 0 && s.reader != me)) {
      race_fail(w, s.rline, s.reader == -2 ? -1 : s.reader, line, me, false, true);
    }
    s.writer = me;
    s.wline = line;
  } else if (s.reader == -1 || s.reader == me) {
    s.reader = me;
    s.rline = line;
  } else {
    s.reader = -2;  // several readers: only a later write can race
    s.rline = line;
  }
}

inline void race_free(Worker* w) { delete static_cast<RaceMap*>(w->race); }

}  // namespace detail
}  // namespace tsr

#include "host_scheduler.h"

namespace tsr {
namespace detail {

// --- Launches -------------------------------------------------------------------

void* worker_thread(void* arg) {
  worker_run(static_cast<Launch*>(arg));
  return nullptr;
}

// The engine's threads block every asynchronous signal but its own, so that Ctrl-C reaches
// the thread that launched.
class BlockSignals {
 public:
  BlockSignals() {
    sigset_t blocked;
    sigfillset(&blocked);
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, kPreemptSignal}) sigdelset(&blocked, sig);
    pthread_sigmask(SIG_SETMASK, &blocked, &old_);
  }
  ~BlockSignals() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  BlockSignals(const BlockSignals&) = delete;
  BlockSignals& operator=(const BlockSignals&) = delete;

 private:
  sigset_t old_;
};

// Start `count` more workers (with the signals blocked: see BlockSignals).
inline void start_workers(Launch* L, unsigned count) {
  BlockSignals blocked;
  for (unsigned i = 0; i < count; ++i) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1 << 20);
    const unsigned n = L->nthreads;
    if (pthread_create(&L->threads[n], &attr, &worker_thread, L) == 0)
      __atomic_store_n(&L->nthreads, n + 1, __ATOMIC_RELEASE);  // now a canceller may signal it
    pthread_attr_destroy(&attr);
  }
}

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

int launch_run(const tsr_launch_config* cfg, const char* kernel_name, void (*invoke)(void*), void* body) {
  if (cfg->error_buf && cfg->error_buf_len > 0) cfg->error_buf[0] = '\0';
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
    ensure_sigint_handler();
    watched = watch(&L);
  }
  pthread_t watchdog;
  bool has_watchdog = false;
  if (L.timeout_ms) {
    pthread_mutex_init(&L.mu, nullptr);
    pthread_cond_init(&L.done, nullptr);
    BlockSignals blocked;
    has_watchdog = pthread_create(&watchdog, nullptr, &watchdog_thread, &L) == 0;
  }
  start_workers(&L, static_cast<unsigned>(nthreads - 1));
  worker_run(&L);  // the caller's thread is worker 0
  for (unsigned i = 0; i < L.nthreads; ++i) pthread_join(L.threads[i], nullptr);
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

