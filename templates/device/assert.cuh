// ---- tassert (compiled in only with debug on) ------------------------------------------------
__device__ __noinline__ void tsr_assert_fail(const char* kernel, const char* file, int line, const char* message) {
#if defined(TESSERA_HOST)
    tsr_host_fail(kernel, line, message);
    (void)file;
#else
    printf("%s:%d: tassert failed in kernel %s: %s\n", file, line, kernel, message);
    __trap();
#endif
}
