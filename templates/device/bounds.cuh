// ---- bounds checks (compiled in only with check_bounds on) -----------------------------------
__device__ __noinline__ void tsr_index_fail(const char* kernel, const char* array, int dim, long long i,
                                            long long n, int line) {
#if defined(TESSERA_HOST)
    char message[160];
    snprintf(message, sizeof message, "index %lld out of range for dimension %d of '%s' (size %lld)", i, dim, array, n);
    tsr_host_fail(kernel, line, message);
#else
    printf("line %d: index %lld out of range for dimension %d of '%s' (size %lld) in kernel %s\n", line, i, dim, array,
           n, kernel);
    __trap();
#endif
}
__device__ __forceinline__ int tsr_check_index(long long i, long long n, const char* kernel, const char* array,
                                               int dim, int line) {
    if (i < 0 || i >= n) tsr_index_fail(kernel, array, dim, i, n, line);
    return (int)i;
}
