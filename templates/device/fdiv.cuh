// ---- f32 division in fragment statements: IEEE, correctly rounded, with no call -------------
// `a / b` in CUDA C (without fast math) is correctly rounded, and NVCC emits it as a reciprocal,
// five FMAs and a range check (FCHK) that branches to a slow-path subroutine: one CALL per
// division. A whole-fragment statement divides every element of the lane (64 per lane for a 128 x
// 128 tile on 8 warps); the calls fix the registers the subroutine uses, which costs the registers
// of the surrounding loop. tsr_fdiv computes the same value as `/` (the same bits, the CPU backend
// computes `a / b`): the same fast path (a reciprocal refined by Newton's step, the quotient
// corrected once with its exact remainder) and a choice between the quotient and its neighbour by
// their exact remainders, a range check with plain comparisons, and an inlined slow path that
// divides the significands with the same fast path and rounds the result once
// (tests/language/tensor_cores/test_fdiv.py runs this algorithm on the host against `/`, with
// the reciprocal up to 1.5 ulp off: the ISA bounds rcp.approx.f32 by 1 ulp).
#if defined(TESSERA_HOST) && !defined(TSR_FDIV_RCP)
__device__ __forceinline__ float tsr_fdiv(float a, float b) { return a / b; }
#else
#if !defined(TSR_FDIV_RCP)
// rcp.approx.ftz.f32 (MUFU.RCP): at most 1 ulp from 1/b for normal b whose reciprocal is normal.
__device__ __forceinline__ float tsr_fdiv_rcp(float b) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(b));
    return r;
}
#define TSR_FDIV_RCP tsr_fdiv_rcp
#endif

// a / b correctly rounded when 2^-126 <= |b| < 2^126, |a| >= 2^-100 and the quotient is normal
// and below 2^127 (no step overflows or underflows, the remainders are exact). Newton's step and
// the remainder's correction give q within 1 ulp of a / b, not always the nearest float (where
// 1/b is just above a midpoint and the reciprocal was rounded down, as rcp.approx may: b =
// 0x1.fffffep0); of q and its neighbour toward a / b, the nearer one has the smaller remainder.
__device__ __forceinline__ float tsr_fdiv_core(float a, float b) {
    const float r0 = TSR_FDIV_RCP(b);
    const float r = fmaf(r0, fmaf(-b, r0, 1.0f), r0);
    const float q0 = __fmul_rn(a, r);
    const float q = fmaf(fmaf(-b, q0, a), r, q0);
    const float rem = fmaf(-b, q, a);  // the quotient is above |q| where rem has a's sign
    const float n = __uint_as_float(__float_as_uint(q) + (((__float_as_uint(rem) ^ __float_as_uint(a)) >> 31) ? ~0u : 1u));
    return fabsf(fmaf(-b, n, a)) < fabsf(rem) ? n : q;
}

// Every other operand: NaN, infinities and zeros as IEEE says; finite operands as their
// significands' quotient m in [0.5, 2] (the core, in range) scaled by the exponents' difference:
// exact when the result is normal; rounded once to the subnormal grid otherwise, with the exact
// remainder of m deciding the ties that m's own rounding made.
__device__ __forceinline__ float tsr_fdiv_slow(float a, float b) {
    const unsigned ua = __float_as_uint(a), ub = __float_as_uint(b);
    const unsigned sign = (ua ^ ub) & 0x80000000u, inf = 0x7f800000u;
    unsigned xa = ua & 0x7fffffffu, xb = ub & 0x7fffffffu;
    if (xa > inf || xb > inf || (xa == xb && (xa == 0u || xa == inf))) return __uint_as_float(0x7fffffffu);
    if (xa == inf || xb == 0u) return __uint_as_float(sign | inf);
    if (xa == 0u || xb == inf) return __uint_as_float(sign);
    int e = 0;  // the exponents' difference, subnormal operands normalised (x 2^24 is exact)
    if (xa < 0x00800000u) { xa = __float_as_uint(__uint_as_float(xa) * 16777216.0f); e -= 24; }
    if (xb < 0x00800000u) { xb = __float_as_uint(__uint_as_float(xb) * 16777216.0f); e += 24; }
    e += (int)(xa >> 23) - (int)(xb >> 23);
    const float ma = __uint_as_float((xa & 0x007fffffu) | 0x3f800000u);
    const float mb = __uint_as_float((xb & 0x007fffffu) | 0x3f800000u);
    const float m = tsr_fdiv_core(ma, mb);
    const unsigned um = __float_as_uint(m);
    e += (int)(um >> 23) - 127;  // the result's exponent (m's is -1, 0 or 1)
    if (e > 127) return __uint_as_float(sign | inf);
    if (e >= -126) return __uint_as_float(sign | ((unsigned)(e + 127) << 23) | (um & 0x007fffffu));
    const int shift = -126 - e < 25 ? -126 - e : 25;  // the significand bits below the subnormal grid
    const unsigned sig = (um & 0x007fffffu) | 0x00800000u, half = 1u << (shift - 1);
    const unsigned rest = sig & ((half << 1) - 1u), kept = sig >> shift;
    const float rem = fmaf(-mb, m, ma);  // exact: > 0 where the quotient is above m
    const bool up = rest > half || (rest == half && (rem > 0.0f || (rem == 0.0f && (kept & 1u))));
    return __uint_as_float(sign | (kept + (up ? 1u : 0u)));
}

__device__ __forceinline__ float tsr_fdiv(float a, float b) {
    const float q = tsr_fdiv_core(a, b), aq = fabsf(q), ab = fabsf(b);
    if ((ab >= 0x1p-126f) & (ab < 0x1p126f) & (fabsf(a) >= 0x1p-100f) & (aq >= 0x1p-125f) & (aq < 0x1p127f)) return q;
    return tsr_fdiv_slow(a, b);
}
#endif
