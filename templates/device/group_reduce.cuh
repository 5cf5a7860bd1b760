// ---- group reductions ----------------------------------------------------------------------
// Every tile gets the same result: each combines the per-warp partials in the same order.
// The leading barrier protects the scratch buffer from a previous reduction's readers.
struct tsr_op_sum { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; } };
struct tsr_op_max { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return b > a ? b : a; } };
struct tsr_op_min { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return b < a ? b : a; } };

template <int NT, class T, class Op>
__device__ __forceinline__ T tsr_group_reduce(T v, unsigned char* scratch_bytes, Op op) {
    T* scratch = reinterpret_cast<T*>(scratch_bytes);
    const int tid = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
    if (NT % 32 == 0) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
        __syncthreads();
        if ((tid & 31) == 0) scratch[tid >> 5] = v;
        __syncthreads();
        T r = scratch[0];
        for (int w = 1; w < NT / 32; ++w) r = op(r, scratch[w]);
        return r;
    }
    __syncthreads();
    scratch[tid] = v;
    __syncthreads();
    T r = scratch[0];
    for (int i = 1; i < NT; ++i) r = op(r, scratch[i]);
    return r;
}
template <int NT, class T>
__device__ __forceinline__ T tsr_group_sum(T v, unsigned char* s) { return tsr_group_reduce<NT>(v, s, tsr_op_sum()); }
template <int NT, class T>
__device__ __forceinline__ T tsr_group_max(T v, unsigned char* s) { return tsr_group_reduce<NT>(v, s, tsr_op_max()); }
template <int NT, class T>
__device__ __forceinline__ T tsr_group_min(T v, unsigned char* s) { return tsr_group_reduce<NT>(v, s, tsr_op_min()); }
// ---- group scan: inclusive prefix sum in tile_linear_id() order ------------------------------
// Whole warps: each warp scans itself (tsr_warp_cumsum's order), its last lane stores the warp's
// total, and tile t adds the totals of the warps before it, left to right, to its warp's scan:
// ((total_0 + total_1) + ...) + scan. Otherwise every tile sums scratch[0..t] left to right.
template <int NT, class T>
__device__ __forceinline__ T tsr_group_cumsum(T v, unsigned char* scratch_bytes) {
    T* scratch = reinterpret_cast<T*>(scratch_bytes);
    const int tid = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
    if (NT % 32 == 0) {
        const int lane = tid & 31;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            T u = __shfl_up_sync(0xffffffffu, v, o);
            if (lane >= o) v += u;
        }
        __syncthreads();
        if (lane == 31) scratch[tid >> 5] = v;
        __syncthreads();
        const int w = tid >> 5;
        if (w == 0) return v;
        T p = scratch[0];
        for (int i = 1; i < w; ++i) p += scratch[i];
        return p + v;
    }
    __syncthreads();
    scratch[tid] = v;
    __syncthreads();
    T r = scratch[0];
    for (int i = 1; i <= tid; ++i) r += scratch[i];
    return r;
}
