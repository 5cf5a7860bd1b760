// host_signals.h -- part of the CPU backend's engine (included only by engine.cpp): how a
// fiber that cannot go on is abandoned from a signal handler, and how a launch is cancelled.
//
// * Stack overflow.  Below every tile's stack is a PROT_NONE guard (and kernel code is built
//   with -fstack-clash-protection, so no frame steps over it).  A SIGSEGV whose address is in
//   the running tile's guard, on a worker thread, is answered on the worker's alternate
//   signal stack by redirecting the interrupted context to `fiber_landing` at the top of the
//   tile's own stack, which fails the launch ("stack overflow") and returns to the worker.
// * Cancellation (Ctrl-C, timeout).  `cancel_launch` marks the launch failed and sends
//   kPreemptSignal to each of its worker threads; a worker running kernel code (in_kernel:
//   no lock held) is redirected the same way.  A fiber in engine code stops at its next
//   scheduling point or when it returns to kernel code (`enter_kernel`).  So the emitted
//   loops need no check of their own and cost nothing.  SIGINT cancels the launches that
//   asked for it (kWatchSigint: Python's default handler is in place, launched from the main
//   thread) and is then passed on to Python's handler, which raises KeyboardInterrupt as soon
//   as the launch returns.
//
// Every other signal, and every fault that is not a worker's guard page, goes to the handler
// installed before ours (another kernel library's, Python's faulthandler), or gets the
// default action.  Handlers find their worker through a registry keyed by thread id: no
// thread-local access and no lock in a signal handler.
#pragma once

namespace tsr {
namespace detail {

// Ignored by default, as Go's runtime reasons, so a stray one harms nobody.
constexpr int kPreemptSignal = SIGURG;
constexpr int kLandOverflow = 1, kLandCancel = 2;
constexpr unsigned kRegistrySlots = 1024, kWatchSlots = 64;
enum : int { kCancelInterrupt = 1, kCancelTimeout = 2 };

struct RegistrySlot {
  int state;  // 0 free, 1 being written, 2 valid; atomic
  long tid;
  Worker* worker;
};
inline RegistrySlot g_registry[kRegistrySlots];
inline struct sigaction g_prev_segv, g_prev_preempt, g_prev_sigint;

inline long current_tid() { return syscall(SYS_gettid); }

// Only the thread itself writes a slot holding its tid, so a slot read with our tid and
// state 2 is ours, even while other threads (un)register concurrently.
inline Worker* registered_self() {
  const long tid = current_tid();
  for (RegistrySlot& s : g_registry) {
    if (__atomic_load_n(&s.state, __ATOMIC_ACQUIRE) == 2 && s.tid == tid) return s.worker;
  }
  return nullptr;
}

inline RegistrySlot* register_worker(Worker* w) {
  for (RegistrySlot& s : g_registry) {
    int expected = 0;
    if (__atomic_compare_exchange_n(&s.state, &expected, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
      s.tid = current_tid();
      s.worker = w;
      __atomic_store_n(&s.state, 2, __ATOMIC_RELEASE);
      return &s;
    }
  }
  return nullptr;  // full: this worker's fibers can still be cancelled at scheduling points
}

inline void unregister_worker(RegistrySlot* s) {
  if (!s) return;
  __atomic_store_n(&s->state, 1, __ATOMIC_RELEASE);
  s->tid = 0;
  s->worker = nullptr;
  __atomic_store_n(&s->state, 0, __ATOMIC_RELEASE);
}

// --- Cancellation -----------------------------------------------------------------
// Async-signal-safe: called from the SIGINT handler and from the timeout watchdog.
inline void cancel_launch(Launch* L, int why) {
  int expected = 0;
  if (!__atomic_compare_exchange_n(&L->flags.cancelled, &expected, why, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) return;
  record_failure(L, why == kCancelTimeout ? "cancelled: timed out" : "cancelled: interrupted");
  pthread_kill(L->caller, kPreemptSignal);
  // Sequentially consistent with the store of `cancelled` above and with the store that adds a
  // thread (host_pool.h): a thread added after this load finds the launch cancelled.
  const unsigned n = __atomic_load_n(&L->nthreads, __ATOMIC_SEQ_CST);
  for (unsigned i = 0; i < n; ++i) pthread_kill(L->threads[i], kPreemptSignal);
}

// Back in kernel code: from here on the fiber may be abandoned asynchronously.  The check
// after the store closes the race with a canceller whose signal came just before it.
inline void enter_kernel(Worker* w) {
  w->in_kernel = 1;
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (__atomic_load_n(&w->flags->cancelled, __ATOMIC_SEQ_CST)) abandon_fiber(w, w->cur);
}

// Engine code that may take a lock (stdio, malloc) runs inside one of these: a cancelled
// launch does not abandon a fiber there asynchronously.
class EngineSection {
 public:
  explicit EngineSection(Worker* w) : w_(w) {
    if (w_) w_->in_kernel = 0;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
  }
  ~EngineSection() {
    if (w_ && w_->cur) enter_kernel(w_);
  }
  EngineSection(const EngineSection&) = delete;
  EngineSection& operator=(const EngineSection&) = delete;

 private:
  Worker* w_;
};

// Launches that Ctrl-C cancels.  The handler counts itself in `users` before it looks at a
// slot, and `unwatch` waits for it to leave, so it never touches a finished launch.
struct WatchSlot {
  Launch* launch;  // atomic
};
inline WatchSlot g_watch[kWatchSlots];
inline int g_watch_users;  // atomic

inline WatchSlot* watch(Launch* L) {
  for (WatchSlot& s : g_watch) {
    Launch* expected = nullptr;
    if (__atomic_compare_exchange_n(&s.launch, &expected, L, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) return &s;
  }
  return nullptr;
}

inline void unwatch(WatchSlot* s) {
  if (!s) return;
  __atomic_store_n(&s->launch, nullptr, __ATOMIC_SEQ_CST);
  while (__atomic_load_n(&g_watch_users, __ATOMIC_SEQ_CST) != 0) sched_yield();
}

// --- Handlers ---------------------------------------------------------------------

[[noreturn]] inline void fiber_landing(void* arg, int code) {
  Worker* w = static_cast<Worker*>(arg);
  if (code == kLandOverflow) {
    char msg[160];
    snprintf(msg, sizeof msg,
             "stack overflow: the tile used more than its %zu KiB stack (unbounded or too deep recursion?)",
             w->launch->stack_bytes / 1024);
    fail_in_fiber(w, nullptr, 0, msg);
  }
  abandon_fiber(w, w->cur);
}

inline bool on_tile_stack(const Worker* w, uintptr_t sp) {
  const unsigned i = w->cur->index;
  return sp >= reinterpret_cast<uintptr_t>(w->arena->guard(i)) && sp <= reinterpret_cast<uintptr_t>(w->arena->top(i));
}

// Not ours: what would have happened without our handler.
inline void chain(const struct sigaction& prev, int sig, siginfo_t* si, void* uc, bool fault) {
  if (prev.sa_flags & SA_SIGINFO) {
    prev.sa_sigaction(sig, si, uc);
    return;
  }
  if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
    return;
  }
  if (!fault) return;  // SIGURG: ignored by default; SIGINT: only chained to a real handler
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  // A real fault recurs when the instruction is retried, now with the default action; a sent
  // one is sent again.
  if (si->si_code <= 0) raise(sig);
}

inline void on_segv(int sig, siginfo_t* si, void* uc) {
  Worker* w = registered_self();
  if (w && w->cur && si->si_code > 0) {
    const uintptr_t addr = reinterpret_cast<uintptr_t>(si->si_addr);
    const uintptr_t guard = reinterpret_cast<uintptr_t>(w->arena->guard(w->cur->index));
    if (addr >= guard && addr < guard + kGuardBytes && on_tile_stack(w, context_sp(uc))) {
      redirect_context(uc, w->arena->top(w->cur->index), &fiber_landing, w, kLandOverflow);
      return;
    }
  }
  chain(g_prev_segv, sig, si, uc, true);
}

inline void on_preempt(int sig, siginfo_t* si, void* uc) {
  Worker* w = registered_self();
  if (!w) {
    chain(g_prev_preempt, sig, si, uc, false);
    return;
  }
  if (w->in_kernel && w->cur && __atomic_load_n(&w->flags->cancelled, __ATOMIC_SEQ_CST) &&
      on_tile_stack(w, context_sp(uc)))
    redirect_context(uc, w->arena->top(w->cur->index), &fiber_landing, w, kLandCancel);
}

inline unsigned g_sigint_count;  // atomic: the SIGINTs this library's handler has seen

inline void on_sigint(int sig, siginfo_t* si, void* uc) {
  __atomic_fetch_add(&g_sigint_count, 1u, __ATOMIC_SEQ_CST);
  __atomic_fetch_add(&g_watch_users, 1, __ATOMIC_SEQ_CST);
  for (WatchSlot& s : g_watch) {
    Launch* L = __atomic_load_n(&s.launch, __ATOMIC_SEQ_CST);
    if (L) cancel_launch(L, kCancelInterrupt);
  }
  __atomic_fetch_sub(&g_watch_users, 1, __ATOMIC_SEQ_CST);
  chain(g_prev_sigint, sig, si, uc, false);
}

inline void install_fault_handlers() {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sa.sa_sigaction = &on_segv;
  sigaction(SIGSEGV, &sa, &g_prev_segv);
  sa.sa_sigaction = &on_preempt;
  sigaction(kPreemptSignal, &sa, &g_prev_preempt);
}

// Ctrl-C for a launch on the main thread (runtime/host/launch.py): this library's handler goes
// in front of the current one (Python's) at the first such launch and stays there, passing every
// SIGINT on to the handler it replaced, so that a launch costs one sigaction (launch_run checks
// that the handler is still in front: Python's signal.signal replaces it) rather than three.
// Each library has its own handler and watch slots; the runtime puts one library's handler back
// (unwatch_sigint) before another's goes in front, so handlers never chain to each other.  A
// SIGINT before the runtime reads the count (the address tsr_sigint_counter_v1 gives, or what
// watch_sigint returns) has reached Python's handler, and the runtime handles Python's pending
// signals after the read (PyErr_CheckSignals: a KeyboardInterrupt before the launch); one after
// the read finds the count moved when the launch starts, which cancels it at once: no window
// loses a Ctrl-C.
inline bool sigint_in_front() {
  struct sigaction cur;
  return sigaction(SIGINT, nullptr, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == &on_sigint;
}

inline unsigned watch_sigint() {
  struct sigaction cur;
  if (sigaction(SIGINT, nullptr, &cur) == 0 && !((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == &on_sigint) &&
      ((cur.sa_flags & SA_SIGINFO) || (cur.sa_handler != SIG_DFL && cur.sa_handler != SIG_IGN))) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, kPreemptSignal);
    sigaddset(&sa.sa_mask, SIGTERM);
    // Python's handler has no SA_RESTART, so that Ctrl-C interrupts a blocking read: keep that.
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | (cur.sa_flags & SA_RESTART);
    sa.sa_sigaction = &on_sigint;
    g_prev_sigint = cur;
    sigaction(SIGINT, &sa, nullptr);
  }
  return __atomic_load_n(&g_sigint_count, __ATOMIC_SEQ_CST);
}

inline void unwatch_sigint() {
  if (sigint_in_front()) sigaction(SIGINT, &g_prev_sigint, nullptr);
}

// For the life of a worker: its registry slot and its alternate signal stack (slot 0 of its
// arena), so that the SIGSEGV of a stack overflow has a stack to run on.
class SignalScope {
 public:
  explicit SignalScope(Worker* w) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, &install_fault_handlers);
    stack_t ss;
    ss.ss_sp = w->arena->slot(0) + kGuardBytes;
    ss.ss_size = w->arena->slot_bytes - kGuardBytes;
    ss.ss_flags = 0;
    sigaltstack(&ss, &old_);
    slot_ = register_worker(w);
  }
  ~SignalScope() {
    unregister_worker(slot_);
    if (old_.ss_flags & SS_DISABLE) {
      stack_t off;
      memset(&off, 0, sizeof off);
      off.ss_flags = SS_DISABLE;
      sigaltstack(&off, nullptr);
    } else {
      sigaltstack(&old_, nullptr);
    }
  }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

 private:
  stack_t old_;
  RegistrySlot* slot_;
};

}  // namespace detail
}  // namespace tsr
