// ---- f16: values are computed in float and rounded back after every operation ----------------
#if !defined(TESSERA_HOST)
#include <cuda_fp16.h>
#endif
__device__ __forceinline__ float tsr_round_f16(float x) { return __half2float(__float2half_rn(x)); }
