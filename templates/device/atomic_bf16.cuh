// ---- bf16 atomics: add, sub and exch through the 16-bit CAS loop (__nv_bfloat16 bits in an unsigned short)
__device__ __forceinline__ unsigned short tsr_bf16_bits(float x) { __nv_bfloat16 h = __float2bfloat16_rn(x); return *reinterpret_cast<unsigned short*>(&h); }
__device__ __forceinline__ float tsr_bf16_value(unsigned short b) { return __bfloat162float(*reinterpret_cast<__nv_bfloat16*>(&b)); }

TSR_ATOMIC_HALF_OPS(_block, bf16, tsr_bf16_bits, tsr_bf16_value)
TSR_ATOMIC_HALF_OPS(, bf16, tsr_bf16_bits, tsr_bf16_value)
TSR_ATOMIC_HALF_OPS(_system, bf16, tsr_bf16_bits, tsr_bf16_value)
