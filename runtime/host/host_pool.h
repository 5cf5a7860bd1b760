// host_pool.h -- part of the CPU backend's engine (included only by engine.cpp, after
// host_scheduler.h): how a launch hands its groups to more threads than the caller's -- the
// persistent worker pool, or threads of its own when another launch has the pool.
//
// Every worker, the caller's thread included, claims groups from the launch's atomic counter
// (claim_group) and sets itself up (fiber stacks, signal stack) only once it holds one, so a
// thread that comes late costs the launch nothing.  The caller starts on its groups at once; it
// wakes helpers at once too, unless the kernel's last launches say this one is over before a
// woken thread could help ("Starting the helpers" below).  When it finds no group left it
// closes the launch: a pool thread that has not joined yet (still waking up) stays out, and the
// caller waits only for the threads that did claim a group, whose results it must see.  A
// launch of one group wakes no thread (launch_run caps the workers at the group count).
#pragma once

namespace tsr {
namespace detail {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

// The engine's threads block every asynchronous signal but its own, so that Ctrl-C reaches
// the thread that launched.
class BlockSignals {
 public:
  BlockSignals() {
    sigset_t blocked;
    sigfillset(&blocked);
    const int kept[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, kPreemptSignal};
    for (int sig : kept) sigdelset(&blocked, sig);
    pthread_sigmask(SIG_SETMASK, &blocked, &old_);
  }
  ~BlockSignals() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  BlockSignals(const BlockSignals&) = delete;
  BlockSignals& operator=(const BlockSignals&) = delete;

 private:
  sigset_t old_;
};

// --- A launch's own threads (the pool is in use) ----------------------------------
// The caller waits for them to leave their groups (own_done), and joins them only in
// release_workers, once nothing can cancel the launch any more: a cancellation signals every
// thread the launch has added (Launch::nthreads), and a joined thread's pthread_t names freed
// memory, or another thread.

inline void* worker_thread(void* arg) {
  Launch* L = static_cast<Launch*>(arg);
  const unsigned long long g = claim_group(L);
  if (g < L->ngroups) worker_run(L, g);
  pthread_mutex_lock(&L->own_mu);
  if (--L->own_running == 0) pthread_cond_broadcast(&L->own_done);
  pthread_mutex_unlock(&L->own_mu);
  return nullptr;
}

// Start `count` more workers (with the signals blocked: see BlockSignals).  A thread runs before
// it is added to Launch::nthreads, so a canceller that read the count before it was added has
// not signalled it, and it may be in kernel code by then, where only the signal stops it: the
// caller then signals it itself.  Sequentially consistent, as cancel_launch's load: either the
// canceller sees the thread, or the caller sees the launch cancelled.
inline void start_workers(Launch* L, unsigned count) {
  if (count == 0) return;  // a launch on one thread: no signal-mask system calls
  pthread_mutex_init(&L->own_mu, nullptr);
  pthread_cond_init(&L->own_done, nullptr);
  L->own = true;
  BlockSignals blocked;
  pthread_mutex_lock(&L->own_mu);  // a thread that is done at once waits here to count itself out
  for (unsigned i = 0; i < count; ++i) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1 << 20);
    const unsigned n = L->nthreads;
    if (pthread_create(&L->threads[n], &attr, &worker_thread, L) == 0) {
      ++L->own_running;
      __atomic_store_n(&L->nthreads, n + 1, __ATOMIC_SEQ_CST);  // now a canceller signals it
      if (__atomic_load_n(&L->flags.cancelled, __ATOMIC_SEQ_CST)) pthread_kill(L->threads[n], kPreemptSignal);
    }
    pthread_attr_destroy(&attr);
  }
  pthread_mutex_unlock(&L->own_mu);
}

// The caller's wait for its own threads to leave the launch (they are joined later).
inline void own_wait(Launch* L) {
  pthread_mutex_lock(&L->own_mu);
  while (L->own_running) pthread_cond_wait(&L->own_done, &L->own_mu);
  pthread_mutex_unlock(&L->own_mu);
}

// --- Persistent workers ----------------------------------------------------------
// Threads kept from launch to launch (one pool per library), so that a launch of several
// groups does not create and join a thread per worker (tens of microseconds each).  One launch
// uses the pool at a time, from pool_start to pool_release; a launch that finds it in use
// (another Python thread launching meanwhile) starts its own threads.  A pool thread waits for
// a launch; woken, it claims a group, and only with one does it join the launch (recording
// itself in Launch::threads, so that a cancellation reaches it, and counting itself in
// `running`, which the caller waits for), wake the next pool thread the launch may use, and run
// groups until none is left; then it goes back to waiting, unregistered: a late cancellation
// signal does nothing to it then.  The caller wakes one thread, or all of them when the launch
// wants them all (one system call either way); the others are woken one by one, each by the
// previous one to join, so that threads are woken only while groups are left.  A forked child
// has none of the threads: its pool starts empty.
struct WorkerPool {
  pthread_mutex_t mu;
  pthread_cond_t wake;  // a launch was posted
  pthread_cond_t done;  // the last pool thread in a launch left it, or one retired
  bool busy;            // a launch owns the pool
  bool retire;          // pool_trim: the waiting threads exit
  unsigned nthreads;    // threads started
  Launch* job;          // the launch open to pool threads (until its caller closes it)
  unsigned wanted;      // how many more pool threads may join it
  unsigned running;     // atomic (read without the lock by pool_close): pool threads in it
};
inline WorkerPool g_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER,
                            false, false, 0, nullptr, 0, 0};

// How long the caller spins for the pool threads still running a group before it sleeps: a
// group's end is often microseconds away, and a thread that sleeps on a loaded machine may wait
// for a time slice to run again once woken.
constexpr long long kJoinSpinNs = 50 * 1000;

inline void pool_after_fork() {
  g_pool = WorkerPool{PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER,
                      false, false, 0, nullptr, 0, 0};
}
inline void pool_register_fork() { pthread_atfork(nullptr, nullptr, &pool_after_fork); }

inline void* pool_thread(void*) {
  pthread_mutex_lock(&g_pool.mu);
  for (;;) {
    while (!g_pool.retire && (!g_pool.job || g_pool.wanted == 0)) pthread_cond_wait(&g_pool.wake, &g_pool.mu);
    if (g_pool.retire) {
      --g_pool.nthreads;
      pthread_cond_broadcast(&g_pool.done);
      pthread_mutex_unlock(&g_pool.mu);
      return nullptr;
    }
    Launch* L = g_pool.job;
    const unsigned long long g = claim_group(L);
    if (g == L->ngroups) {
      g_pool.wanted = 0;  // every group is taken (or the launch failed): nobody else need come
      continue;
    }
    if (--g_pool.wanted) pthread_cond_signal(&g_pool.wake);  // the next one, while groups are left
    const unsigned n = L->nthreads;  // only pool threads start workers of a pooled launch
    L->threads[n] = pthread_self();
    // Now a canceller signals it; and it has not entered kernel code yet, where it would find
    // the launch cancelled if the canceller read the count before this store (see start_workers).
    __atomic_store_n(&L->nthreads, n + 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&g_pool.running, g_pool.running + 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&g_pool.mu);
    worker_run(L, g);
    pthread_mutex_lock(&g_pool.mu);
    const unsigned left = g_pool.running - 1;
    __atomic_store_n(&g_pool.running, left, __ATOMIC_RELAXED);
    if (left == 0) pthread_cond_broadcast(&g_pool.done);
  }
}

// Post `L` to up to `count` pool threads (started as needed); false if another launch has the pool.
inline bool pool_start(Launch* L, unsigned count) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, &pool_register_fork);
  pthread_mutex_lock(&g_pool.mu);
  if (g_pool.busy) {
    pthread_mutex_unlock(&g_pool.mu);
    return false;
  }
  g_pool.busy = true;
  if (g_pool.nthreads < count) {
    BlockSignals blocked;  // inherited by the new threads
    while (g_pool.nthreads < count) {
      pthread_attr_t attr;
      pthread_attr_init(&attr);
      pthread_attr_setstacksize(&attr, 1 << 20);
      pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
      pthread_t t;
      const bool ok = pthread_create(&t, &attr, &pool_thread, nullptr) == 0;
      pthread_attr_destroy(&attr);
      if (!ok) break;
      ++g_pool.nthreads;
    }
  }
  g_pool.job = L;
  g_pool.wanted = count < g_pool.nthreads ? count : g_pool.nthreads;
  const bool all = g_pool.wanted == g_pool.nthreads;
  pthread_mutex_unlock(&g_pool.mu);
  // After the unlock, so that a woken thread does not block at once on the mutex held here.
  if (all)
    pthread_cond_broadcast(&g_pool.wake);
  else
    pthread_cond_signal(&g_pool.wake);
  return true;
}

// After the caller's own worker is done (no group left to claim, or the launch failed): no pool
// thread joins the launch any more, and those that did have finished when this returns.
inline void pool_close() {
  pthread_mutex_lock(&g_pool.mu);
  g_pool.job = nullptr;
  g_pool.wanted = 0;
  const bool joined = g_pool.running != 0;
  pthread_mutex_unlock(&g_pool.mu);
  if (!joined) return;
  const long long until = clock_ns() + kJoinSpinNs;
  while (__atomic_load_n(&g_pool.running, __ATOMIC_RELAXED) && clock_ns() < until) cpu_relax();
  pthread_mutex_lock(&g_pool.mu);  // also what orders their writes before the caller's reads
  while (g_pool.running) pthread_cond_wait(&g_pool.done, &g_pool.mu);
  pthread_mutex_unlock(&g_pool.mu);
}

// The end of the launch's hold on the pool: after pool_close and after nothing can cancel the
// launch any more (the watchdog joined, the SIGINT watch ended), so that a cancellation never
// signals a pool thread that pool_trim has ended meanwhile.
inline void pool_release() {
  pthread_mutex_lock(&g_pool.mu);
  g_pool.busy = false;
  pthread_mutex_unlock(&g_pool.mu);
}

// Once nothing can cancel the launch any more: the launch lets go of the pool, or joins its own
// threads (which left their groups before run_groups returned).
inline void release_workers(Launch* L) {
  if (L->pooled) pool_release();
  if (!L->own) return;
  for (unsigned i = 0; i < L->nthreads; ++i) pthread_join(L->threads[i], nullptr);
  pthread_mutex_destroy(&L->own_mu);
  pthread_cond_destroy(&L->own_done);
}

// --- Starting the helpers -----------------------------------------------------------
// Waking a thread costs the caller a system call, and the thread comes microseconds later (tens
// on a loaded machine), by when a launch of small groups is over.  So a launch that its kernel's
// last launches say will take less than kWakeNs wakes no helper at first: its caller starts them
// once the launch has run that long with groups left (a wrong guess costs at most about twice
// kWakeNs and one group's time), and a launch of a kernel not seen before, or of long groups,
// starts them at once.  The record, per kernel (its `invoke`): the caller's time per group at
// its last two launches, fiber set-up included; the guess takes the lower, so that one launch
// slowed by the load (its caller preempted for milliseconds) does not make the next wake
// threads.  One word a slot: the kernel's tag in the top 16 bits, then the two times in units
// of 16 ns, 24 bits each (saturating), so that concurrent launches never read a torn record.
constexpr long long kWakeNs = 20 * 1000;
constexpr unsigned kCostSlots = 64;
constexpr unsigned long long kCostMax = (1ull << 24) - 1;  // a time's field, in units of 16 ns
inline unsigned long long g_group_cost[kCostSlots];  // atomic

inline unsigned long long* cost_slot(const Launch* L) {
  const uintptr_t k = reinterpret_cast<uintptr_t>(L->invoke);
  return &g_group_cost[((k >> 4) ^ (k >> 12)) & (kCostSlots - 1)];
}
inline unsigned long long cost_tag(const Launch* L) {
  return (reinterpret_cast<uintptr_t>(L->invoke) * 0x9E3779B97F4A7C15ull) >> 48;
}

// Whether the kernel's last launches say that this one ends within kWakeNs.
inline bool expected_short(const Launch* L) {
  const unsigned long long w = __atomic_load_n(cost_slot(L), __ATOMIC_RELAXED);
  if (w == 0 || (w >> 48) != cost_tag(L) || L->ngroups >= static_cast<unsigned long long>(kWakeNs)) return false;
  const unsigned long long a = (w >> 24) & kCostMax, b = w & kCostMax;
  return (a < b ? a : b) * 16 * L->ngroups < static_cast<unsigned long long>(kWakeNs);
}

inline void record_cost(const Launch* L, long long ns_per_group) {
  const unsigned long long units = static_cast<unsigned long long>(ns_per_group) / 16;
  const unsigned long long now = units < 1 ? 1 : units > kCostMax ? kCostMax : units;
  const unsigned long long w = __atomic_load_n(cost_slot(L), __ATOMIC_RELAXED);
  const unsigned long long last = w != 0 && (w >> 48) == cost_tag(L) ? (w >> 24) & kCostMax : now;
  __atomic_store_n(cost_slot(L), cost_tag(L) << 48 | now << 24 | last, __ATOMIC_RELAXED);
}

// The caller starts its helpers, as many as there are groups left for besides the one it takes
// next (none when it takes the last).
void start_helpers(Launch* L) {
  L->wake_at = 0;
  const unsigned long long next = __atomic_load_n(&L->next_group, __ATOMIC_RELAXED);
  const unsigned long long left = next + 1 < L->ngroups ? L->ngroups - next - 1 : 0;
  const unsigned count = left < L->helpers ? static_cast<unsigned>(left) : L->helpers;
  L->helpers = 0;
  if (count == 0) return;
  L->pooled = pool_start(L, count);
  if (!L->pooled) start_workers(L, count);
}

// Runs every group of `L` on the caller's thread and up to L->helpers more; when it returns, every
// group has run or been abandoned and no other thread touches `L` (the caller then calls
// release_workers, once nothing can cancel the launch any more).
inline void run_groups(Launch* L) {
  const bool timed = L->helpers != 0;  // a launch on one thread needs no record
  if (timed) {
    if (expected_short(L))
      L->wake_at = clock_ns() + kWakeNs;
    else
      start_helpers(L);
  }
  const long long t0 = timed ? clock_ns() : 0;  // what the groups cost, not the wake-up
  const unsigned long long first = claim_group(L);
  const unsigned long long ran = first < L->ngroups ? worker_run(L, first) : 0;  // the caller is worker 0
  if (timed && ran && !launch_failed(L)) record_cost(L, (clock_ns() - t0) / static_cast<long long>(ran));
  if (L->pooled)
    pool_close();
  else if (L->own)
    own_wait(L);
}

// The pool's threads end (a library not launched recently keeps none: runtime/host/library.py trims it
// with its stacks), unless a launch is using them.
inline void pool_trim() {
  pthread_mutex_lock(&g_pool.mu);
  if (!g_pool.busy) {
    g_pool.retire = true;
    pthread_cond_broadcast(&g_pool.wake);
    while (g_pool.nthreads) pthread_cond_wait(&g_pool.done, &g_pool.mu);
    g_pool.retire = false;
  }
  pthread_mutex_unlock(&g_pool.mu);
}

}  // namespace detail
}  // namespace tsr
