// ---- f16 atomics: add, sub and exch through the 16-bit CAS loop (__half bits in an unsigned short)
__device__ __forceinline__ unsigned short tsr_f16_bits(float x) { __half h = __float2half_rn(x); return *reinterpret_cast<unsigned short*>(&h); }
__device__ __forceinline__ float tsr_f16_value(unsigned short b) { return __half2float(*reinterpret_cast<__half*>(&b)); }

TSR_ATOMIC_HALF_OPS(_block, f16, tsr_f16_bits, tsr_f16_value)
TSR_ATOMIC_HALF_OPS(, f16, tsr_f16_bits, tsr_f16_value)
TSR_ATOMIC_HALF_OPS(_system, f16, tsr_f16_bits, tsr_f16_value)
