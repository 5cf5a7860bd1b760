// host_fiber_switch.h -- part of the CPU backend's engine (included only by engine.cpp): the
// fiber context switch (x86-64 and aarch64, no system call) and the redirection of a signal
// context into a function on a fiber's stack.
#pragma once

// tsr_ctx_switch_v1(save, to): push the callee-saved registers and the
// floating-point control state on the current stack, store the stack pointer
// in *save, load `to` as the stack pointer and pop the same frame from it.
// No system call (ucontext's swapcontext calls sigprocmask on every switch).
// A new fiber's stack holds a frame whose return address is the trampoline,
// which calls entry(arg) with the two values planted in callee-saved registers.
// The symbols are weak and hidden: one copy per library.

extern "C" void tsr_ctx_switch_v1(void** save_sp, void* to_sp) noexcept;
extern "C" void tsr_fiber_trampoline_v1();

#if defined(__x86_64__)
// Frame (from the saved rsp up): mxcsr|x87cw, r15, r14, r13, r12, rbx, rbp, return address.
__asm__(
    ".pushsection .text\n"
    ".weak tsr_ctx_switch_v1\n"
    ".hidden tsr_ctx_switch_v1\n"
    ".type tsr_ctx_switch_v1,@function\n"
    ".p2align 4\n"
    "tsr_ctx_switch_v1:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  subq $8, %rsp\n"
    "  stmxcsr (%rsp)\n"
    "  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n"
    "  fldcw 4(%rsp)\n"
    "  addq $8, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size tsr_ctx_switch_v1, .-tsr_ctx_switch_v1\n"
    ".weak tsr_fiber_trampoline_v1\n"
    ".hidden tsr_fiber_trampoline_v1\n"
    ".type tsr_fiber_trampoline_v1,@function\n"
    ".p2align 4\n"
    "tsr_fiber_trampoline_v1:\n"
    "  .cfi_startproc\n"
    "  .cfi_undefined rip\n"  // the outermost frame of a fiber: unwinding stops here
    "  movq %r12, %rdi\n"
    "  callq *%r13\n"
    "  ud2\n"
    "  .cfi_endproc\n"
    ".size tsr_fiber_trampoline_v1, .-tsr_fiber_trampoline_v1\n"
    ".popsection\n");

namespace tsr {
namespace detail {
constexpr size_t kSwitchFrameWords = 8;
// Plant a frame below `top` (16-byte aligned) that switches into entry(arg).
inline void* make_fiber_frame(unsigned char* top, void (*entry)(void*), void* arg, uint64_t fpstate) {
  void** sp = reinterpret_cast<void**>(top - 16 - kSwitchFrameWords * sizeof(void*));
  sp[0] = reinterpret_cast<void*>(fpstate);
  sp[1] = nullptr;                                  // r15
  sp[2] = nullptr;                                  // r14
  sp[3] = reinterpret_cast<void*>(entry);           // r13
  sp[4] = arg;                                      // r12
  sp[5] = nullptr;                                  // rbx
  sp[6] = nullptr;                                  // rbp
  sp[7] = reinterpret_cast<void*>(&tsr_fiber_trampoline_v1);
  return sp;  // after `ret` the trampoline runs with rsp == top - 16, 16-byte aligned
}
// Make the interrupted context `uc` resume as a call entry(arg, code) with the stack below
// `top` (a signal handler's way out of a fiber that cannot go on).
inline void redirect_context(void* uc, unsigned char* top, void (*entry)(void*, int), void* arg, int code) {
  mcontext_t& m = static_cast<ucontext_t*>(uc)->uc_mcontext;
  uintptr_t sp = (reinterpret_cast<uintptr_t>(top) - 64) & ~static_cast<uintptr_t>(15);
  sp -= 8;  // as if a call had pushed a return address
  *reinterpret_cast<void**>(sp) = nullptr;
  m.gregs[REG_RSP] = static_cast<greg_t>(sp);
  m.gregs[REG_RIP] = reinterpret_cast<greg_t>(entry);
  m.gregs[REG_RDI] = reinterpret_cast<greg_t>(arg);
  m.gregs[REG_RSI] = code;
}
inline uintptr_t context_sp(const void* uc) {
  return static_cast<uintptr_t>(static_cast<const ucontext_t*>(uc)->uc_mcontext.gregs[REG_RSP]);
}
inline uint64_t current_fpstate() {
  uint32_t mxcsr;
  uint16_t cw;
  __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
  __asm__ volatile("fnstcw %0" : "=m"(cw));
  return static_cast<uint64_t>(mxcsr) | (static_cast<uint64_t>(cw) << 32);
}
}  // namespace detail
}  // namespace tsr

#elif defined(__aarch64__)
// Frame (176 bytes from the saved sp): x19..x28, x29, x30 (lr), d8..d15, fpcr.
__asm__(
    ".pushsection .text\n"
    ".weak tsr_ctx_switch_v1\n"
    ".hidden tsr_ctx_switch_v1\n"
    ".type tsr_ctx_switch_v1,%function\n"
    ".p2align 4\n"
    "tsr_ctx_switch_v1:\n"
    "  sub sp, sp, #176\n"
    "  stp x19, x20, [sp, #0]\n"
    "  stp x21, x22, [sp, #16]\n"
    "  stp x23, x24, [sp, #32]\n"
    "  stp x25, x26, [sp, #48]\n"
    "  stp x27, x28, [sp, #64]\n"
    "  stp x29, x30, [sp, #80]\n"
    "  stp d8, d9, [sp, #96]\n"
    "  stp d10, d11, [sp, #112]\n"
    "  stp d12, d13, [sp, #128]\n"
    "  stp d14, d15, [sp, #144]\n"
    "  mrs x9, fpcr\n"
    "  str x9, [sp, #160]\n"
    "  mov x9, sp\n"
    "  str x9, [x0]\n"
    "  mov sp, x1\n"
    "  ldp x19, x20, [sp, #0]\n"
    "  ldp x21, x22, [sp, #16]\n"
    "  ldp x23, x24, [sp, #32]\n"
    "  ldp x25, x26, [sp, #48]\n"
    "  ldp x27, x28, [sp, #64]\n"
    "  ldp x29, x30, [sp, #80]\n"
    "  ldp d8, d9, [sp, #96]\n"
    "  ldp d10, d11, [sp, #112]\n"
    "  ldp d12, d13, [sp, #128]\n"
    "  ldp d14, d15, [sp, #144]\n"
    "  ldr x9, [sp, #160]\n"
    "  msr fpcr, x9\n"
    "  add sp, sp, #176\n"
    "  ret\n"
    ".size tsr_ctx_switch_v1, .-tsr_ctx_switch_v1\n"
    ".weak tsr_fiber_trampoline_v1\n"
    ".hidden tsr_fiber_trampoline_v1\n"
    ".type tsr_fiber_trampoline_v1,%function\n"
    ".p2align 4\n"
    "tsr_fiber_trampoline_v1:\n"
    "  .cfi_startproc\n"
    "  .cfi_undefined x30\n"
    "  mov x0, x19\n"
    "  blr x20\n"
    "  brk #0x3e8\n"
    "  .cfi_endproc\n"
    ".size tsr_fiber_trampoline_v1, .-tsr_fiber_trampoline_v1\n"
    ".popsection\n");

namespace tsr {
namespace detail {
constexpr size_t kSwitchFrameWords = 22;  // 176 bytes
inline void* make_fiber_frame(unsigned char* top, void (*entry)(void*), void* arg, uint64_t fpstate) {
  void** sp = reinterpret_cast<void**>(top - 16 - kSwitchFrameWords * sizeof(void*));
  for (size_t i = 0; i < kSwitchFrameWords; ++i) sp[i] = nullptr;
  sp[0] = arg;                                              // x19
  sp[1] = reinterpret_cast<void*>(entry);                   // x20
  sp[11] = reinterpret_cast<void*>(&tsr_fiber_trampoline_v1);  // x30
  sp[20] = reinterpret_cast<void*>(fpstate);                // fpcr
  return sp;
}
inline void redirect_context(void* uc, unsigned char* top, void (*entry)(void*, int), void* arg, int code) {
  mcontext_t& m = static_cast<ucontext_t*>(uc)->uc_mcontext;
  m.sp = (reinterpret_cast<uintptr_t>(top) - 64) & ~static_cast<uintptr_t>(15);
  m.pc = reinterpret_cast<uintptr_t>(entry);
  m.regs[0] = reinterpret_cast<uintptr_t>(arg);
  m.regs[1] = static_cast<uintptr_t>(code);
  m.regs[30] = 0;  // lr: the entry never returns
}
inline uintptr_t context_sp(const void* uc) {
  return static_cast<uintptr_t>(static_cast<const ucontext_t*>(uc)->uc_mcontext.sp);
}
inline uint64_t current_fpstate() {
  uint64_t fpcr;
  __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
  return fpcr;
}
}  // namespace detail
}  // namespace tsr

#else
#error "tessera_host.h: the fiber context switch supports x86-64 and aarch64 only"
#endif
