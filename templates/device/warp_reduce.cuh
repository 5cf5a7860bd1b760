// ---- warp reductions (all 32 lanes participate; the result is in every lane) -------------
template <class T>
__device__ __forceinline__ T tsr_warp_sum(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <class T>
__device__ __forceinline__ T tsr_warp_max(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) { T w = __shfl_xor_sync(0xffffffffu, v, o); v = w > v ? w : v; }
    return v;
}
template <class T>
__device__ __forceinline__ T tsr_warp_min(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) { T w = __shfl_xor_sync(0xffffffffu, v, o); v = w < v ? w : v; }
    return v;
}
// ---- warp scan: inclusive prefix sum over the lanes (Hillis-Steele, in lane order) ---------
// Step o = 1, 2, 4, 8, 16: lane i adds the value lane i - o holds after the previous step (lanes
// below o keep theirs). The order of the additions is fixed, so float results are reproducible.
template <class T>
__device__ __forceinline__ T tsr_warp_cumsum(T v) {
    const int lane = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        T u = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += u;
    }
    return v;
}
