// ---- race detector hooks -----------------------------------------------------------------------
// check_bounds builds route shared-memory accesses through these; the CPU backend's versions
// (its prelude) detect data races, on the GPU they are the plain access.
#if !defined(TESSERA_HOST)
template <class T> __device__ __forceinline__ T* tsr_race_read(T* p, int) { return p; }
template <class T> __device__ __forceinline__ T* tsr_race_write(T* p, int) { return p; }
template <class T> __device__ __forceinline__ T* tsr_race_atomic(T* p, int) { return p; }
#endif
