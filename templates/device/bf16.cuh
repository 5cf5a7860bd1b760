// ---- bf16: values are computed in float and rounded back after every operation ---------------
#if !defined(TESSERA_HOST)
#include <cuda_bf16.h>
#endif
__device__ __forceinline__ float tsr_round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
