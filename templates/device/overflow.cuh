// ---- signed overflow checks (compiled in only with check_bounds on) ----------------------------
// i32 and i64 arithmetic follows C: overflow is undefined (docs/language.md), so check_bounds
// builds compute + - * and unary - through these, which report it with the .tsr line.
__device__ __noinline__ void tsr_overflow_fail(const char* kernel, const char* op, int line) {
#if defined(TESSERA_HOST)
    char message[96];
    snprintf(message, sizeof message, "signed integer overflow in '%s'", op);
    tsr_host_fail(kernel, line, message);
#else
    printf("line %d: signed integer overflow in '%s' in kernel %s\n", line, op, kernel);
    __trap();
#endif
}
#define TSR_CHECKED_ADD_SUB(T, U)                                                                     \
__device__ __forceinline__ T tsr_checked_add(T a, T b, const char* kernel, int line) {                \
    const T r = (T)((U)a + (U)b);                                                                     \
    if (((a ^ r) & (b ^ r)) < 0) tsr_overflow_fail(kernel, "+", line);                               \
    return r;                                                                                         \
}                                                                                                     \
__device__ __forceinline__ T tsr_checked_sub(T a, T b, const char* kernel, int line) {                \
    const T r = (T)((U)a - (U)b);                                                                     \
    if (((a ^ b) & (a ^ r)) < 0) tsr_overflow_fail(kernel, "-", line);                               \
    return r;                                                                                         \
}                                                                                                     \
__device__ __forceinline__ T tsr_checked_neg(T a, const char* kernel, int line) {                     \
    if (a == (T)((U)1 << (sizeof(T) * 8 - 1))) tsr_overflow_fail(kernel, "-", line);                 \
    return (T)(0 - (U)a);                                                                             \
}
TSR_CHECKED_ADD_SUB(int, unsigned int)
TSR_CHECKED_ADD_SUB(long long, unsigned long long)
__device__ __forceinline__ int tsr_checked_mul(int a, int b, const char* kernel, int line) {
    const long long r = (long long)a * (long long)b;
    if (r != (long long)(int)r) tsr_overflow_fail(kernel, "*", line);
    return (int)r;
}
__device__ __forceinline__ long long tsr_checked_mul(long long a, long long b, const char* kernel, int line) {
    const long long r = (long long)((unsigned long long)a * (unsigned long long)b);
#if defined(TESSERA_HOST)
    long long check;
    if (__builtin_mul_overflow(a, b, &check)) tsr_overflow_fail(kernel, "*", line);
#else
    if (__mul64hi(a, b) != (r >> 63)) tsr_overflow_fail(kernel, "*", line);
#endif
    return r;
}
